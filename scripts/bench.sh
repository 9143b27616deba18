#!/usr/bin/env bash
# Runs every stage's Google Benchmark and writes JSON to docs/results/bench_<stage>.json.
# Usage: scripts/bench.sh [stage-folder ...]   (default: every stage that has a bench_ program)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
mkdir -p docs/results
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=($(ls -d [0-9][0-9]_*/ | tr -d /))
for s in "${stages[@]}"; do
  bin="build/$s/bench_$s"
  [ -x "$bin" ] || { echo "bench: no $bin, skipped"; continue; }
  echo "== $bin"
  "$bin" --benchmark_out="docs/results/bench_$s.json" --benchmark_out_format=json
done
