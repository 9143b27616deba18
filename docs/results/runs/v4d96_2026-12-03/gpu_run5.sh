#!/bin/bash
# Fifth GPU call (H200, 2026-12-03), issue 33: v14's split count now one wave of one block per SM
# (s = SMs / units), after run 4's sweep. The v14 and auto tests, BM_decode (the sweep with two
# more shapes: 72 and 96 units), decode_bench beside SDPA, and issue 33's grid.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
n=0
for c in "05 v14 decode*" "05 v14 KV cache: per-sequence*" "05 v14: windows*" "05 auto*" "05 v14: every native width*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 300 $B/test_05_cuda_tiled -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
wait
timeout 150 $B/bench_05_cuda_tiled --benchmark_filter='BM_decode' --benchmark_out=$OUT/bench_decode.json --benchmark_out_format=json > $L/bench_decode.log 2>&1; echo "rc=$?" >> $L/bench_decode.log
timeout 100 python3 tools/decode_bench.py --lib $B/libfa05.so --kernels v13,v14,auto --json $OUT/decode_bench.json > $L/decode_bench.log 2>&1; echo "rc=$?" >> $L/decode_bench.log
timeout 220 python3 tools/decode_bench.py --lib $B/libfa05.so --grid --reps 20 --kernels v14 --json $OUT/decode_grid.json > $L/decode_grid.log 2>&1; echo "rc=$?" >> $L/decode_grid.log
tail -qn 1 $L/case_*.log
grep -E "decode_splits" $L/bench_decode.log | grep -v ERROR | sed -E 's/ +/ /g; s/min_time:0.100.manual_time //; s/BM_decode_splits.//' | cut -c1-60
grep -v "^sdpa eff" $L/decode_bench.log | grep -E "v14|auto|cudnn" | cut -c1-110
tail -3 $L/decode_grid.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
