#!/bin/bash
# Fifth GPU call (H200, 2026-12-03), issue 37: v13 at d = 96 and 128 with wider key blocks, from
# FlashAttention-3's tile sizes (128 x 176 not causal at d = 128): 128 x 144 (Q in registers,
# ptxas: no spills) and 128 x 176 (Q from shared memory, one Q buffer; spills 380 bytes at 128),
# beside 128 x 128 in BM_shape; then every v13 shape's test and compute-sanitizer on 128 x 144.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
timeout 120 $B/bench_05_cuda_tiled --benchmark_filter='BM_shape/kernel:12/Br:128/Bc:(128|144|176)/N:(1024|4096|16384)/d:(96|128)/' \
  --benchmark_out=$OUT/bench_shape_v13_wide.json --benchmark_out_format=json > $L/bench_shape.log 2>&1; echo "rc=$?" >> $L/bench_shape.log
grep -E "^BM_shape" $L/bench_shape.log | sed -E 's/ +/ /g; s/BM_shape.kernel:12.//; s/.min_time:0.100.manual_time//' | awk '{t=""; for(i=1;i<=NF;i++) if($i ~ /^TFLOP/) t=$i; print $1, $2, t}'
( timeout 150 $B/test_05_cuda_tiled -tc="05 v13: every compiled block shape*" > $L/case_1.log 2>&1; echo "rc=$? shapes" >> $L/case_1.log ) &
( timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/05_cuda_tiled --kernel v13 --dtype bf16 --batch 2 --heads 4 \
    --kv-heads 2 --seq-q 300 --seq-k 200 --head-dim 120 --causal --block-q 128 --block-k 144 --persistent-blocks 3 > $L/san.log 2>&1
  echo "rc=$? memcheck $(grep -E 'ERROR SUMMARY' $L/san.log | tail -1)" >> $L/san.log ) &
wait
tail -n 3 $L/case_1.log; tail -1 $L/san.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
