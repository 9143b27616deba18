#!/usr/bin/env bash
# Takes the results of one scripts/gpu_check.sh run into the repository, and regenerates what is
# drawn from them: run here, on the folder gpu_check.sh wrote (fetched from the GPU machine).
#   docs/results/bench_05_cuda_tiled.json   the Google Benchmark JSON
#   docs/results/compare_torch_05.json      tools/compare_torch.py's checks and timing rows
#   docs/results/compare_torch_05_fp16.json the same in fp16 (phase compare_fp16)
#   docs/results/gpu_numerics.json          tools/gpu_numerics.py's errors (phase numerics)
#   docs/results/runs/gpu_check/                 the logs the READMEs cite (summary, SASS, ptxas, ncu,
#                                           ctest, tour, compare, bench, one sanitizers.log); another
#                                           folder with RESULTS=docs/results/NAME (a check of one part,
#                                           e.g. the backward's, kept beside the forward's)
# then the README tables (tools/gpu_tables.py) and the plots (tools/plots.sh).
#   scripts/gpu_results.sh LOG_DIR [LOG_DIR ...]
# Several folders (runs with different PHASES, when one call's time limit cannot hold them all):
# each file is taken from the last folder that has it; every run's summary is kept, numbered.
# A run whose summary reports a failed step is refused, unless ALLOW_FAILED names that step
# (a regex on the step name, e.g. ALLOW_FAILED=ctest): its summary, kept, still shows the failure.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/gpu_results.sh LOG_DIR [LOG_DIR ...] (folders scripts/gpu_check.sh wrote)" >&2; exit 2; }
# The folders as given, from the caller's directory (before the cd to the repository).
dirs=()
for LOG in "$@"; do
  [ -f "$LOG/summary.txt" ] || { echo "gpu_results: $LOG/summary.txt: expected a gpu_check.sh log folder, found none" >&2; exit 2; }
  dirs+=("$(cd "$LOG" && pwd)")
done
set -- "${dirs[@]}"
cd "$(dirname "$0")/.."
R=${RESULTS:-docs/results/runs/gpu_check}
for LOG in "$@"; do
  # A summary row is "STEP STATUS SECONDS NOTE"; a failed step's STATUS is rc=N.
  failed=$(awk '$2 ~ /^rc=/ {print $1}' "$LOG/summary.txt")
  for step in $failed; do
    if [ -z "${ALLOW_FAILED:-}" ] || ! [[ "$step" =~ ^(${ALLOW_FAILED})$ ]]; then
      echo "gpu_results: $LOG/summary.txt reports failed step $step; not taking these results" >&2
      exit 2
    fi
  done
done
mkdir -p "$R"
rm -f "$R"/summary*.txt "$R"/ctest_run*.log  # numbered per call
n=0
for LOG in "$@"; do
  n=$((n + 1))
  cp "$LOG/summary.txt" "$R/summary_run$n.txt"
done
n=0
for LOG in "$@"; do
  n=$((n + 1))
  [ -f "$LOG/bench_05_cuda_tiled.json" ] && cp "$LOG/bench_05_cuda_tiled.json" docs/results/bench_05_cuda_tiled.json
  [ -f "$LOG/bench_06_backward_gpu.json" ] && cp "$LOG/bench_06_backward_gpu.json" docs/results/bench_06_backward_gpu.json
  # compare_torch.py's JSON: the forward rows (with the checks) to compare_torch_05.json when the
  # run timed the forward, SDPA's backward rows (--backward) to compare_torch_bwd.json.
  [ -f "$LOG/compare_torch_05.json" ] && python3 - "$LOG/compare_torch_05.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
fwd = [r for r in data["rows"] if not r["impl"].startswith("sdpa_bwd")]
bwd = [r for r in data["rows"] if r["impl"].startswith("sdpa_bwd")]
if fwd:
    json.dump(dict(data, rows=fwd), open("docs/results/compare_torch_05.json", "w"), indent=1)
if bwd:
    json.dump(dict(data, rows=bwd), open("docs/results/compare_torch_bwd.json", "w"), indent=1)
PY
  # The fp16 timing grid (phase compare_fp16) and the GPU numerics table (phase numerics).
  [ -f "$LOG/compare_torch_05_fp16.json" ] && cp "$LOG/compare_torch_05_fp16.json" docs/results/compare_torch_05_fp16.json
  [ -f "$LOG/gpu_numerics.json" ] && cp "$LOG/gpu_numerics.json" docs/results/gpu_numerics.json
  for f in sass_summary.txt sass_overlap.log ptxas.txt sass06_summary.txt res_usage_06.txt compare_torch.log tour.log tour_bf16.log \
           env.log bench.log bench_bwd.log compare_torch_fp16.log gpu_numerics.log zoo_gpu.log \
           bench_05_cuda_tiled.filtered.json bench_06_backward_gpu.filtered.json; do
    [ -f "$LOG/$f" ] && cp "$LOG/$f" "$R/$f"
  done
  for f in "$LOG"/bwd_*.log "$LOG"/ncu_*.log; do [ -f "$f" ] && cp "$f" "$R/"; done
  # ctest of each run, numbered like the summaries (runs may test different parts).
  [ -f "$LOG/ctest.log" ] && cp "$LOG/ctest.log" "$R/ctest_run$n.log"
done
# One file for every compute-sanitizer run of every folder, each headed by its run and what it ran
# (kept as it is when no folder has any).
has_san=0
for LOG in "$@"; do compgen -G "$LOG/san_*.log" >/dev/null && has_san=1; done
n=0
[ $has_san -eq 1 ] && for LOG in "$@"; do
  n=$((n + 1))
  if compgen -G "$LOG/san_*.log" >/dev/null; then
    for f in "$LOG"/san_*.log; do
      echo "=== run $n: compute-sanitizer $(basename "$f" .log) (tool, kernel, dtype, shape index of scripts/gpu_check.sh)"
      cat "$f"
    done
  fi
done >"$R/sanitizers.log"
rm -f "$R/ctest.log"
python3 tools/gpu_tables.py
tools/plots.sh
git status --short docs/
