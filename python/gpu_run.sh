#!/usr/bin/env bash
# One device run of the PyTorch half on the H200 (docs/results/torch_gpu_*.md): build the
# libraries and the tour for sm_90a, the tour's output, the op's GPU tests, the training grid,
# and compare_torch.py's stage 06 backward beside SDPA's. Logs to $1 (at most 8 files).
# Needs .gpu_deps (scripts/pack_gpu_deps.sh) carried with the tree.
set -uo pipefail
LOG=${1:?usage: python/gpu_run.sh LOG_DIR}
mkdir -p "$LOG"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE FA_COURSE_BUILD=$PWD/build-gpu PYTHONPATH=$PWD/python
t0=$SECONDS
{ date -u; nvidia-smi -L; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'
  rm -rf build-gpu
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_PREFIX_PATH="$PWD/.gpu_deps" -DFA_BUG_ZOO=OFF -DFA_BUILD_BENCHMARKS=OFF -DFA_TORCH_PYTHON="$(command -v python3)" &&
  timeout 300 cmake --build build-gpu -j "$(nproc)" --target fa04 fa05 fa06 test_06_capi tour
  echo "build rc=$? at $((SECONDS - t0)) s"; } > "$LOG/build.log" 2>&1
timeout 60 build-gpu/tour/tour > "$LOG/tour_gpu.log" 2>&1; echo "tour rc=$? at $((SECONDS - t0)) s" >> "$LOG/build.log"
{ timeout 60 build-gpu/06_backward_recompute/test_06_capi; echo "test_06_capi rc=$?"
  (cd python/tests && timeout 120 python3 test_gpu.py); echo "test_gpu rc=$? at $((SECONDS - t0)) s"
  (cd python/tests && timeout 60 python3 test_op.py 2>&1 | tail -4); echo "test_op (CPU path on the GPU host) rc=$?"; } > "$LOG/tests.log" 2>&1
timeout 200 python3 python/examples/gpu_curves.py --json "$LOG/curves.json" > "$LOG/training.log" 2>&1
echo "training rc=$? at $((SECONDS - t0)) s" >> "$LOG/training.log"
timeout 150 python3 tools/compare_torch.py --lib build-gpu/05_cuda_tiled/libfa05.so --quick --no-timing --no-checks --backward \
  --json "$LOG/compare_backward.json" > "$LOG/compare_backward.log" 2>&1
echo "compare rc=$? at $((SECONDS - t0)) s" >> "$LOG/compare_backward.log"
