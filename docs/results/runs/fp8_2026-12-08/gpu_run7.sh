#!/bin/bash
# Seventh GPU call (2026-12-08 UTC): run 6's merge put the one-FFMA loop inside a branch and cost 3-5%
# (H100: 737 against 760-773 TFLOP/s at N = 16384). Here the rare case only rescales O_j before the
# one path of FFMAs (v15_fixup_first.patch beside this script: git apply it first). Every v15 test again, the sanitizer on the spread problem, the PyTorch op's FP8
# tests (fa_course.attention_fp8, quantize_fp8), then old against new.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv > $L/gpu.txt
run() { timeout 300 $B/$1 -tc="$2" > $L/$3.log 2>&1; echo "$3 rc=$? $(grep -E 'test cases' $L/$3.log)"; }
[ -z "$SKIP_TESTS" ] && run test_05_cuda_tiled "05 v15*" v15 &
wait
grep -E "RMSE|ERROR" -A3 $L/v15.log | head -30
[ -z "$SKIP_TESTS" ] && for t in "05 v15 (FP8): V blocks whose scales*"; do
  timeout 150 compute-sanitizer --tool memcheck $B/test_05_cuda_tiled -tc="$t" >> $L/sanitizer.log 2>&1; echo "sanitizer ($t) rc=$? $(tail -1 $L/sanitizer.log)"
done
R=$PWD; (cd python/tests && FA_COURSE_LIB_DIR=$R/$B PYTHONPATH=$R/python timeout 200 python3 -m unittest -v \
  test_gpu.Gpu.test_fp8_against_float64_and_the_e4m3_entry test_gpu.Gpu.test_fp8_refusals_and_registration) > $L/torch_fp8.log 2>&1
echo "torch fp8 rc=$?"; tail -25 $L/torch_fp8.log
F='BM_fp8/N:(8192|16384)/causal:[01]/mode:1'
for rep in 1 2; do
  for k in old new; do
    $B/bench_05_cuda_tiled_$k --benchmark_filter="$F" --benchmark_out=$L/bench_${k}_$rep.json --benchmark_out_format=json > $L/bench_${k}_$rep.txt 2>&1
    echo "bench $k rep $rep rc=$?"; grep -E "^BM_fp8" $L/bench_${k}_$rep.txt | grep -oE "^BM_fp8/N:[0-9]+/causal:[01]|TFLOP/s=[0-9.]+" | paste -s -d" "
  done
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
