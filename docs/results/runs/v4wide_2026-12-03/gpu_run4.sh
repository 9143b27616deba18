#!/bin/bash
# Fourth GPU call (H200, 2026-12-03): gpu_v4 at d = 192 and 256 with Q_i and dO_i by TMA (fourth
# version); tensor_map_3d moved to common/cuda/tensor_map.hpp (stage 05's v12-v14 use it too).
# The tests of run 3, compute-sanitizer, stage 05's v12/v13 tests (their maps), the op's GPU tests
# (auto now runs gpu_v4 at 192 and 256), compare_torch's backward, ncu's stalls at d = 256.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
n=0
for c in "06 gpu widths: gpu_v4 at d = 192 and 256 (two*" "06 gpu widths: auto at d = 111*" "06 gpu widths: scale*" \
         "06 gpu widths: _det*" "06 gpu widths: extra*" "06 gpu variants: gpu_v4? gpu_v4_det at d = 192*" \
         "06 gpu variants: gpu_v4? gpu_v4_det at d = 256*" \
         "06 gpu widths: the sm_80*" "06 gpu_v4*" "06 gpu widths: gpu_v4 at d = 192 and 256 on one small*" \
         "06 gpu variants: auto variant*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 300 $B/test_06_backward_gpu -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
for c in "05 v13: every native width*" "05 v13: packed batches of long*" "05 v12: every compiled block shape*" "05 ragged v12*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 300 $B/test_05_cuda_tiled -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
(cd python/tests && FA_COURSE_LIB_DIR=$OLDPWD/$B PYTHONPATH=$OLDPWD/python timeout 300 python3 test_gpu.py -v) > $L/test_gpu_py.log 2>&1; echo "rc=$?" >> $L/test_gpu_py.log &
S="06 gpu widths: gpu_v4 at d = 192 and 256 on one small*"
for tool in memcheck racecheck synccheck; do
  ( timeout 250 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_06_backward_gpu -tc="$S" > $L/san_$tool.log 2>&1; echo "rc=$? $tool" >> $L/san_$tool.log ) &
done
wait
timeout 120 python3 tools/compare_torch.py --lib $B/libfa05.so --lib06 $B/libfa06.so --no-checks --no-timing --backward \
  --bwd-kernels gpu_v3,gpu_v4 --dims 192,256 --Ns 512,1024,2048,4096,8192,16384 --json $OUT/cmp_bwd_wide.json > $L/cmp.log 2>&1; echo "rc=$?" >> $L/cmp.log
tail -qn 4 $L/case_*.log; tail -qn 3 $L/san_*.log; tail -6 $L/test_gpu_py.log; tail -26 $L/cmp.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
