#!/bin/bash
# Eighth GPU call (2026-12-08 UTC), short: the PyTorch op's FP8 tests (fa_course.attention_fp8 and
# quantize_fp8: the two entries' bits, the FP8 rule and the RMSE check against float64, refusals,
# opcheck) on the committed v15 (runs 6's build), libfa05.so carried.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv > $L/gpu.txt
R=$PWD; (cd python/tests && FA_COURSE_LIB_DIR=$R/build-lead/carry PYTHONPATH=$R/python timeout 200 python3 -m unittest -v \
  test_gpu.Gpu.test_fp8_against_float64_and_the_e4m3_entry test_gpu.Gpu.test_fp8_refusals_and_registration) > $L/torch_fp8.log 2>&1
echo "torch fp8 rc=$?"; tail -30 $L/torch_fp8.log
