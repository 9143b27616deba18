#!/bin/bash
# First GPU call (H200, 2026-12-03): gpu_v4 at d = 192 and 256 (kernels/bwd_v4_wide.cuh). The
# tests that run it (and the d = 128 gpu_v4 unchanged), compute-sanitizer on one small problem per
# width, then in one process each: bench_06_backward_gpu's BM_bwd for gpu_v3 and gpu_v4 at 192 and
# 256, and compare_torch's backward (gpu_v3, gpu_v4 beside SDPA's flash and cuDNN).
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv > $L/gpu.txt 2>&1
n=0
for c in "06 gpu widths: gpu_v4 at d = 192 and 256 (two*" "06 gpu widths: auto at d = 111*" "06 gpu widths: scale*" \
         "06 gpu widths: _det*" "06 gpu widths: extra*" "06 gpu variants: gpu_v4? gpu_v4_det at d = 192*" \
         "06 gpu widths: the sm_80*" "06 gpu_v4*" "06 gpu variants: gpu_v4? gpu_v4_det ragged*" \
         "06 gpu variants: gpu_v4? gpu_v4_det variant*" "06 gpu widths: gpu_v4 at d = 192 and 256 on one small*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 240 $B/test_06_backward_gpu -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
S="06 gpu widths: gpu_v4 at d = 192 and 256 on one small*"
for tool in memcheck racecheck synccheck; do
  ( timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_06_backward_gpu -tc="$S" > $L/san_$tool.log 2>&1; echo "rc=$? $tool" >> $L/san_$tool.log ) &
done
wait
timeout 180 $B/bench_06_backward_gpu --benchmark_filter='BM_bwd/kernel:(3|5)/.*/d:(192|256)/' \
  --benchmark_out=$OUT/bwd_wide.json --benchmark_out_format=json > $L/bench.log 2>&1; echo "rc=$?" >> $L/bench.log
timeout 140 python3 tools/compare_torch.py --lib $B/libfa05.so --lib06 $B/libfa06.so --no-checks --no-timing --backward \
  --bwd-kernels gpu_v3,gpu_v4 --dims 192,256 --Ns 512,1024,2048,4096,8192,16384 --json $OUT/cmp_bwd_wide.json > $L/cmp.log 2>&1; echo "rc=$?" >> $L/cmp.log
tail -qn 4 $L/case_*.log; tail -qn 3 $L/san_*.log; grep -c "BM_bwd" $L/bench.log; tail -2 $L/bench.log; cat $L/cmp.log | tail -30
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
