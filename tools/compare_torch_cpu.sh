#!/usr/bin/env bash
# Stage 04 beside PyTorch's CPU attention, in one process (tools/compare_torch_cpu.py; its doc
# string says what is checked and how it is timed). Not part of the README's two commands:
# PyTorch is big (PyPI's Linux wheel pulls its CUDA libraries too, ~5 GB), so it goes into a
# private venv, build/torch-cpu-venv (git-ignored), pinned to the version of the committed results.
#   tools/compare_torch_cpu.sh                      # the grid: d 64/128, N 1k-16k, causal and not
#   tools/compare_torch_cpu.sh --quick              # N 1024 and 4096 only
#   tools/compare_torch_cpu.sh --json docs/results/compare_torch_cpu.json
# It builds build/04_tiled_cpu/libfa04.so first (scripts/build.sh's build directory).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/build/torch-cpu-venv}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating venv $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV"
fi
printf '*\n' > "$VENV/.gitignore"
"$VENV/bin/python" -c 'import torch' 2>/dev/null ||
  "$VENV/bin/python" -m pip --disable-pip-version-check -q install "torch==2.15.0" "numpy==2.4.6"
cd "$ROOT"
if [ ! -f build/build.ninja ] && [ ! -f build/Makefile ]; then scripts/build.sh; fi
cmake --build build --target fa04 >/dev/null
exec "$VENV/bin/python" tools/compare_torch_cpu.py --lib build/04_tiled_cpu/libfa04.so "$@"
