#!/usr/bin/env bash
# Fuzzing (docs/bug_zoo.md, "Fuzzing"): builds a libFuzzer target with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer, and runs it for a bounded time on a copy of its committed seed corpus.
#   scripts/fuzz.sh TARGET [SECONDS]    TARGET: npy (the .npy reader) or cli (the common flags and
#                                       their checks); SECONDS: default 60
# Exit 0: no crash, sanitizer report or leak in that time; 1: one was found (the reproducer is in
# the run folder it names), or the target does not build; 77: no clang with libFuzzer on this
# machine (ctest reports skipped).
set -uo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET [SECONDS]}
incs=()
seconds=${2:-60}
case "$target" in
  npy) srcs=(tools/fuzz/fuzz_npy.cpp common/npy.cpp) ;;
  cli) incs=(-I01_naive)  # the common harness runs stage 01 as the baseline
       srcs=(tools/fuzz/fuzz_cli.cpp common/cli.cpp common/harness.cpp common/npy.cpp common/problem.cpp
             common/reference.cpp common/kv_cache.cpp common/varlen.cpp common/memtrack.cpp 01_naive/baseline01.cpp) ;;
  *) echo "fuzz: TARGET: expected npy or cli, found '$target'" >&2; exit 2 ;;
esac
cxx=$(command -v clang++ || command -v clang++-19 || command -v clang++-16 || command -v clang++-14 || true)
[ -n "$cxx" ] || { echo "fuzz: skipped: no clang++ on this machine"; exit 77; }
work=$(mktemp -d /tmp/fa-fuzz-XXXXXX)
# Skip only where this clang cannot make a libFuzzer binary at all (no runtime); a target of ours
# that fails to build is a failure, not a skip.
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$work/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$work/probe.cpp" -o "$work/probe" 2>"$work/probe.log"; then
  echo "fuzz: skipped: $cxx cannot build a libFuzzer target here ($(head -c 200 "$work/probe.log"))"
  exit 77
fi
if ! "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
     -Icommon "${incs[@]}" "${srcs[@]}" -o "$work/fuzz_$target" 2>"$work/build.log"; then
  echo "fuzz: $target: the target does not build (log in $work/build.log):"
  head -c 2000 "$work/build.log"
  exit 1
fi
cp -r "tools/fuzz/corpus_$target" "$work/corpus"
(cd "$work" && "./fuzz_$target" -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 \
   -print_final_stats=1 corpus >run.log 2>&1)
rc=$?
grep -E "^stat::number_of_executed_units|^Done" "$work/run.log" | tail -2
if [ $rc -ne 0 ]; then
  echo "fuzz: $target: FOUND A FAILURE (exit $rc); log and reproducer in $work"
  tail -n 30 "$work/run.log"
  exit 1
fi
rm -rf "$work"
echo "fuzz: $target: no failure in ${seconds}s"
