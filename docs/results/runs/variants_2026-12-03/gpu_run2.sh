#!/bin/bash
# Second GPU call (H200, 2026-12-03): run 1's two failures again (v1's variant battery, now with
# tanhf; gpu_v2 and gpu_v2_det's ragged variants, each its own process: one process ran out its
# 300 s), then every other test case of stages 05 and 06 (v1, v13, v14 and all GPU backwards
# changed where they mask), one process each, 16 at a time, in the time left.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
{ echo "05|05 v1: variant battery*"
  $B/test_06_backward_gpu -ltc 2>/dev/null | grep "^06 gpu variants: gpu_v2.* ragged" | sed 's/,/?/g; s/^/06|/'
  $B/test_06_backward_gpu -ltc 2>/dev/null | grep -v '^\[doctest\]\|^=====\|^06 gpu variants' | sed 's/,/?/g; s/^/06|/'
  $B/test_05_cuda_tiled -ltc 2>/dev/null | grep -v '^\[doctest\]\|^=====\|variant\|windows across\|windows and softcaps' | sed 's/,/?/g; s/^/05|/'
} > $L/cases.txt
wc -l < $L/cases.txt
i=0; while read -r c; do i=$((i+1)); echo "$i|$c"; done < $L/cases.txt | timeout 330 xargs -P 16 -d '\n' -I{} bash -c 'n=${1%%|*}; r=${1#*|}; s=${r%%|*}; c=${r#*|}; if [ $s = 05 ]; then t='$B'/test_05_cuda_tiled; else t='$B'/test_06_backward_gpu; fi; start=$SECONDS; timeout 320 $t -tc="$c" > '$L'/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $s $c" >> '$L'/case_$n.log' _ {}
grep -h '^rc=' $L/case_*.log | sort | uniq -c | sort -rn | head -80
echo "finished: $(grep -h '^rc=' $L/case_*.log | wc -l) of $(wc -l < $L/cases.txt)"
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
