#!/bin/bash
# Fifth GPU call (H200, 2026-12-04): the review fixes of v15 (the quantiser divides by its
# power-of-two scale instead of multiplying by 1 / scale, which overflowed below 2^-127; the
# score unit is kept at least 2^-126 so a masked -inf x 0 is not NaN): every v15 test, the new
# tiny-magnitude one among them, and compute-sanitizer on the small ragged causal GQA problem.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
timeout 400 $B/test_05_cuda_tiled -tc="05 v15*" > $L/v15.log 2>&1; echo "v15 rc=$? $(grep -E 'test cases' $L/v15.log)"
grep -E "RMSE|ERROR" -A3 $L/v15.log | head -30
timeout 150 compute-sanitizer --tool memcheck $B/test_05_cuda_tiled -tc="05 v15 (FP8): one small*" > $L/sanitizer.log 2>&1; echo "sanitizer rc=$? $(tail -2 $L/sanitizer.log | tr '\n' ' ')"
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
