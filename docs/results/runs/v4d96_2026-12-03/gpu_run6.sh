#!/bin/bash
# Sixth GPU call (H200, 2026-12-03), issue 33: the 6-deep ring at D = 128 again, now with the lean
# copy loop (run 3 tried it with the old one and lost): one block an SM, 5 tiles in flight.
# base = HEAD (3 stages), s6 = the same tree with stages(128) = 6. The s6 build's v14 tests and
# racecheck, BM_decode_splits on both builds, decode_bench (v14) on the s6 lib.
C=$PWD/build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
n=0
for c in "05 v14: every native width*" "05 v14 decode*" "05 v14 KV cache: per-sequence*" "05 v14: windows*"; do
  n=$((n+1)); ( start=$SECONDS; LD_LIBRARY_PATH=$C/s6:$C timeout 200 $C/s6/test_05_cuda_tiled -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
( LD_LIBRARY_PATH=$C/s6:$C timeout 200 compute-sanitizer --tool racecheck --error-exitcode 9 $C/s6/test_05_cuda_tiled -tc="05 v14 KV cache: one small*" > $L/san_racecheck.log 2>&1; echo "rc=$? racecheck" >> $L/san_racecheck.log ) &
wait
for v in base s6; do
  LD_LIBRARY_PATH=$C/$v:$C timeout 90 $C/$v/bench_05_cuda_tiled --benchmark_filter='BM_decode_splits' --benchmark_out=$OUT/splits_$v.json --benchmark_out_format=json > $L/splits_$v.log 2>&1; echo "rc=$?" >> $L/splits_$v.log
done
LD_LIBRARY_PATH=$C/s6:$C timeout 60 python3 tools/decode_bench.py --lib $C/s6/libfa05.so --kernels v14 --json $OUT/decode_bench_s6.json > $L/decode_bench_s6.log 2>&1; echo "rc=$?" >> $L/decode_bench_s6.log
tail -qn 1 $L/case_*.log $L/san_*.log
for v in base s6; do echo "== $v"; grep -E "decode_splits" $L/splits_$v.log | grep -v ERROR | sed -E 's/ +/ /g; s/min_time:0.100.manual_time //; s/BM_decode_splits.//' | cut -c1-48; tail -1 $L/splits_$v.log; done
grep -E "v14|cudnn" $L/decode_bench_s6.log | cut -c1-110
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
