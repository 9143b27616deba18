#!/bin/bash
# Fourth GPU call (H200, 2026-12-04): the stage program with --dtype fp8 end to end (v15, run 3's
# kernel), and the kernels whose tensor maps now come through tensor_map_3d_typed (v12, v13, v14;
# stage 06's gpu_v4 at d = 192 and 256): their GPU tests again, each its own process.
export LD_LIBRARY_PATH=$PWD/build-lead/carry
B=build-lead/carry
mkdir -p $OUT/logs; L=$OUT/logs
$B/05_cuda_tiled --dtype fp8 --heads 4 --kv-heads 2 --seq-q 1000 --seq-k 1300 --head-dim 128 --causal > $L/program.log 2>&1; echo "program rc=$?"; cat $L/program.log
$B/05_cuda_tiled --dtype fp8 --kernel auto --heads 4 --seq-q 300 --seq-k 300 --head-dim 128 --json > $L/program.json 2> $L/program_json.err; echo "program --json rc=$? $(head -c 300 $L/program.json)"
run() { timeout 280 $B/$1 -tc="$2" > $L/$3.log 2>&1; echo "$3 rc=$? $(grep -E 'test cases' $L/$3.log)"; }
run test_05_cuda_tiled "05 ragged v12*" ragged_v12 &
run test_05_cuda_tiled "05 v13: every native width*" v13_widths &
run test_05_cuda_tiled "05 v14 decode*" v14_decode &
run test_06_backward_gpu "06 gpu widths: gpu_v4 at d = 96, 192 and 256 on one small*" bwd_v4_small &
run test_06_backward_gpu "06 gpu_v4: ragged*" bwd_v4_ragged &
wait
for f in $L/*.log; do grep -m2 -A8 "ERROR" $f | head -20; done
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $L
