#!/bin/bash
# First GPU call (H200, 2026-12-03): issue 34's window and softcap in stage 05's v1 and v13.
# The new tests (the variant battery, v13's widths with windows across its blocks), the stage
# program with --window/--softcap end to end (checked against the float64 reference), the
# sanitizers on both kernels with a window and a softcap, then tools/variant_bench.py, and
# every stage 05 GPU test case (v1 and v13 changed where they mask), one process each.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
P=$B/05_cuda_tiled
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt
{
$P --kernel v13 --dtype bf16 --batch 2 --heads 8 --kv-heads 2 --seq-q 700 --seq-k 900 --head-dim 128 --causal --window 200,0; echo "rc=$?"
$P --kernel auto --dtype fp16 --heads 4 --seq-q 333 --seq-k 333 --head-dim 96 --window 50,20 --softcap 20; echo "rc=$?"
$P --kernel v1 --dtype fp32 --heads 4 --seq-q 300 --seq-k 300 --head-dim 64 --causal --window 30,-1 --softcap 5; echo "rc=$?"
$P --kernel v12 --dtype bf16 --seq-q 64 --seq-k 64 --head-dim 128 --window 16,0; echo "rc=$? (expected 2)"
} > $L/program.log 2>&1
for k in v13 v1; do
  for tool in memcheck racecheck; do
    timeout 300 compute-sanitizer --tool $tool $P --kernel $k --dtype bf16 --heads 4 --kv-heads 2 --seq-q 300 --seq-k 500 --head-dim 128 --causal --window 100,0 --softcap 30 > $L/san_${k}_$tool.log 2>&1; echo "rc=$?" >> $L/san_${k}_$tool.log
  done
done
grep -h "ERROR SUMMARY\|^rc=" $L/san_*.log
( for c in "05 v1: variant battery*" "05 v13 and auto: variant battery*" "05 v13: windows across*"; do
    timeout 500 $B/test_05_cuda_tiled -tc="$c" > "$L/variant_${c:0:12}.log" 2>&1; echo "rc=$? $c"; done ) > $L/variant_rc.txt &
timeout 400 python3 tools/variant_bench.py --lib $B/libfa05.so --json $OUT/variant_bench.json > $L/variant_bench.log 2>&1; echo "bench rc=$?" >> $L/variant_bench.log
wait
cat $L/variant_rc.txt; tail -5 $L/variant_bench.log
$B/test_05_cuda_tiled -ltc 2>/dev/null | grep -v '^\[doctest\]\|^=====' | grep -v "variant\|windows across" | sed 's/,/?/g' > $L/cases.txt
wc -l < $L/cases.txt
i=0; while read -r c; do i=$((i+1)); echo "$i|$c"; done < $L/cases.txt | xargs -P 16 -d '\n' -I{} bash -c 'n=${1%%|*}; c=${1#*|}; timeout 300 '$B'/test_05_cuda_tiled -tc="$c" > '$L'/case_$n.log 2>&1; echo "rc=$? $c" >> '$L'/case_$n.log' _ {}
grep -h '^rc=' $L/case_*.log | sort | uniq -c | sort -rn | head -60
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
