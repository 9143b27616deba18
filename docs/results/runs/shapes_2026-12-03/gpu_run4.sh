#!/bin/bash
# Fourth GPU call (H200, 2026-12-03), issue 37: stage 06's gpu_v4 adds dQ in 16-byte reductions
# (lanes t4, t4 ^ 1 swap half their pairs; one float4 atomicAdd where two float2 ones were).
# compare_torch's backward at d = 96 ... 256 twice, each its own process beside SDPA: the new
# libfa06.so, then carry/old/libfa06.so (the same source built -DFA_BWD_DQ_V2=1, the 8-byte form).
# Then the gpu_v4 tests, compute-sanitizer on its small problems, the op's GPU tests.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
for v in new old; do
  lib06=$B/libfa06.so; [ $v = old ] && lib06=$B/old/libfa06.so
  timeout 170 python3 tools/compare_torch.py --lib $B/libfa05.so --lib06 $lib06 --no-checks --no-timing --backward \
    --bwd-kernels gpu_v4 --backends flash,cudnn --dims 96,128,192,256 --Ns 1024,4096,8192,16384 --json $OUT/cmp_bwd_$v.json > $L/cmp_$v.log 2>&1; echo "rc=$?" >> $L/cmp_$v.log
done
n=0
for c in "06 gpu_v4? gpu_v4_det: backward battery*" "06 gpu_v4: ragged*" "06 gpu_v2? gpu_v3? gpu_v4: scale*" \
         "06 gpu_v2_det? gpu_v3_det? gpu_v4_det: bit-identical*" "06 gpu widths: auto at d = 32*" "06 gpu widths: auto at d = 111*" \
         "06 gpu widths: gpu_v4 at d = 96? 192 and 256 (at*" "06 gpu widths: _det variants*" "06 gpu variants: gpu_v4? gpu_v4_det*" \
         "06 gpu variants: auto*" "06 gpu_v2? gpu_v3? gpu_v4: extra*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 250 $B/test_06_backward_gpu -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
( for tool in memcheck racecheck synccheck; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B/test_06_backward_gpu -tc="06 gpu widths: gpu_v4 at d = 96? 192 and 256 on one small*" > $L/san_$tool.log 2>&1
    echo "rc=$? $tool $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/san_$tool.log | tail -1)" >> $L/san_summary.txt
  done ) &
(cd python/tests && FA_COURSE_LIB_DIR=$OLDPWD/$B PYTHONPATH=$OLDPWD/python timeout 250 python3 test_gpu.py -v) > $L/test_gpu_py.log 2>&1; echo "rc=$?" >> $L/test_gpu_py.log
wait
for v in new old; do echo "== $v"; grep -E "backward|d=" $L/cmp_$v.log | grep -v "^compare" | tail -34 | cut -c1-170; tail -1 $L/cmp_$v.log; done
tail -qn 1 $L/case_*.log; grep -h "assertions" $L/case_*.log
cat $L/san_summary.txt; tail -2 $L/test_gpu_py.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
