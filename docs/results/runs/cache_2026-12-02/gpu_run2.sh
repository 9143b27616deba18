#!/bin/bash
# Second GPU call (H200, 2026-12-02): v14 with the paged copy as its own instantiation (the first
# run's single kernel cost the contiguous path 20-30 %), auto's decode rule, v13 with Q in
# registers at d = 192; tests, sanitizer, BM_decode_cache, the N_q crossover, the decode grid.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $L/env.txt
t() { local name=$1; shift; ( stdbuf -oL timeout 240 "$@" > $L/$name.log 2>&1; echo "rc=$?" >> $L/$name.log ) & }
t t_cache $B/test_05_cuda_tiled -tc='05 v14 KV cache*'
t t_decode $B/test_05_cuda_tiled -tc='05 v14 decode*'
t t_v14w $B/test_05_cuda_tiled -tc='05 v14: every*'
t t_v13w $B/test_05_cuda_tiled -tc='05 v13: *'
t t_auto $B/test_05_cuda_tiled -tc='05 ragged v14*,05 auto*,05: the C ABI*'
t py_decode env PYTHONPATH=python:python/tests FA_COURSE_LIB_DIR=$PWD/$B python3 python/tests/test_gpu.py Gpu.test_decode
t san_cache compute-sanitizer --tool memcheck $B/test_05_cuda_tiled -tc='05 v14 KV cache*'
t san_race compute-sanitizer --tool racecheck $B/test_05_cuda_tiled -tc='05 v14 KV cache*'
t san_v13 compute-sanitizer --tool memcheck $B/05_cuda_tiled --kernel v13 --dtype bf16 --batch 2 --heads 4 --kv-heads 2 --seq-q 300 --seq-k 200 --head-dim 192 --causal --persistent-blocks 3
wait
for f in t_cache t_decode t_v14w t_v13w t_auto py_decode san_cache san_race san_v13; do echo "== $f"; tail -3 $L/$f.log; done
$B/bench_05_cuda_tiled --benchmark_filter=BM_decode_cache --benchmark_out=$OUT/bench_decode_cache.json --benchmark_out_format=json > $L/bench_decode_cache.log 2>&1
grep -E '^BM_decode' $L/bench_decode_cache.log | awk '{print $1, $4, $NF}'
export FA_COURSE_LIB_DIR=$PWD/$B
timeout 150 python3 tools/decode_bench.py --lib $B/libfa05.so --json $OUT/decode_nq.json --n-q 1,2,4,8,16 --kernels v13,v14,auto > $L/decode_nq.log 2>&1; echo "rc=$?" >> $L/decode_nq.log
timeout 200 python3 tools/decode_bench.py --lib $B/libfa05.so --json $OUT/decode_grid.json --grid --reps 20 --kernels v14 > $L/decode_grid.log 2>&1; echo "rc=$?" >> $L/decode_grid.log
timeout 90 python3 tools/compare_torch.py --lib $B/libfa05.so --no-checks --dtypes bf16 --dims 192,256 --kernels v13 --backends flash,cudnn --Ns 512,1024,2048,4096,8192,16384 --json $OUT/cmp_192_256.json > $L/cmp_192_256.log 2>&1
tail -14 $L/cmp_192_256.log
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
