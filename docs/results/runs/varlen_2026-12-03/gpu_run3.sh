#!/bin/bash
# Third GPU call (H200, 2026-12-03): stage 06's packed backward (gpu_v3, kPacked) and the op's GPU
# backward through it. Every stage 06 GPU test case (gpu_v2's and gpu_v3's loads and dQ step
# changed signature; gpu_v3 gained the packed kernel), stage 05's packed tests (Packed moved to
# kernel_common.cuh), the op's GPU tests, compute-sanitizer memcheck and racecheck on the packed
# backward's test, then tools/varlen_bench.py with the backward.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt
{ $B/test_06_backward_gpu -ltc 2>/dev/null | grep -v '^\[doctest\]\|^=====' | sed 's/,/?/g; s/^/06|/'
  for c in "05 v13 and auto: packed variable-length*" "05 v13: packed batches of long*" "05: the C ABI (libfa05.so) computes*"; do echo "05|$c"; done
} > $L/cases.txt
wc -l < $L/cases.txt
( timeout 250 compute-sanitizer --tool memcheck $B/test_06_backward_gpu -tc="06 gpu_v3: a packed batch*" > $L/san_memcheck.log 2>&1; echo "rc=$?" >> $L/san_memcheck.log ) &
( timeout 250 compute-sanitizer --tool racecheck $B/test_06_backward_gpu -tc="06 gpu_v3: a packed batch*" > $L/san_racecheck.log 2>&1; echo "rc=$?" >> $L/san_racecheck.log ) &
i=0; while read -r c; do i=$((i+1)); echo "$i|$c"; done < $L/cases.txt | timeout 270 xargs -P 14 -d '\n' -I{} bash -c 'n=${1%%|*}; r=${1#*|}; s=${r%%|*}; c=${r#*|}; if [ $s = 05 ]; then t='$B'/test_05_cuda_tiled; else t='$B'/test_06_backward_gpu; fi; start=$SECONDS; timeout 260 $t -tc="$c" > '$L'/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $s $c" >> '$L'/case_$n.log' _ {}
(cd python/tests && FA_COURSE_LIB_DIR=$OLDPWD/$B PYTHONPATH=$OLDPWD/python timeout 120 python3 test_gpu.py -v) > $L/test_gpu_py.log 2>&1; echo "rc=$?" >> $L/test_gpu_py.log
wait
grep -h '^rc=' $L/case_*.log | sort | uniq -c | sort -rn | head -70
echo "finished: $(grep -h '^rc=' $L/case_*.log | wc -l) of $(wc -l < $L/cases.txt)"
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|^rc=" $L/san_*.log
tail -8 $L/test_gpu_py.log
left=$((440 - SECONDS)); echo "bench gets ${left} s" > $L/varlen_bench.log
[ $left -gt 30 ] && timeout $left python3 tools/varlen_bench.py --lib $B/libfa05.so --lib06 $B/libfa06.so --json $OUT/varlen_bench_bwd.json >> $L/varlen_bench.log 2>&1; echo "bench rc=$?" >> $L/varlen_bench.log
grep "^bwd\|rc=\|refused\|Error\|error" $L/varlen_bench.log | head -40
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
