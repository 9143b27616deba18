#!/bin/bash
# Fourth GPU call (H200, 2026-12-03): the stage 06 program on a packed batch with --device gpu
# (v13's forward and gpu_v3's backward, each in one call; checked against stage 01 and float64
# sequence by sequence), and the batteries that go through the adapter's backward, which this
# change rewrote (gpu_backward and gpu_backward_varlen share backward_on_gpu).
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
P=$B/06_backward_recompute
python3 -c "
import numpy as np
np.save('$L/cuq.npy', np.array([0, 700, 701, 701, 1601, 1730, 2030], dtype=np.int32))
np.save('$L/cuk.npy', np.array([0, 700, 701, 706, 1606, 2606, 2863], dtype=np.int32))"
{
$P --device gpu --dtype bf16 --heads 8 --kv-heads 2 --head-dim 128 --causal --cu-seqlens-q $L/cuq.npy --cu-seqlens-k $L/cuk.npy; echo "rc=$?"
$P --device gpu --dtype fp16 --heads 4 --kv-heads 4 --head-dim 80 --window 100,20 --softcap 20 --cu-seqlens-q $L/cuq.npy --cu-seqlens-k $L/cuk.npy --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["backward"]["errors"], j["kernel"] if "kernel" in j else "")'; echo "rc=$?"
$P --device gpu --dtype bf16 --bwd-kernel gpu_v4 --heads 4 --cu-seqlens-q $L/cuq.npy --cu-seqlens-k $L/cuk.npy; echo "rc=$? (expected 2)"
$P --device gpu --dtype bf16 --heads 8 --kv-heads 2 --seq-q 700 --seq-k 900 --head-dim 128 --causal; echo "rc=$? (plain)"
} > $L/program.log 2>&1
n=0
for c in "06 gpu_v1: backward battery*" "06 gpu_v2_det? gpu_v3? gpu_v3_det: backward battery*" "06 gpu variants: auto variant backward battery*" "06 gpu_v3: a packed batch*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 150 $B/test_06_backward_gpu -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
wait
cat $L/program.log | grep -v "^  input\|^  problem\|^  varlen\|^  forward\|^  backward\|^  gpu\|^  max"
tail -qn 3 $L/case_*.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
