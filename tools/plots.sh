#!/usr/bin/env bash
# Regenerate every plot in docs/img/ from the committed JSON in docs/results/ (nothing is rerun),
# and the diagrams:
#   tools/plot_results.py   stage benchmarks: time and extra memory vs N, stage 04's % of FMA peak;
#                           HBM traffic vs N, counted (docs/results/io_vs_N.json, tools/io_sweep.py)
#   tools/plot_numerics.py  the numerics chapter: error vs N, error vs block size, the ablation
#   tools/plot_gpu.py       stages 05 and 06 beside PyTorch SDPA on the GPU: TFLOP/s vs N, and the
#                           GPU's error against float64 vs N (docs/results/gpu_numerics.json)
#   tools/diagrams.py       the lessons' diagrams, docs/img/diagram_*.png (drawn from the code's
#                           structure and constants; no data)
# Makes a private venv under build/plot-venv (git-ignored) with matplotlib and its dependencies
# pinned (PyPI), the versions that drew the committed PNGs.
#   PYTHON=python3.11 tools/plots.sh     # choose the interpreter
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/build/plot-venv}"
PYTHON="${PYTHON:-python3}"
PINS=(
  "matplotlib==3.11.2" "numpy==2.4.6" "contourpy==1.3.3" "cycler==0.12.1" "fonttools==4.68.0"
  "kiwisolver==1.5.1" "packaging==26.4" "pillow==13.0.0" "pyparsing==3.3.3"
  "python-dateutil==4.0.0" "tzdata==2026.6"
)
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating venv $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV"
fi
printf '*\n' > "$VENV/.gitignore"
"$VENV/bin/python" -m pip --disable-pip-version-check -q install "${PINS[@]}"
cd "$ROOT"
"$VENV/bin/python" tools/plot_results.py
"$VENV/bin/python" tools/plot_numerics.py
"$VENV/bin/python" tools/plot_gpu.py
"$VENV/bin/python" tools/diagrams.py
