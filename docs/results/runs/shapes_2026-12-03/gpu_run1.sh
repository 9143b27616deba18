#!/bin/bash
# First GPU call (H200, 2026-12-03), issue 37: v13's new block shapes (192 x 64 and 192 x 128 up to
# d = 64: three consumer warpgroups; 128 x 80 at 192 and 256, 128 x 112 at 192). Their tests and
# compute-sanitizer, then BM_shape at every native width (the sweep that picks the defaults).
# In the background, issue 38 item 4: stage 06's CPU backward built on this machine (its g++) and
# its Br = Bc = 1 battery.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
( { g++ --version | head -1; lscpu | grep "Model name"; start=$SECONDS
    cmake -S . -B /tmp/cb -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_BUILD_BENCHMARKS=OFF -DFA_BUG_ZOO=OFF \
      -DCMAKE_PREFIX_PATH=$PWD/$B/deps > /tmp/cb.cfg 2>&1 || tail -20 /tmp/cb.cfg
    ninja -C /tmp/cb -j 6 test_06_backward_recompute > /tmp/cb.build 2>&1 || tail -30 /tmp/cb.build
    echo "built in $((SECONDS-start))s"
    timeout 200 /tmp/cb/06_backward_recompute/test_06_backward_recompute -tc="*Br = Bc = 1*"; echo "rc=$?"
  } > $L/cpu06.log 2>&1 ) &
n=0
for c in "05 v13: every compiled block shape*" "05 v13: every native width*" "05 v13: padded widths*" "05 auto*" \
         "05 v13: windows across*" "05 v13: packed batches of long*" "05 v13 and auto: packed*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 400 $B/test_05_cuda_tiled -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
# compute-sanitizer on each new shape: one small ragged causal GQA problem, 3 persistent blocks
s=0
for shape in "64 192 128" "40 192 64" "256 128 80" "192 128 80" "168 128 112"; do
  set -- $shape; s=$((s+1))
  ( for tool in memcheck racecheck synccheck; do
      timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $B/05_cuda_tiled --kernel v13 --dtype bf16 --batch 2 --heads 4 \
        --kv-heads 2 --seq-q 300 --seq-k 200 --head-dim $1 --causal --block-q $2 --block-k $3 --persistent-blocks 3 > $L/san_${s}_$tool.log 2>&1
      echo "rc=$? $tool d=$1 $2x$3 $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $L/san_${s}_$tool.log | tail -1)" >> $L/san_summary.txt
    done ) &
done
wait
timeout 400 $B/bench_05_cuda_tiled --benchmark_filter='BM_shape/kernel:12/' --benchmark_out=$OUT/bench_shape_v13.json --benchmark_out_format=json > $L/bench_shape.log 2>&1; echo "rc=$?" >> $L/bench_shape.log
tail -qn 1 $L/case_*.log
grep -h "test cases\|assertions" $L/case_*.log
sort $L/san_summary.txt
grep -E "^BM_shape" $L/bench_shape.log | sed -E 's/ +/ /g; s/BM_shape.kernel:12.//; s/.min_time:0.100.manual_time//' | awk '{t=""; for(i=1;i<=NF;i++) if($i ~ /^TFLOP/) t=$i; print $1, $2, t}' 
tail -2 $L/bench_shape.log
cat $L/cpu06.log | grep -v "^\[" | tail -15
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
