#!/bin/bash
# One GPU call (H200, 2026-12-02): the KV cache (v14) tests, sanitizer, its costs, the N_q
# crossover, issue 33's grid; v13 at d = 192 with Q in registers (a second libfa05.so); ncu.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/env.txt
t() { local name=$1; shift; ( stdbuf -oL timeout 240 "$@" > $OUT/$name.log 2>&1; echo "rc=$?" >> $OUT/$name.log ) & }
t t_cache $B/test_05_cuda_tiled -tc='05 v14 KV cache*'
t t_decode $B/test_05_cuda_tiled -tc='05 v14 decode*'
t t_widths $B/test_05_cuda_tiled -tc='05 v14: every*'
t t_ragged $B/test_05_cuda_tiled -tc='05 ragged v14*,05 auto*,05: the C ABI*'
t py_decode env PYTHONPATH=python:python/tests FA_COURSE_LIB_DIR=$PWD/$B python3 python/tests/test_gpu.py Gpu.test_decode
t san_cache compute-sanitizer --tool memcheck $B/test_05_cuda_tiled -tc='05 v14 KV cache*'
t san_race compute-sanitizer --tool racecheck $B/test_05_cuda_tiled -tc='05 v14 KV cache*'
wait
for f in t_cache t_decode t_widths t_ragged py_decode san_cache san_race; do echo "== $f"; tail -4 $OUT/$f.log; done
$B/bench_05_cuda_tiled --benchmark_filter=BM_decode_cache --benchmark_out=$OUT/bench_decode_cache.json --benchmark_out_format=json > $OUT/bench_decode_cache.log 2>&1
grep -E 'BM_decode' $OUT/bench_decode_cache.log | cut -c1-160
export FA_COURSE_LIB_DIR=$PWD/$B
timeout 150 python3 tools/decode_bench.py --lib $B/libfa05.so --json $OUT/decode_nq.json --n-q 1,2,4,8,16 --kernels v13,v14 > $OUT/decode_nq.log 2>&1; echo "rc=$?" >> $OUT/decode_nq.log
timeout 150 python3 tools/decode_bench.py --lib $B/libfa05.so --json $OUT/decode_grid.json --grid --reps 20 --kernels v14 > $OUT/decode_grid.log 2>&1; echo "rc=$?" >> $OUT/decode_grid.log
tail -3 $OUT/decode_nq.log $OUT/decode_grid.log
for lib in $B $B/q192; do
  FA_COURSE_LIB_DIR=$PWD/$lib timeout 90 python3 tools/compare_torch.py --lib $lib/libfa05.so --no-checks --dtypes bf16 --dims 192 --kernels v13 --backends flash,cudnn --Ns 1024,4096,16384 --json $OUT/cmp192_$(basename $lib).json > $OUT/cmp192_$(basename $lib).log 2>&1
done
tail -12 $OUT/cmp192_carry.log $OUT/cmp192_q192.log
N="ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy -k regex:forward_kernel --launch-skip 1 --launch-count 1"
for dh in 32:64 64:32 192:8 256:8; do d=${dh%:*}; h=${dh#*:}
  timeout 60 $N $B/05_cuda_tiled --kernel v13 --dtype bf16 --batch 4 --heads $h --seq-q 4096 --head-dim $d --no-check > $OUT/ncu_v13_d$d.log 2>&1
done
timeout 60 $N $B/05_cuda_tiled --kernel v14 --dtype bf16 --batch 8 --heads 32 --kv-heads 8 --seq-q 1 --seq-k 32768 --head-dim 128 --no-check > $OUT/ncu_v14.log 2>&1
grep -hE 'Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Issue Slots Busy|Executed Ipc A|No Eligible' $OUT/ncu_*.log | head -40
