#!/usr/bin/env bash
# The whole GPU check in one command, on a machine with an NVIDIA GPU (the course uses an H200):
# build for sm_90a from this tree, run every test (the GPU battery included), SASS and register
# report, compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on small ragged problems
# for every kernel (stage 06's GPU backwards too), stage 06 on the GPU beside the CPU, ncu on v1,
# v2, v4, v5, v6, v7, v8, v9, v10, v11, v12, the cuBLAS baseline and the backwards gpu_v3 and gpu_v4, the benchmarks (forward, then
# backward), the side-by-side with PyTorch's SDPA backends, and the tour. Every log goes to
# LOG_DIR; a summary table is printed last.
#
#   scripts/gpu_check.sh LOG_DIR [PHASES]
#     PHASES: comma-separated, default env,build,test,sass,sanitize,bwd,ncu,bench,bench_bwd,compare,tour;
#             also (not by default) zoo (the bug zoo's GPU entries, verbose), compare_fp16 (the forward timing grid in fp16), numerics
#             (tools/gpu_numerics.py: every kernel's and backend's error against float64), ncu_small
#             (v11 and v12, or NCU_SMALL_KERNELS, at d = 128, N = 512 and 8192, where v7 trails
#             FlashAttention-2 and where it does not, and SDPA's flash at N = 512)
#     env: BENCH_FILTER, BENCH_BWD_FILTER (--benchmark_filter regexes), COMPARE_ARGS (e.g. --quick
#          --backward), CTEST_ARGS (e.g. -R 05), SANITIZE_KERNELS (e.g. "v6:bf16:0,1"),
#          SANITIZE_BWD (tools for stage 06's GPU backwards, "" for none), SANITIZE_V8, SANITIZE_V10 (tools
#          for v8, and for v10, v11 and v12, with a capped grid, "" for none), SANITIZE_BWD_KERNELS
#          (e.g. "gpu_v2:bf16:0,1")
#
# The GPU machine has no internet: what it lacks (CLI11's headers) travels in .gpu_deps/, made
# here by scripts/pack_gpu_deps.sh (carry it with the tree). Builds in build-gpu/.
set -uo pipefail
LOG=${1:?usage: scripts/gpu_check.sh LOG_DIR [PHASES]}
PHASES=${2:-env,build,test,sass,sanitize,bwd,ncu,bench,bench_bwd,compare,tour}
mkdir -p "$LOG"
LOG=$(cd "$LOG" && pwd)  # from the caller's directory, before the cd to the repository
cd "$(dirname "$0")/.."
BUILD=build-gpu
SUMMARY=()
has() { [[ ",$PHASES," == *",$1,"* ]]; }

# step NAME LIMIT_S CMD...: runs CMD with a time limit, output to LOG/NAME.log, one summary row
# whose note is the log's last line matching $NOTE (default: its last line).
step() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$LOG/$name.log" 2>&1
  local rc=$?
  local note
  note=$({ grep -E "${NOTE:-.}" "$LOG/$name.log" || true; } | tail -n 1 | cut -c1-100)
  [ $rc -eq 124 ] && note="TIMED OUT after ${limit}s"
  SUMMARY+=("$(printf '%-22s %-6s %5ss  %s' "$name" "$([ $rc -eq 0 ] && echo ok || echo "rc=$rc")" $((SECONDS - t0)) "$note")")
  return $rc
}

if has env; then
  {
    date -u; nvidia-smi; nvcc --version; cmake --version | head -1; g++ --version | head -1
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
    command -v compute-sanitizer ncu cuobjdump
    for p in doctest benchmark nlohmann_json CLI11 OpenBLAS; do
      printf "%s: " "$p"; find /usr /opt -name "${p}Config.cmake" -o -name "${p,,}-config.cmake" 2>/dev/null | head -1; echo
    done
  } >"$LOG/env.log" 2>&1
  SUMMARY+=("$(printf '%-22s %-6s %5ss  %s' env ok 0 "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)")")
fi

if has build; then
  step configure 300 cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_PREFIX_PATH="$PWD/.gpu_deps" -DCMAKE_CUDA_FLAGS="-Xptxas=-v" -DFA_BUG_ZOO_GPU=ON &&
    step build 500 cmake --build $BUILD -j "$(nproc)"
  # ptxas's report (registers, shared memory, spills) of every kernel, from the build log
  # Registers and spills per kernel, and any wgmma serialisation ptxas reports (C75xx infos: it
  # inserted warpgroup.arrive/wait itself, or serialised the wgmma pipeline).
  { grep -A2 "Compiling entry function" "$LOG/build.log"; grep -E "C75[0-9][0-9]" "$LOG/build.log"; } >"$LOG/ptxas.txt" 2>/dev/null
  # v9 (and v10 ... v12: v9 in persistent blocks) exists for its overlap, which a serialised wgmma
  # undoes without changing a result: a C75xx message for a v9 ... v12 kernel fails this step
  # (a compiler upgrade could bring one back). Stage 06's gpu_v4 likewise (its dV and dK products
  # overlap the softmax and the barrier).
  NOTE="C75" step ptxas_v9_overlap 10 bash -c '! grep -E "C75[0-9][0-9].*(fa05(2v9|3v10|3v11|3v12)|fa066bwd_v4)" "$1"' ptxas "$LOG/ptxas.txt"
fi
BIN=$BUILD/05_cuda_tiled

if has test; then
  # Not the exercise tests (label exercise): each configures its own build with the Debian packages
  # scripts/setup.sh installs, which this machine lacks (CLI11 comes in .gpu_deps); CI runs them.
  NOTE="tests passed" step ctest 480 ctest --test-dir $BUILD -j 8 --output-on-failure -LE exercise ${CTEST_ARGS:-}
fi

if has sass; then
  # Per kernel: instruction counts that say what the code really does (tools/sass_counts.py).
  {
    cuobjdump -res-usage $BIN/libfa05.so
    cuobjdump -res-usage $BUILD/06_backward_recompute/06_backward_recompute
    { cuobjdump -sass $BIN/libfa05.so; cuobjdump -sass $BUILD/06_backward_recompute/06_backward_recompute; } >"$LOG/sass.txt"
    python3 tools/sass_counts.py "$LOG/sass.txt"
  } >"$LOG/sass_summary.txt" 2>&1
  SUMMARY+=("$(printf '%-22s %-6s %5ss  %s' sass ok 0 "kernels with local-memory instructions (LDL/STL): $(grep -cE ' (LDL|STL)=[1-9]' "$LOG/sass_summary.txt")")")
  # Per wgmma kernel: the softmax's exponentials that ptxas left between "wait until one wgmma group
  # is left" and "wait for all", i.e. beside the warpgroup's own P V (0 for v9 ... v11 with CUDA
  # 13.0: 05 README, "Tried after v11").
  NOTE="v11::" step sass_overlap 30 python3 tools/sass_overlap.py "$LOG/sass.txt"
fi

if has sanitize; then
  # Small ragged problems: N_q != N_k, causal with rows that see no key, GQA, odd d.
  # Every kernel on two shapes (d = 64 and 128, where v2 ... v5 run themselves), v1 also at an
  # odd head dim.
  # Shapes 3 and 4 have more than three K/V blocks of 128 keys, so the double buffers of v3 ... v7
  # are refilled under racecheck; shape 3 (d = 128) takes stage 06's GPU backward to 32-row blocks.
  # Shape 5: the first query block (128 rows) sees no key at all (v9 and v10 then copy nothing).
  shapes=("--batch 2 --heads 4 --kv-heads 2 --seq-q 77 --seq-k 45 --head-dim 64 --causal"
          "--batch 1 --heads 2 --kv-heads 1 --seq-q 33 --seq-k 130 --head-dim 128"
          "--batch 2 --heads 3 --kv-heads 1 --seq-q 50 --seq-k 29 --head-dim 40 --causal"
          "--batch 1 --heads 2 --kv-heads 1 --seq-q 300 --seq-k 400 --head-dim 128 --causal"
          "--batch 1 --heads 2 --kv-heads 2 --seq-q 260 --seq-k 520 --head-dim 64"
          "--batch 1 --heads 2 --kv-heads 1 --seq-q 300 --seq-k 45 --head-dim 128 --causal")
  for tool in memcheck racecheck synccheck initcheck; do
    for kd in ${SANITIZE_KERNELS:-v1:fp32:0,1,2 v1:bf16:0,1,2 v2:bf16:0,1 v2:fp16:0,1 v3:bf16:0,1,3,4 \
      v4:bf16:0,1,3,4 v5:bf16:0,1,3,4 v5:fp16:0,1 v6:bf16:0,1,3,4 v6:fp16:0,1 v7:bf16:0,1,3,4 v7:fp16:0,1 v8:bf16:0,1,3,4 v8:fp16:0,1 v9:bf16:0,1,3,4,5 v9:fp16:0,1 v10:bf16:1,3,5 v10:fp16:1 v11:bf16:1,3,5 v11:fp16:1 v12:bf16:1,3,5 v12:fp16:1 cublas:fp32:0,1 cublas:bf16:0,1}; do
      IFS=: read -r k dt idx <<<"$kd"
      for i in ${idx//,/ }; do
        NOTE="(ERROR|RACECHECK) SUMMARY" step "san_${tool}_${k}_${dt}_$i" 300 compute-sanitizer --tool $tool --error-exitcode 9 \
          $BIN/05_cuda_tiled --kernel $k --dtype $dt ${shapes[$i]} --no-check
      done
    done
  done
  # v8's persistent walk: the grid capped so that each block walks several tiles; in the first
  # shape (causal, N_q > N_k, Br = 64) tiles 48 ... 127 see no key, and blocks start on them.
  for tool in ${SANITIZE_V8-memcheck racecheck synccheck}; do
    i=0
    for s in "--batch 2 --heads 4 --kv-heads 2 --seq-q 1000 --seq-k 300 --head-dim 128 --causal --block-q 64 --block-k 64 --persistent-blocks 50" \
             "--batch 1 --heads 2 --kv-heads 1 --seq-q 300 --seq-k 400 --head-dim 128 --causal --persistent-blocks 2"; do
      i=$((i + 1))
      NOTE="(ERROR|RACECHECK) SUMMARY" step "san_${tool}_v8_capped_$i" 300 compute-sanitizer --tool $tool --error-exitcode 9 \
        $BIN/05_cuda_tiled --kernel v8 --dtype bf16 $s --no-check
    done
  done
  # v10's, v11's and v12's walks the same way: causal 1000 x 300 at 128 x 128 has tiles that see no key
  # (query blocks 0 ... 4) at the end of each block's walk; the next tile's copies cross tiles (and
  # v11's O passes through the Q buffer that the tile after the next is copied into).
  for tool in ${SANITIZE_V10-memcheck racecheck synccheck}; do
    for k in v10 v11 v12; do
      i=0
      for s in "--batch 2 --heads 4 --kv-heads 2 --seq-q 1000 --seq-k 300 --head-dim 128 --causal --persistent-blocks 3" \
               "--batch 1 --heads 2 --kv-heads 1 --seq-q 300 --seq-k 400 --head-dim 128 --causal --persistent-blocks 2"; do
        i=$((i + 1))
        NOTE="(ERROR|RACECHECK) SUMMARY" step "san_${tool}_${k}_capped_$i" 300 compute-sanitizer --tool $tool --error-exitcode 9 \
          $BIN/05_cuda_tiled --kernel $k --dtype bf16 $s --no-check
      done
    done
  done
  # Stage 06's GPU backwards: the same tools on the ragged causal/GQA shapes (gpu_v1 at d = 40 too;
  # shape 3 has four key blocks of 128, so gpu_v2_det's turns pass along a chain). The
  # deterministic variant's spin-wait only under memcheck, with a shorter limit.
  for tool in ${SANITIZE_BWD-memcheck racecheck synccheck initcheck}; do
    for kd in ${SANITIZE_BWD_KERNELS:-gpu_v1:fp32:0,2,3 gpu_v2:bf16:0,1,3,4 gpu_v2:fp16:0 gpu_v3:bf16:1,3 gpu_v2_det:bf16:3 gpu_v3_det:bf16:3 gpu_v4:bf16:1,3,5 gpu_v4:fp16:1 gpu_v4_det:bf16:3}; do
      IFS=: read -r k dt idx <<<"$kd"
      [[ "$k" == *_det ]] && [ "$tool" != memcheck ] && continue
      for i in ${idx//,/ }; do
        NOTE="(ERROR|RACECHECK) SUMMARY" step "san_${tool}_bwd_${k}_${dt}_$i" 150 compute-sanitizer --tool $tool \
          --error-exitcode 9 $BUILD/06_backward_recompute/06_backward_recompute --device gpu --dtype $dt \
          --bwd-kernel $k ${shapes[$i]} --no-check
      done
    done
  done
fi

if has bwd; then
  # Stage 06 on the GPU (fp32: forward v1 + backward gpu_v1; bf16: forward v7 + backward gpu_v2/v3)
  # beside the CPU version, and checked runs.
  for dev in gpu:fp32 gpu:bf16 cpu:fp32; do
    NOTE="backward" step "bwd_${dev/:/_}_N4096_d64" 300 $BUILD/06_backward_recompute/06_backward_recompute \
      --device ${dev%:*} --dtype ${dev#*:} --heads 8 --seq-q 4096 --head-dim 64 --no-check
  done
  for dt in fp32 bf16; do
    NOTE="backward" step bwd_gpu_${dt}_N1024_checked 300 $BUILD/06_backward_recompute/06_backward_recompute \
      --device gpu --dtype $dt --heads 4 --kv-heads 2 --seq-q 1024 --seq-k 700 --head-dim 128 --causal
  done
fi

if has ncu; then
  # Where the time goes: v1, v2, v4, v5 and v7 (one launch each, ncu's detailed set; v5, v6 and v7
  # also at the issue's target point), and the materialised baseline's GEMMs and softmax (speed of
  # light).
  step ncu_v1 300 ncu --clock-control none --set detailed -k regex:forward_kernel -c 1 \
    $BIN/05_cuda_tiled --kernel v1 --dtype bf16 --batch 4 --heads 32 --seq-q 4096 --head-dim 64 --no-check
  step ncu_v2 300 ncu --clock-control none --set detailed -k regex:forward_kernel -c 1 \
    $BIN/05_cuda_tiled --kernel v2 --dtype bf16 --batch 4 --heads 32 --seq-q 4096 --head-dim 64 --no-check
  for k in v4 v5 v7; do
    step ncu_$k 300 ncu --clock-control none --set detailed -k regex:forward_kernel -c 1 \
      $BIN/05_cuda_tiled --kernel $k --dtype bf16 --batch 4 --heads 32 --seq-q 4096 --head-dim 64 --no-check
  done
  for k in v5 v6 v7 v8 v9 v10 v11 v12; do
    step ncu_${k}_d128 300 ncu --clock-control none --set detailed -k regex:forward_kernel -c 1 \
      $BIN/05_cuda_tiled --kernel $k --dtype bf16 --batch 2 --heads 16 --seq-q 8192 --head-dim 128 --no-check
  done
  step ncu_bwd_gpu_v3_d128 300 ncu --clock-control none --set detailed -k regex:dk_dv_dq_kernel -c 1 \
    $BUILD/06_backward_recompute/06_backward_recompute --device gpu --dtype bf16 --bwd-kernel gpu_v3 --batch 2 --heads 16 \
    --seq-q 4096 --head-dim 128 --no-check
  step ncu_bwd_gpu_v4_d128 300 ncu --clock-control none --set detailed -k regex:dk_dv_dq_kernel -c 1 \
    $BUILD/06_backward_recompute/06_backward_recompute --device gpu --dtype bf16 --bwd-kernel gpu_v4 --batch 2 \
    --heads 16 --seq-q 8192 --head-dim 128 --no-check
  step ncu_cublas 300 ncu --clock-control none --section SpeedOfLight -c 4 \
    $BIN/05_cuda_tiled --kernel cublas --dtype bf16 --batch 4 --heads 32 --seq-q 4096 --head-dim 64 --no-check
fi

if has zoo; then
  # The bug zoo's GPU entries (FA_BUG_ZOO_GPU): each passes only if the GPU tests catch its bug;
  # verbose, so the log names the test case that caught each and its first failing check.
  NOTE="tests passed" step zoo_gpu 480 ctest --test-dir $BUILD -j 4 -V -R '^zoo_(missing_sync|offset_32bit|ragged_no_mask|fp16_rowsum|fp16_o_accum|mbar_wrong_parity)$'
  # The race itself, which the battery catches only when warps drift apart: racecheck on v1 with
  # the barrier removed must report hazards (exit code 9) on one small problem, every time: the
  # step is "ok" only when it does.
  for i in 1 2; do
    NOTE="RACECHECK SUMMARY" step zoo_racecheck_missing_sync_$i 300 bash -c '"$@"; test $? -eq 9' racecheck \
      compute-sanitizer --tool racecheck --error-exitcode 9 \
      $BUILD/05_cuda_tiled/zoo_05_cuda_tiled_prog_missing_sync --kernel v1 --dtype fp32 --batch 1 --heads 2 \
      --seq-q 100 --seq-k 300 --head-dim 64 --no-check
  done
fi

if has ncu_small; then
  # v7 at d = 128 where it trails FlashAttention-2 (N = 512: 4 key blocks per thread block) and
  # where it does not (N = 8192), the papers' grid (B = 16384/N, H = 16): what the short loop costs.
  for k in ${NCU_SMALL_KERNELS:-v11 v12}; do
    for n in 512 8192; do
      step ncu_${k}_d128_N$n 300 ncu --clock-control none --set detailed -k regex:forward_kernel -c 1 \
        $BIN/05_cuda_tiled --kernel $k --dtype bf16 --batch $((16384 / n)) --heads 16 --seq-q $n --head-dim 128 --no-check
    done
  done
  # SDPA's flash backend (FlashAttention-2) at the same N = 512 point: its launch (threads,
  # registers, shared memory, thread blocks per SM) beside v7's.
  step ncu_flash_d128_N512 300 ncu --clock-control none --set detailed -k regex:flash -c 1 python3 -c "
import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn(32, 16, 512, 128, device='cuda', dtype=torch.bfloat16) for _ in range(3))
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    F.scaled_dot_product_attention(q, k, v)
torch.cuda.synchronize()"
fi

if has bench; then
  # A filtered run writes *.filtered.json, which scripts/gpu_results.sh does not take as the results.
  NOTE="BM_" step bench 560 $BIN/bench_05_cuda_tiled \
    --benchmark_out="$LOG/bench_05_cuda_tiled${BENCH_FILTER:+.filtered}.json" \
    --benchmark_out_format=json ${BENCH_FILTER:+--benchmark_filter="$BENCH_FILTER"}
fi

if has bench_bwd; then
  NOTE="BM_" step bench_bwd 560 $BUILD/06_backward_recompute/bench_06_backward_gpu \
    --benchmark_out="$LOG/bench_06_backward_gpu${BENCH_BWD_FILTER:+.filtered}.json" --benchmark_out_format=json \
    ${BENCH_BWD_FILTER:+--benchmark_filter="$BENCH_BWD_FILTER"}
fi

if has compare; then
  # shellcheck disable=SC2086
  NOTE="^checks:" step compare_torch 560 env PYTHONUNBUFFERED=1 python3 tools/compare_torch.py --lib $BIN/libfa05.so \
    --json "$LOG/compare_torch_05.json" ${COMPARE_ARGS:-}
fi

if has compare_fp16; then
  # shellcheck disable=SC2086
  NOTE="^checks:" step compare_torch_fp16 560 env PYTHONUNBUFFERED=1 python3 tools/compare_torch.py --lib $BIN/libfa05.so \
    --json "$LOG/compare_torch_05_fp16.json" --dtypes fp16 ${COMPARE_FP16_ARGS:-}
fi

if has numerics; then
  step gpu_numerics 300 env PYTHONUNBUFFERED=1 python3 tools/gpu_numerics.py --lib $BIN/libfa05.so \
    --json "$LOG/gpu_numerics.json"
fi

if has tour; then
  step tour 120 $BUILD/tour/tour
  step tour_bf16 120 $BUILD/tour/tour --dtype bf16
fi

failed=0
{
  echo
  echo "gpu_check summary ($(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null), phases $PHASES); logs in $LOG"
  for row in "${SUMMARY[@]}"; do
    echo "  $row"
    [[ "$(awk '{print $2}' <<<"$row")" == rc=* ]] && failed=$((failed + 1))
  done
  echo "  $failed step(s) failed"
} | tee "$LOG/summary.txt"
! awk '$2 ~ /^rc=/ {bad = 1} END {exit !bad}' "$LOG/summary.txt"
