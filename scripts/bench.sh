#!/usr/bin/env bash
# Runs every stage's Google Benchmark and writes its JSON.
# Usage: scripts/bench.sh [--update-docs] [stage-folder ...]   (default: every stage with a bench_ program)
#   by default   JSON goes to build/bench_results/bench_<stage>.json: the committed results in
#                docs/results/ (what the READMEs' tables cite) stay as they are
#   --update-docs   JSON replaces docs/results/bench_<stage>.json, and the script then says which
#                committed result files changed (git diff --stat), so nothing is overwritten silently
# Extra Google Benchmark flags go through BENCH_ARGS, e.g. BENCH_ARGS="--benchmark_min_time=0.05".
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/bench_results
if [ "${1:-}" = "--update-docs" ]; then out=docs/results; shift; fi
scripts/build.sh
mkdir -p "$out"
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=($(ls -d [0-9][0-9]_*/ | tr -d /))
for s in "${stages[@]}"; do
  bin="build/$s/bench_$s"
  [ -x "$bin" ] || { echo "bench: no $bin, skipped"; continue; }
  echo "== $bin -> $out/bench_$s.json"
  # shellcheck disable=SC2086
  "$bin" --benchmark_out="$out/bench_$s.json" --benchmark_out_format=json ${BENCH_ARGS:-}
done
if [ "$out" = docs/results ]; then
  echo "== committed results changed (git diff --stat docs/results):"
  git diff --stat -- docs/results || true
else
  echo "== results in $out/ (docs/results/ untouched; scripts/bench.sh --update-docs replaces them)"
fi
