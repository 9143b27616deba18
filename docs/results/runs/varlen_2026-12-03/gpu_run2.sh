#!/bin/bash
# Second GPU call (H200, 2026-12-03): v13's packed-batch scheduler (a sequence's empty tiles
# skipped in one jump of the tile counter) and the PyTorch op's varlen entry. The packed-batch
# tests and v13's earlier ones again, the op's GPU tests (python/tests/test_gpu.py),
# compute-sanitizer on a batch of 200 short sequences with 3 persistent blocks (every jump path),
# then tools/varlen_bench.py.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
P=$B/05_cuda_tiled
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt
python3 -c "
import numpy as np
np.save('$L/cuq.npy', np.array([0, 700, 701, 701, 1601, 1730, 2030], dtype=np.int32))
np.save('$L/cuk.npy', np.array([0, 700, 701, 706, 1606, 2606, 2863], dtype=np.int32))
lens = [0, 1000] + [i % 6 for i in range(200)] + [300]
np.save('$L/cus.npy', np.cumsum([0] + lens).astype(np.int32))"
n=0
for c in "05 v13 and auto: packed variable-length*" "05 v13: packed batches of long*" "05: the C ABI (libfa05.so) computes*" \
         "05 v13: every native width*" "05 v13: padded widths*" "05 v13? v14 and auto: variant battery*" "05 v13: windows across*" \
         "05 v3 ... v14: conformance battery*" "05 auto: the fastest*" "05: every kernel gives bit-identical*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 300 $B/test_05_cuda_tiled -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
(cd python/tests && FA_COURSE_LIB_DIR=$OLDPWD/$B PYTHONPATH=$OLDPWD/python timeout 300 python3 test_gpu.py -v) > $L/test_gpu_py.log 2>&1; echo "rc=$?" >> $L/test_gpu_py.log
{
$P --kernel v13 --dtype bf16 --heads 8 --kv-heads 2 --head-dim 128 --causal --cu-seqlens-q $L/cuq.npy --cu-seqlens-k $L/cuk.npy; echo "rc=$?"
$P --kernel v13 --dtype bf16 --heads 4 --kv-heads 1 --head-dim 64 --causal --persistent-blocks 3 --cu-seqlens-q $L/cus.npy --cu-seqlens-k $L/cus.npy; echo "rc=$?"
} > $L/program.log 2>&1
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool $P --kernel v13 --dtype bf16 --heads 4 --kv-heads 1 --head-dim 64 --causal --persistent-blocks 3 --cu-seqlens-q $L/cus.npy --cu-seqlens-k $L/cus.npy --no-check > $L/san_short_$tool.log 2>&1; echo "rc=$?" >> $L/san_short_$tool.log
  timeout 120 compute-sanitizer --tool $tool $P --kernel v13 --dtype fp16 --heads 4 --kv-heads 2 --head-dim 96 --causal --window 300,0 --cu-seqlens-q $L/cuq.npy --cu-seqlens-k $L/cuk.npy --no-check > $L/san_v13_$tool.log 2>&1; echo "rc=$?" >> $L/san_v13_$tool.log
done
grep -h "ERROR SUMMARY\|^rc=" $L/san_*.log
wait
tail -qn 3 $L/case_*.log; tail -25 $L/test_gpu_py.log; grep -h "rc=\|O   vs\|LSE vs" $L/program.log
left=$((560 - SECONDS)); echo "bench gets ${left} s" > $L/varlen_bench.log
[ $left -gt 30 ] && timeout $left python3 tools/varlen_bench.py --lib $B/libfa05.so --json $OUT/varlen_bench.json >> $L/varlen_bench.log 2>&1; echo "bench rc=$?" >> $L/varlen_bench.log
tail -42 $L/varlen_bench.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
