#!/bin/bash
# Second GPU call (H200, 2026-12-03), issue 37: v13 with run 1's defaults (192 x 128 at d <= 64
# from N_q = 2048; 128 x 80 at d = 192 from N_k = 2048 and at 256 from 8192). v13's and auto's
# tests again (now at the new defaults where N is long), the op's GPU tests, then the papers' grid
# at d = 32, 64, 192, 256 beside SDPA's flash and cuDNN in one process (bf16; fp16 at 2048 and
# 8192), and ncu on the new 192 x 128 and 128 x 80 kernels (stall breakdown kept this time).
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
n=0
for c in "05 v13*" "05 auto*" "05: offsets past 2^31 elements at d = 256*" "05: every kernel gives bit-identical*" \
         "05: extra GPU memory*" "05: the C ABI*"; do
  n=$((n+1)); ( start=$SECONDS; timeout 400 $B/test_05_cuda_tiled -tc="$c" > $L/case_$n.log 2>&1; echo "rc=$? $((SECONDS-start))s $c" >> $L/case_$n.log ) &
done
(cd python/tests && FA_COURSE_LIB_DIR=$OLDPWD/$B PYTHONPATH=$OLDPWD/python timeout 300 python3 test_gpu.py -v) > $L/test_gpu_py.log 2>&1; echo "rc=$?" >> $L/test_gpu_py.log
wait
timeout 300 python3 tools/compare_torch.py --lib $B/libfa05.so --lib06 $B/libfa06.so --no-checks --dtypes bf16 --dims 32,64,192,256 \
  --kernels v13 --backends flash,cudnn --Ns 512,1024,2048,4096,8192,16384 --json $OUT/compare_bf16.json > $L/compare_bf16.log 2>&1; echo "rc=$?" >> $L/compare_bf16.log
timeout 120 python3 tools/compare_torch.py --lib $B/libfa05.so --lib06 $B/libfa06.so --no-checks --dtypes fp16 --dims 32,64,192,256 \
  --kernels v13 --backends flash,cudnn --Ns 2048,8192 --json $OUT/compare_fp16.json > $L/compare_fp16.log 2>&1; echo "rc=$?" >> $L/compare_fp16.log
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
for r in barrier long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle membar selected not_selected dispatch_stall no_instruction; do
  M=$M,smsp__warp_issue_stalled_${r}_per_warp_active.pct
done
for d in 64 192; do
  timeout 90 ncu --clock-control none --kernel-name regex:forward_kernel --launch-count 1 --section SpeedOfLight --metrics $M \
    $B/05_cuda_tiled --kernel v13 --dtype bf16 --batch 2 --heads $((2048 / d)) --kv-heads $((2048 / d)) --seq-q 8192 \
    --seq-k 8192 --head-dim $d --no-check > $L/ncu_$d.log 2>&1; echo "rc=$?" >> $L/ncu_$d.log
done
tail -qn 1 $L/case_*.log; grep -h "assertions" $L/case_*.log
tail -3 $L/test_gpu_py.log
grep -vE "^\s*$" $L/compare_bf16.log | tail -60 | cut -c1-150
grep -vE "^\s*$" $L/compare_fp16.log | tail -20 | cut -c1-150
for d in 64 192; do grep -E "forward_kernel|gmma|issue_active|stalled|Compute \(SM\) Throughput|Duration|rc=" $L/ncu_$d.log | sed -E 's/ +/ /g' | cut -c1-140 | head -22; done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
