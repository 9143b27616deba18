#!/bin/bash
# Fourth GPU call (H200, 2026-12-02): the stage 05 program on a KV cache end to end (the CLI
# contract's --cache-lens, --page-size, --block-table, checked against the reference), auto's
# report on decode shapes, and every stage 05 GPU test case, one process each, in parallel.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
P=$B/05_cuda_tiled
{
$P --kernel v14 --dtype bf16 --batch 4 --heads 8 --kv-heads 2 --seq-q 1 --seq-k 700 --cache-lens 0,1,300,700; echo "rc=$?"
$P --kernel auto --dtype fp16 --batch 3 --heads 8 --kv-heads 2 --seq-q 3 --seq-k 512 --causal --cache-lens 2,512,100 --page-size 64; echo "rc=$?"
python3 -c "import numpy as np; np.save('/tmp/table.npy', np.array([[3,1],[0,2]], dtype=np.int32))"
$P --kernel v14 --dtype bf16 --batch 2 --heads 4 --kv-heads 1 --seq-q 1 --seq-k 256 --page-size 128 --block-table /tmp/table.npy --cache-lens 256,129 --json | head -c 1500; echo; echo "rc=$?"
$P --kernel auto --dtype bf16 --batch 8 --heads 32 --kv-heads 8 --seq-q 1 --seq-k 32768 --head-dim 128 --no-check; echo "rc=$?"
$P --kernel v14 --dtype bf16 --batch 8 --heads 32 --kv-heads 8 --seq-q 1 --seq-k 32768 --head-dim 128 --no-check --splits 1; echo "rc=$?"
$P --kernel v13 --dtype bf16 --batch 2 --seq-q 1 --seq-k 100 --cache-lens 5,6; echo "rc=$? (expected 2)"
} > $L/program.log 2>&1
cat $L/program.log | grep -v '^\s*$' | head -90
$B/test_05_cuda_tiled -ltc 2>/dev/null | grep -v '^\[doctest\]\|^=====' | sed 's/,/?/g' > $L/cases.txt
wc -l < $L/cases.txt
i=0; while read -r c; do i=$((i+1)); echo "$i|$c"; done < $L/cases.txt | xargs -P 16 -d '\n' -I{} bash -c 'n=${1%%|*}; c=${1#*|}; timeout 360 '$B'/test_05_cuda_tiled -tc="$c" > '$L'/case_$n.log 2>&1; echo "rc=$? $c" >> '$L'/case_$n.log' _ {}
grep -h '^rc=' $L/case_*.log | sort | uniq -c | sort -rn | head -60
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
