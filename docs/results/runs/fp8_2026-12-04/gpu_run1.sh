#!/bin/bash
# First GPU call (H200, 2026-12-04), issue 35: v15 (FP8) correct first (its GPU tests, then
# compute-sanitizer on its small case), then its speed beside v13 in bf16 (BM_fp8, BM_attn in one
# process), beside SDPA (tools/fp8_bench.py, one process), and one ncu profile at N = 8192.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt
timeout 200 $B/test_05_cuda_tiled -tc="05 v15*" -s > $L/tests.log 2>&1; echo "rc=$?" >> $L/tests.log
grep -E "v15 RMSE|test cases|assertions|rc=" $L/tests.log; grep -m5 -B2 -A12 "ERROR" $L/tests.log | head -60
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_05_cuda_tiled -tc="05 v15 (FP8): one small*" > $L/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/san_$tool.log | tail -1)"
done
timeout 150 $B/bench_05_cuda_tiled --benchmark_filter='BM_fp8|BM_attn/kernel:12/dtype:2/N:[0-9]+/d:128/' \
  --benchmark_out=$OUT/bench_fp8_h200.json --benchmark_out_format=json > $L/bench.log 2>&1; echo "bench rc=$?"
grep -E "^BM_" $L/bench.log | sed -E 's/ +/ /g; s/.min_time:0.100.manual_time//' | awk '{t=""; for(i=1;i<=NF;i++) if($i ~ /^TFLOP/) t=$i; print $1, $2, t}'
timeout 150 python3 tools/fp8_bench.py --lib $B/libfa05.so --json $OUT/fp8_bench_h200.json > $L/fp8_bench.log 2>&1; echo "fp8_bench rc=$?"
cat $L/fp8_bench.log | tail -20
timeout 90 ncu --section SpeedOfLight --section WarpStateStats --section LaunchStats --section Occupancy -k regex:forward_kernel --launch-count 1 \
  $B/bench_05_cuda_tiled --benchmark_filter='BM_fp8/N:8192/causal:0/mode:1' --benchmark_min_time=0.01 > $L/ncu.log 2>&1; echo "ncu rc=$?"
grep -E "Duration|Throughput|Registers|Achieved Occupancy|Issue Slots|Stall|Warp Cycles" $L/ncu.log | head -30
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
