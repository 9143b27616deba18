#!/usr/bin/env bash
# Every test: set up, build, make the PyTorch venv (scripts/torch_venv.sh, once; reused after),
# and run ctest (the conformance battery for every stage, the finite-difference and CLI tests,
# the PyTorch op's tests). GPU tests skip with a message when no GPU is present.
# FA_NO_TORCH=1 skips the venv (the torch tests then report themselves skipped).
# Arguments go to ctest (-R REGEX, -L LABEL, -j N ...).
#
# Two things keep it short on a small machine (CI: 2 cores), neither changing what is tested:
#  - the venv is made while the build runs (its download waits on the network, not on the cores;
#    its log is build/torch-venv.log, printed if it fails);
#  - ctest runs one test per core (CTEST_PARALLEL_LEVEL, default nproc; -j1 runs them one by one):
#    the slow tests (the exercise self-tests and the fuzzers, which compile, and the batteries)
#    are mostly one thread each. Tests that write fixed file names get a TMPDIR each
#    (cmake/FaStage.cmake, fa_private_tmpdir), so none shares another's files.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh  # first, alone: a missing package stops here, before any download
venv_pid=
if [ "${FA_NO_TORCH:-0}" != 1 ]; then
  mkdir -p build
  scripts/torch_venv.sh >build/torch-venv.log 2>&1 &
  venv_pid=$!
fi
build_rc=0
scripts/build.sh || build_rc=$?
if [ -n "$venv_pid" ]; then
  if ! wait "$venv_pid"; then
    echo "test: scripts/torch_venv.sh failed; the end of its log (build/torch-venv.log):" >&2
    tail -n 30 build/torch-venv.log >&2
    exit 1
  fi
  grep '^torch_venv:' build/torch-venv.log >&2 || true
fi
[ "$build_rc" -eq 0 ] || exit "$build_rc"
export CTEST_PARALLEL_LEVEL="${CTEST_PARALLEL_LEVEL:-$(nproc)}"
ctest --preset default "$@"
