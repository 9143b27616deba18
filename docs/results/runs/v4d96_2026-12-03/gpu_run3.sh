#!/bin/bash
# Third GPU call (H200, 2026-12-03), issue 33: what limits v14's bandwidth, and one try at it.
# s6 = a build of the same tree with v14's ring 6 tiles deep at D = 128 (one block of 4 warps an SM,
# 5 tiles = 160 KiB in flight) instead of 3 (two blocks an SM, 2 tiles each = 128 KiB).
# (1) the v14 tests on the s6 build; (2) BM_decode_splits and BM_decode_cache on both builds;
# (3) ncu on v14 (both builds) and on cuDNN's decode at two shapes; (4) decode_bench on the s6 lib.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
n=0
for c in "05 v14: every native width*" "05 v14 decode*" "05 v14 KV cache: per-sequence*" "05 v14 KV cache: one small*" "05 v14: windows*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 300 $B/test_05_s6 -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
( timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_05_s6 -tc="05 v14 KV cache: one small*" > $L/san_racecheck.log 2>&1; echo "rc=$? racecheck" >> $L/san_racecheck.log ) &
wait
for v in base s6; do
  bin=$B/bench_05_cuda_tiled; [ $v = s6 ] && bin=$B/bench_05_s6
  timeout 150 $bin --benchmark_filter='BM_decode' --benchmark_out=$OUT/bench_decode_$v.json --benchmark_out_format=json > $L/bench_decode_$v.log 2>&1; echo "rc=$?" >> $L/bench_decode_$v.log
done
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats"
for spec in "base 1 32 8 131072 33" "base 8 32 8 32768 0" "s6 1 32 8 131072 16" "s6 8 32 8 32768 0"; do
  set -- $spec; bin=$B/bench_05_cuda_tiled; [ $1 = s6 ] && bin=$B/bench_05_s6
  timeout 120 ncu --kernel-name regex:forward_kernel --launch-skip 3 --launch-count 1 $SEC $bin \
    --benchmark_filter="BM_decode_splits/B:$2/H:$3/H_kv:$4/N_k:$5/splits:$6/" > $L/ncu_v14_$1_$2_$4_$5.txt 2>&1
done
for spec in "1 32 8 131072" "8 32 8 32768"; do
  set -- $spec
  timeout 120 ncu --profile-from-start off $SEC python3 docs/results/runs/v4d96_2026-12-03/ncu_cudnn_decode.py $1 $2 $3 $4 > $L/ncu_cudnn_$1_$3_$4.txt 2>&1
done
timeout 120 python3 tools/decode_bench.py --lib $B/libfa05_s6.so --json $OUT/decode_bench_s6.json > $L/decode_bench_s6.log 2>&1; echo "rc=$?" >> $L/decode_bench_s6.log
tail -qn 3 $L/case_*.log $L/san_*.log
for v in base s6; do grep -E "decode_splits|decode_cache" $L/bench_decode_$v.log | grep -v ERROR | sed -E 's/ +/ /g; s/min_time:0.100.manual_time //' | cut -c1-90; done
for f in $L/ncu_*.txt; do echo "== $f"; grep -E "^  [a-z_]*forward|^  [a-zA-Z_].*\(|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Registers Per|Issued Warp|No Eligible|Warp Cycles Per Issued|Block Size|Grid Size" $f | head -16; done
grep -v "^sdpa eff" $L/decode_bench_s6.log | tail -40
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
