#!/bin/bash
# Second GPU call (H200, 2026-12-04), issue 35: v15 with ping-pong (its two consumer warpgroups
# take turns at the tensor cores through two named barriers) against run 1's v15 (bench_v15a, the
# same source without the turns), one process each, alternated; v15's tests again (the e4m3 entry
# point test now feeds both entry points the same bf16 values), compute-sanitizer (memcheck,
# racecheck, synccheck: the named barriers), tools/fp8_bench.py, and ncu of both builds.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
timeout 200 $B/test_05_cuda_tiled -tc="05 v15*" > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "v15 RMSE|test cases|assertions" $L/tests.log
grep -m3 -A12 "ERROR" $L/tests.log | head -40
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_05_cuda_tiled -tc="05 v15 (FP8): one small*" > $L/san_$tool.log 2>&1
  echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/san_$tool.log | tail -1)"
done
F='BM_fp8/N:[0-9]+/causal:[01]/mode:1'
for rep in 1 2; do
  for b in bench_v15a bench_05_cuda_tiled; do
    timeout 60 $B/$b --benchmark_filter="$F" --benchmark_out=$OUT/bench_fp8_${b}_$rep.json --benchmark_out_format=json > $L/bench_${b}_$rep.log 2>&1
    echo "$b rep $rep rc=$?"; grep -E "^BM_" $L/bench_${b}_$rep.log | sed -E 's/ +/ /g; s/.min_time:0.100.manual_time//' | awk '{t=""; for(i=1;i<=NF;i++) if($i ~ /^TFLOP/) t=$i; print $1, $2, t}'
  done
done
timeout 150 python3 tools/fp8_bench.py --lib $B/libfa05.so --json $OUT/fp8_bench_h200.json > $L/fp8_bench.log 2>&1; echo "fp8_bench rc=$?"
tail -16 $L/fp8_bench.log
M=smsp__issue_active.avg.pct_of_peak_sustained_active
for r in barrier long_scoreboard wait math_pipe_throttle short_scoreboard sleeping dispatch_stall mio_throttle selected not_selected; do M=$M,smsp__warp_issue_stalled_${r}_per_warp_active.pct; done
for b in bench_v15a bench_05_cuda_tiled; do
  timeout 90 ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --metrics $M -k regex:forward_kernel --launch-count 1 \
    $B/$b --benchmark_filter='BM_fp8/N:8192/causal:0/mode:1' --benchmark_min_time=0.01 > $L/ncu_$b.log 2>&1; echo "ncu $b rc=$?"
  grep -E "Duration|Compute \(SM\)|Issue Slots|Executed Ipc A|smsp__|Pipe" $L/ncu_$b.log | head -30
done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
