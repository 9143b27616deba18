#!/bin/bash
# First GPU call (H200, 2026-12-03): gpu_v4 at d = 96 (bwd_v4_wgmma.cuh at D = 96: tiles two slabs
# wide, dK/dV's dims 64 + 32, dQ's 32 + 16 a warpgroup) and at 128 with the tiles addressed as
# offsets into the shared array (STS/LDS for dS^T, LSE_i, D_i). Every gpu_v4 test at 96 and 128,
# auto at 80/96 (now gpu_v4), compute-sanitizer on the small cases, the op's GPU tests, and
# compare_torch's backward at d = 96 and 128 beside gpu_v3, SDPA's flash and cuDNN.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/gpu.txt 2>&1
n=0
for c in "06 gpu_v4: ragged*" "06 gpu_v4? gpu_v4_det: backward battery*" \
         "06 gpu widths: gpu_v4 at d = 96? 192 and 256 (at*" "06 gpu widths: gpu_v4 at d = 96? 192 and 256 on one small*" \
         "06 gpu variants: gpu_v4? gpu_v4_det at d = 96*" "06 gpu variants: gpu_v4? gpu_v4_det variant backward battery*" \
         "06 gpu variants: gpu_v4? gpu_v4_det ragged*" "06 gpu widths: auto at d = 32*" "06 gpu widths: scale*" \
         "06 gpu widths: _det*" "06 gpu widths: extra*" "06 gpu_v2_det? gpu_v3_det? gpu_v4_det: bit*" \
         "06 gpu_v2? gpu_v3? gpu_v4: extra*" "06 gpu_v2? gpu_v3? gpu_v4: scale*" "06 gpu widths: the sm_80*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 330 $B/test_06_backward_gpu -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
(cd python/tests && FA_COURSE_LIB_DIR=$OLDPWD/$B PYTHONPATH=$OLDPWD/python timeout 300 python3 test_gpu.py -v) > $L/test_gpu_py.log 2>&1; echo "rc=$?" >> $L/test_gpu_py.log &
S="06 gpu widths: gpu_v4 at d = 96? 192 and 256 on one small*"
for tool in memcheck racecheck synccheck; do
  ( timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_06_backward_gpu -tc="$S" > $L/san_$tool.log 2>&1; echo "rc=$? $tool" >> $L/san_$tool.log ) &
done
wait
timeout 150 python3 tools/compare_torch.py --lib $B/libfa05.so --lib06 $B/libfa06.so --no-checks --no-timing --backward \
  --bwd-kernels gpu_v3,gpu_v4 --dims 96,128 --Ns 512,1024,2048,4096,8192,16384 --json $OUT/cmp_bwd_96.json > $L/cmp.log 2>&1; echo "rc=$?" >> $L/cmp.log
tail -qn 4 $L/case_*.log; tail -qn 3 $L/san_*.log; tail -6 $L/test_gpu_py.log; tail -28 $L/cmp.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
