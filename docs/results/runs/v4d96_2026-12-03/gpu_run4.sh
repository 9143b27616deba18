#!/bin/bash
# Fourth GPU call (H200, 2026-12-03), issue 33: v14's K/V copies with a fixed 16-byte column per
# thread (copy_kv_tiles: run 3's ncu had v14 issuing on half its cycles, about half of them the
# general copy loop's address arithmetic in the SASS). Every v14 test, compute-sanitizer on the
# small paged case and the decode test, the op's GPU tests (decode), BM_decode, decode_bench beside
# SDPA, ncu at the two shapes of run 3.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
n=0
for c in "05 v14: every native width*" "05 v14 decode*" "05 v14 KV cache: per-sequence*" "05 v14 KV cache: one small*" "05 v14: windows*" "05 auto*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 300 $B/test_05_cuda_tiled -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
for tool in memcheck racecheck synccheck; do
  ( timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_05_cuda_tiled -tc="05 v14 KV cache: one small*" > $L/san_$tool.log 2>&1; echo "rc=$? $tool" >> $L/san_$tool.log ) &
done
(cd python/tests && FA_COURSE_LIB_DIR=$OLDPWD/$B PYTHONPATH=$OLDPWD/python timeout 300 python3 test_gpu.py -v) > $L/test_gpu_py.log 2>&1; echo "rc=$?" >> $L/test_gpu_py.log &
wait
timeout 150 $B/bench_05_cuda_tiled --benchmark_filter='BM_decode' --benchmark_out=$OUT/bench_decode.json --benchmark_out_format=json > $L/bench_decode.log 2>&1; echo "rc=$?" >> $L/bench_decode.log
timeout 120 python3 tools/decode_bench.py --lib $B/libfa05.so --json $OUT/decode_bench.json > $L/decode_bench.log 2>&1; echo "rc=$?" >> $L/decode_bench.log
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats"
for spec in "1 32 8 131072 33" "8 32 8 32768 0"; do
  set -- $spec
  timeout 120 ncu --kernel-name regex:forward_kernel --launch-skip 3 --launch-count 1 $SEC $B/bench_05_cuda_tiled \
    --benchmark_filter="BM_decode_splits/B:$1/H:$2/H_kv:$3/N_k:$4/splits:$5/" > $L/ncu_v14_$1_$3_$4.txt 2>&1
done
tail -qn 3 $L/case_*.log $L/san_*.log; tail -4 $L/test_gpu_py.log
grep -E "decode_splits|decode_cache" $L/bench_decode.log | grep -v ERROR | sed -E 's/ +/ /g; s/min_time:0.100.manual_time //' | cut -c1-90
for f in $L/ncu_*.txt; do echo "== $f"; grep -E "DRAM Throughput|Duration|Issued Warp|No Eligible|Warp Cycles Per Issued|Registers Per" $f | head -8; done
grep -v "^sdpa eff" $L/decode_bench.log | grep -E "v14|cudnn|flash" | tail -20
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
