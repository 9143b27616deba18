#!/bin/bash
# Third GPU call (H200, 2026-12-04), issue 35: v15's float32 merge in one FFMA an element (O kept
# in units of the latest block's V scale) against run 2's v15 (bench_v15b: two operations an
# element), alternated, one process each; then v15's tests and racecheck on the new build, and
# tools/fp8_bench.py (v15, v13, SDPA in one process) for the notebook's table.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
F='BM_fp8/N:[0-9]+/causal:[01]/mode:1'
for rep in 1 2; do
  for b in bench_v15b bench_05_cuda_tiled; do
    timeout 60 $B/$b --benchmark_filter="$F" --benchmark_out=$OUT/bench_fp8_${b}_$rep.json --benchmark_out_format=json > $L/bench_${b}_$rep.log 2>&1
    echo "$b rep $rep rc=$?"; grep -E "^BM_" $L/bench_${b}_$rep.log | sed -E 's/ +/ /g; s/.min_time:0.100.manual_time//' | awk '{t=""; for(i=1;i<=NF;i++) if($i ~ /^TFLOP/) t=$i; print $1, $2, t}'
  done
done
timeout 200 $B/test_05_cuda_tiled -tc="05 v15*" > $L/tests.log 2>&1; echo "tests rc=$?"; grep -E "v15 RMSE|test cases|assertions" $L/tests.log
grep -m3 -A12 "ERROR" $L/tests.log | head -40
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 $B/test_05_cuda_tiled -tc="05 v15 (FP8): one small*" > $L/san_racecheck.log 2>&1
echo "racecheck rc=$? $(grep -E 'RACECHECK SUMMARY' $L/san_racecheck.log | tail -1)"
timeout 150 python3 tools/fp8_bench.py --lib $B/libfa05.so --json $OUT/fp8_bench_h200.json > $L/fp8_bench.log 2>&1; echo "fp8_bench rc=$?"
tail -16 $L/fp8_bench.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
