#!/bin/bash
# Third GPU call (H200, 2026-12-02): the paged copy looking its offsets up 4 at a time (K and V
# sharing them): its tests, sanitizer and BM_decode_cache.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
t() { local name=$1; shift; ( stdbuf -oL timeout 240 "$@" > $L/$name.log 2>&1; echo "rc=$?" >> $L/$name.log ) & }
t t_cache $B/test_05_cuda_tiled -tc='05 v14 KV cache*'
t t_v14 $B/test_05_cuda_tiled -tc='05 v14 decode*,05 v14: every*'
t py_decode env PYTHONPATH=python:python/tests FA_COURSE_LIB_DIR=$PWD/$B python3 python/tests/test_gpu.py Gpu.test_decode
t san_cache compute-sanitizer --tool memcheck $B/test_05_cuda_tiled -tc='05 v14 KV cache*'
t san_race compute-sanitizer --tool racecheck $B/test_05_cuda_tiled -tc='05 v14 KV cache*'
wait
for f in t_cache t_v14 py_decode san_cache san_race; do echo "== $f"; tail -3 $L/$f.log; done
$B/bench_05_cuda_tiled --benchmark_filter=BM_decode_cache --benchmark_out=$OUT/bench_decode_cache.json --benchmark_out_format=json > $L/bench_decode_cache.log 2>&1
grep -E '^BM_decode' $L/bench_decode_cache.log | awk '{print $1, $4, $NF}'
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
