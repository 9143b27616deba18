#!/bin/bash
# Second GPU call (H200, 2026-12-03): (1) the gpu_v4 d = 96 variant case that checked nothing in run 1;
# (2) v14's paged KV cache with the page offsets looked up a tile ahead into shared memory: every
# v14 test, compute-sanitizer on a small paged case, BM_decode_cache (the cache's cost) and
# BM_decode_splits (forced split counts: the measurement behind split_kv_plan), decode_bench.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
n=0
( start=$SECONDS; timeout 300 $B/test_06_backward_gpu -tc="06 gpu variants: gpu_v4? gpu_v4_det at d = 96*" > $L/case_06_96.log 2>&1; echo "rc=$? $((SECONDS-start))s" >> $L/case_06_96.log ) &
for c in "05 v14: every native width*" "05 v14 decode*" "05 v14 KV cache: per-sequence*" "05 v14 KV cache: one small*" "05 v14: windows*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 300 $B/test_05_cuda_tiled -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
S="05 v14 KV cache: one small*"
for tool in memcheck racecheck synccheck; do
  ( timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_05_cuda_tiled -tc="$S" > $L/san_$tool.log 2>&1; echo "rc=$? $tool" >> $L/san_$tool.log ) &
done
wait
timeout 200 $B/bench_05_cuda_tiled --benchmark_filter='BM_decode' --benchmark_out=$OUT/bench_decode.json --benchmark_out_format=json > $L/bench_decode.log 2>&1; echo "rc=$?" >> $L/bench_decode.log
timeout 120 python3 tools/decode_bench.py --lib $B/libfa05.so --json $OUT/decode_bench.json > $L/decode_bench.log 2>&1; echo "rc=$?" >> $L/decode_bench.log
tail -qn 4 $L/case_*.log; tail -qn 3 $L/san_*.log
grep -E "BM_decode|rc=" $L/bench_decode.log | sed -E 's/ +/ /g' | cut -c1-150
tail -14 $L/decode_bench.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
