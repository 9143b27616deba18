#!/usr/bin/env bash
# Every test: set up, build, and run ctest (the conformance battery for every stage, the
# finite-difference and CLI tests). GPU tests skip with a message when no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --preset default "$@"
