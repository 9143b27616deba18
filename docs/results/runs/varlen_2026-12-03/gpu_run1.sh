#!/bin/bash
# First GPU call (H200, 2026-12-03): issue 34's packed variable-length batches in v13 (one launch).
# The new tests (the varlen battery through v13 and auto, long packed sequences at every native
# width, the C ABI's fa05_forward_varlen), v13's earlier tests again (its tile and its stores
# changed), the program end to end on a packed batch, compute-sanitizer on it, then
# tools/varlen_bench.py and v13's window at Bc = 64 against 128 in the time left.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
P=$B/05_cuda_tiled
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt
python3 -c "
import numpy as np
np.save('$L/cuq.npy', np.array([0, 700, 701, 701, 1601, 1730, 2030], dtype=np.int32))
np.save('$L/cuk.npy', np.array([0, 700, 701, 706, 1606, 2606, 2863], dtype=np.int32))"
n=0
for c in "05 v13 and auto: packed variable-length*" "05 v13: packed batches of long*" "05: the C ABI (libfa05.so) computes*" \
         "05 v13: every native width*" "05 v13: padded widths*" "05 v13? v14 and auto: variant battery*" "05 v13: windows across*" \
         "05 v3 ... v14: conformance battery*" "05 auto: the fastest*" "05: every kernel gives bit-identical*" \
         "05: offsets past 2^31 elements at d = 256*" "05: offsets past 2^31 elements? every kernel*" "05: a problem a kernel cannot*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 330 $B/test_05_cuda_tiled -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
{
$P --kernel v13 --dtype bf16 --heads 8 --kv-heads 2 --head-dim 128 --causal --cu-seqlens-q $L/cuq.npy --cu-seqlens-k $L/cuk.npy; echo "rc=$?"
$P --kernel auto --dtype fp16 --heads 4 --head-dim 80 --window 100,20 --softcap 20 --cu-seqlens-q $L/cuq.npy --cu-seqlens-k $L/cuk.npy --json; echo "rc=$?"
$P --kernel v12 --dtype bf16 --heads 4 --cu-seqlens-q $L/cuq.npy --cu-seqlens-k $L/cuk.npy; echo "rc=$? (expected 2)"
} > $L/program.log 2>&1
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool $P --kernel v13 --dtype bf16 --heads 4 --kv-heads 2 --head-dim 96 --causal --window 300,0 --cu-seqlens-q $L/cuq.npy --cu-seqlens-k $L/cuk.npy --no-check > $L/san_v13_$tool.log 2>&1; echo "rc=$?" >> $L/san_v13_$tool.log
done
grep -h "ERROR SUMMARY\|^rc=" $L/san_*.log
wait
tail -qn 3 $L/case_*.log
left=$((560 - SECONDS)); echo "bench gets ${left} s" > $L/varlen_bench.log
[ $left -gt 30 ] && timeout $((left * 2 / 3)) python3 tools/varlen_bench.py --lib $B/libfa05.so --json $OUT/varlen_bench.json >> $L/varlen_bench.log 2>&1; echo "bench rc=$?" >> $L/varlen_bench.log
tail -40 $L/varlen_bench.log
# v13's window at Bc = 64 against 128 (H = 16, N = 16384, d = 128, causal, bf16): the kernel's own time.
for w in 256 1024; do for bc in 128 64; do
  [ $((560 - SECONDS)) -gt 15 ] || break
  echo "w=$w Bc=$bc $($P --kernel v13 --dtype bf16 --heads 16 --seq-q 16384 --head-dim 128 --causal --window $w,0 --block-q 128 --block-k $bc --no-check --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["forward"]["gpu_ms"], j["forward"]["gpu_tflops"])')"
done; done > $L/window_bc.log 2>&1
cat $L/window_bc.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
