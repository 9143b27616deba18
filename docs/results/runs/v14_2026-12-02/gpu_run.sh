#!/bin/bash
# one GPU call: v14 tests, stage 06 width-256 tests, v14 sanitizer, decode bench
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/env.txt
( stdbuf -oL timeout 200 $B/test_05_cuda_tiled -tc='*v14*' > $OUT/t05_v14.log 2>&1; echo "rc=$?" >> $OUT/t05_v14.log ) &
( stdbuf -oL timeout 200 $B/test_06_backward_gpu -tc='*widths*auto at d = 111*,*widths*gpu_v3*,*widths*sm_80*,*widths*scale 0.3*' > $OUT/t06_w.log 2>&1; echo "rc=$?" >> $OUT/t06_w.log ) &
wait
tail -5 $OUT/t05_v14.log; tail -5 $OUT/t06_w.log
timeout 60 compute-sanitizer --tool memcheck $B/05_cuda_tiled --kernel v14 --dtype bf16 --batch 2 --heads 8 --kv-heads 2 --seq-q 3 --seq-k 1000 --head-dim 80 --causal --splits 3 > $OUT/san.log 2>&1; echo "memcheck rc=$?" >> $OUT/san.log
timeout 60 compute-sanitizer --tool racecheck $B/05_cuda_tiled --kernel v14 --dtype fp16 --batch 1 --heads 16 --kv-heads 2 --seq-q 5 --seq-k 700 --head-dim 256 --splits 2 >> $OUT/san.log 2>&1; echo "racecheck rc=$?" >> $OUT/san.log
tail -4 $OUT/san.log
FA_COURSE_LIB_DIR=$PWD/$B timeout 200 python3 tools/decode_bench.py --lib $B/libfa05.so --json $OUT/decode_bench.json > $OUT/decode.log 2>&1; echo "decode rc=$?" >> $OUT/decode.log
cat $OUT/decode.log | tail -45
