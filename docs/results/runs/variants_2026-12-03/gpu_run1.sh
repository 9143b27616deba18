#!/bin/bash
# First GPU call (H200, 2026-12-03): issue 34's window and softcap in stage 05's v1, v13, v14 and
# stage 06's GPU backwards (gpu_v1 ... gpu_v4, _det).
# The new tests (the variant battery, v13's widths with windows across its blocks), the stage
# program with --window/--softcap end to end (checked against the float64 reference), the
# sanitizers on the three kernels with a window and a softcap, the op's GPU tests, and
# tools/variant_bench.py. (Every other stage 05 GPU test case: the second call.)
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
P=$B/05_cuda_tiled
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt
{
$P --kernel v13 --dtype bf16 --batch 2 --heads 8 --kv-heads 2 --seq-q 700 --seq-k 900 --head-dim 128 --causal --window 200,0; echo "rc=$?"
$P --kernel auto --dtype fp16 --heads 4 --seq-q 333 --seq-k 333 --head-dim 96 --window 50,20 --softcap 20; echo "rc=$?"
$P --kernel v1 --dtype fp32 --heads 4 --seq-q 300 --seq-k 300 --head-dim 64 --causal --window 30,-1 --softcap 5; echo "rc=$?"
$P --kernel v14 --dtype bf16 --batch 3 --heads 8 --kv-heads 2 --seq-q 2 --seq-k 3000 --causal --window 500,0 --softcap 30 --cache-lens 0,1700,3000 --page-size 64; echo "rc=$?"
$P --kernel v12 --dtype bf16 --seq-q 64 --seq-k 64 --head-dim 128 --window 16,0; echo "rc=$? (expected 2)"
} > $L/program.log 2>&1
timeout 90 compute-sanitizer --tool memcheck $P --kernel v14 --dtype bf16 --batch 3 --heads 8 --kv-heads 2 --seq-q 2 --seq-k 3000 --causal --window 500,0 --softcap 30 --cache-lens 0,1700,3000 --page-size 64 > $L/san_v14_memcheck.log 2>&1; echo "rc=$?" >> $L/san_v14_memcheck.log
for k in v13 v1; do
  for tool in memcheck racecheck; do
    timeout 90 compute-sanitizer --tool $tool $P --kernel $k --dtype bf16 --heads 4 --kv-heads 2 --seq-q 200 --seq-k 300 --head-dim 128 --causal --window 100,0 --softcap 30 > $L/san_${k}_$tool.log 2>&1; echo "rc=$?" >> $L/san_${k}_$tool.log
  done
done
grep -h "ERROR SUMMARY\|^rc=" $L/san_*.log
B6=$B/06_backward_recompute
{ for k in gpu_v1 gpu_v3 gpu_v4_det auto; do
  $B6 --device gpu --bwd-kernel $k --dtype bf16 --heads 4 --kv-heads 2 --seq-q 300 --seq-k 500 --head-dim 128 --causal --window 100,0 --softcap 30; echo "rc=$? $k"; done; } > $L/program06.log 2>&1
timeout 120 compute-sanitizer --tool memcheck $B6 --device gpu --bwd-kernel gpu_v3 --dtype bf16 --heads 4 --kv-heads 2 --seq-q 200 --seq-k 300 --head-dim 96 --window 50,20 --softcap 10 > $L/san_06_memcheck.log 2>&1; echo "rc=$?" >> $L/san_06_memcheck.log
$B/test_06_backward_gpu -ltc 2>/dev/null | grep "^06 gpu variants" | sed 's/,/?/g' > $L/cases06.txt
i=0; while read -r c; do i=$((i+1)); ( timeout 300 $B/test_06_backward_gpu -tc="$c" > $L/v06_$i.log 2>&1; echo "rc=$? $c" >> $L/v06_$i.log ) & done < $L/cases06.txt
n=0; for c in "05 v1: variant battery*" "05 v13? v14 and auto: variant battery*" "05 v13: windows across*" "05 v14: windows and softcaps*"; do
  n=$((n+1)); ( timeout 300 $B/test_05_cuda_tiled -tc="$c" > $L/variant_$n.log 2>&1; echo "rc=$? $c" >> $L/variant_$n.log ) & done
(cd python/tests && FA_COURSE_LIB_DIR=$OLDPWD/$B PYTHONPATH=$OLDPWD/python timeout 300 python3 test_gpu.py -v) > $L/test_gpu_py.log 2>&1; echo "rc=$?" >> $L/test_gpu_py.log
wait
# The benchmark alone on the GPU, in the time left (it saves its JSON after every shape).
left=$((570 - SECONDS)); echo "bench gets ${left} s" > $L/variant_bench.log
[ $left -gt 30 ] && timeout $left python3 tools/variant_bench.py --lib $B/libfa05.so --dims 128 --json $OUT/variant_bench.json >> $L/variant_bench.log 2>&1; echo "bench rc=$?" >> $L/variant_bench.log
tail -qn 4 $L/variant_*.log; tail -qn 1 $L/v06_*.log; grep -h "rc=" $L/program06.log; tail -5 $L/variant_bench.log; tail -5 $L/test_gpu_py.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
