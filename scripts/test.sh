#!/usr/bin/env bash
# Every test: set up, build, make the PyTorch venv (scripts/torch_venv.sh, once; reused after),
# and run ctest (the conformance battery for every stage, the finite-difference and CLI tests,
# the PyTorch op's tests). GPU tests skip with a message when no GPU is present.
# FA_NO_TORCH=1 skips the venv (the torch tests then report themselves skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
if [ "${FA_NO_TORCH:-0}" != 1 ]; then
  scripts/torch_venv.sh >/dev/null
fi
ctest --preset default "$@"
