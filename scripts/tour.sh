#!/usr/bin/env bash
# The course in one command: set up, build, and run the tour on the default input (real Q/K/V of
# all-MiniLM-L6-v2, data/PROVENANCE.md). Arguments go to the tour (same flags as every stage).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
exec build/tour/tour "$@"
