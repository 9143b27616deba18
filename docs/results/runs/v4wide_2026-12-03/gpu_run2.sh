#!/bin/bash
# Second GPU call (H200, 2026-12-03): gpu_v4 at d = 192 and 256, second version (warpgroup 0 makes
# S^T and P^T, warpgroup 1 dP^T and dS^T; no barrier inside a warpgroup branch). The tests of run
# 1 again (the wide variants split by width), compute-sanitizer, BM_bwd for gpu_v3 and gpu_v4,
# compare_torch's backward beside SDPA, and ncu on both kernels at d = 256 and 192, N = 8192.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
n=0
for c in "06 gpu widths: gpu_v4 at d = 192 and 256 (two*" "06 gpu widths: auto at d = 111*" "06 gpu widths: scale*" \
         "06 gpu widths: _det*" "06 gpu widths: extra*" "06 gpu variants: gpu_v4? gpu_v4_det at d = 192*" \
         "06 gpu variants: gpu_v4? gpu_v4_det at d = 256*" \
         "06 gpu widths: the sm_80*" "06 gpu_v4*" "06 gpu variants: gpu_v4? gpu_v4_det ragged*" \
         "06 gpu variants: gpu_v4? gpu_v4_det variant*" "06 gpu widths: gpu_v4 at d = 192 and 256 on one small*" \
         "06 gpu variants: auto variant*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 300 $B/test_06_backward_gpu -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
S="06 gpu widths: gpu_v4 at d = 192 and 256 on one small*"
for tool in memcheck racecheck synccheck; do
  ( timeout 250 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_06_backward_gpu -tc="$S" > $L/san_$tool.log 2>&1; echo "rc=$? $tool" >> $L/san_$tool.log ) &
done
wait
timeout 150 $B/bench_06_backward_gpu --benchmark_filter='BM_bwd/kernel:(3|5)/.*/d:(192|256)/' \
  --benchmark_out=$OUT/bwd_wide.json --benchmark_out_format=json > $L/bench.log 2>&1; echo "rc=$?" >> $L/bench.log
timeout 120 python3 tools/compare_torch.py --lib $B/libfa05.so --lib06 $B/libfa06.so --no-checks --no-timing --backward \
  --bwd-kernels gpu_v3,gpu_v4 --dims 192,256 --Ns 512,1024,2048,4096,8192,16384 --json $OUT/cmp_bwd_wide.json > $L/cmp.log 2>&1; echo "rc=$?" >> $L/cmp.log
for k in 3 5; do for d in 192 256; do
  timeout 60 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section Occupancy -k regex:dk_dv_dq --launch-count 1 \
    $B/bench_06_backward_gpu --benchmark_filter="BM_bwd/kernel:$k/dtype:2/N:8192/d:$d/causal:0/" --benchmark_min_time=0.01 > $L/ncu_k${k}_d$d.log 2>&1
done; done
tail -qn 4 $L/case_*.log; tail -qn 3 $L/san_*.log; grep -c "BM_bwd" $L/bench.log; tail -2 $L/bench.log; tail -28 $L/cmp.log
grep -h "Compute (SM) Throughput\|Memory Throughput\|Issue Slots Busy\|Registers Per\|dk_dv_dq" $L/ncu_*.log | cut -c1-150
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
