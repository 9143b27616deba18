#!/usr/bin/env bash
# Takes the results of one scripts/gpu_check.sh run into the repository, and regenerates what is
# drawn from them: run here, on the folder gpu_check.sh wrote (fetched from the GPU machine).
#   docs/results/bench_05_cuda_tiled.json   the Google Benchmark JSON
#   docs/results/compare_torch_05.json      tools/compare_torch.py's checks and timing rows
#   docs/results/gpu_check/                 the logs the READMEs cite (summary, SASS, ptxas, ncu,
#                                           ctest, tour, compare, bench, one sanitizers.log)
# then the README tables (tools/gpu_tables.py) and the plots (tools/plots.sh).
#   scripts/gpu_results.sh LOG_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
LOG=${1:?usage: scripts/gpu_results.sh LOG_DIR (the folder scripts/gpu_check.sh wrote)}
[ -f "$LOG/summary.txt" ] || { echo "gpu_results: $LOG/summary.txt: expected a gpu_check.sh log folder, found none" >&2; exit 2; }
if grep -q " rc=" "$LOG/summary.txt"; then
  echo "gpu_results: $LOG/summary.txt reports failed steps; not taking these results" >&2
  exit 2
fi
mkdir -p docs/results/gpu_check
cp "$LOG/bench_05_cuda_tiled.json" docs/results/bench_05_cuda_tiled.json
cp "$LOG/compare_torch_05.json" docs/results/compare_torch_05.json
for f in summary.txt sass_summary.txt ptxas.txt ncu_v1.log ncu_v2.log ncu_cublas.log compare_torch.log \
         ctest.log tour.log tour_bf16.log env.log bench.log; do
  [ -f "$LOG/$f" ] && cp "$LOG/$f" docs/results/gpu_check/
done
# One file for every compute-sanitizer run, each headed by what it ran (its log file's name).
for f in "$LOG"/san_*.log; do
  IFS=_ read -r _ tool kernel dtype shape <<<"$(basename "$f" .log)"
  echo "=== compute-sanitizer --tool $tool: 05_cuda_tiled --kernel $kernel --dtype $dtype, shape $shape of scripts/gpu_check.sh"
  cat "$f"
done >docs/results/gpu_check/sanitizers.log
python3 tools/gpu_tables.py
tools/plots.sh
git status --short docs/
