#!/bin/bash
# Third GPU call (H200, 2026-12-03), issue 37: BM_shape for v13 at N = 4096 and 16384 (run 1 swept
# 512, 1024, 2048, 8192), d = 32, 64, 192, 256: the thresholds of the N-dependent default checked
# on both sides of 8192 and at the N = 16384.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
timeout 400 $B/bench_05_cuda_tiled --benchmark_filter='BM_shape/kernel:12/.*/N:(4096|16384)/d:(32|64|192|256)/' \
  --benchmark_out=$OUT/bench_shape_v13_n.json --benchmark_out_format=json > $L/bench_shape.log 2>&1; echo "rc=$?" >> $L/bench_shape.log
grep -E "^BM_shape" $L/bench_shape.log | sed -E 's/ +/ /g; s/BM_shape.kernel:12.//; s/.min_time:0.100.manual_time//' | awk '{t=""; for(i=1;i<=NF;i++) if($i ~ /^TFLOP/) t=$i; print $1, $2, t}'
tail -1 $L/bench_shape.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
