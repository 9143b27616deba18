#!/usr/bin/env bash
# The tests under AddressSanitizer and UndefinedBehaviorSanitizer (a Debug build in build-asan/,
# without CUDA, benchmarks or the bug zoo): any out-of-bounds access, use after free, leak,
# signed overflow or other undefined behaviour fails the test that hit it.
#   scripts/sanitize.sh [CTEST_REGEX]   default: every test (slow: the batteries run unoptimised)
# CI (.ci/run) runs the plumbing and the scalar stages: common, docs, 01_naive, 02_safe_softmax,
# 03_online_softmax, with FA_WERROR=ON (every warning of this build an error).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS=-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
  -DCMAKE_CUDA_COMPILER= -DFA_BUILD_BENCHMARKS=OFF -DFA_BUG_ZOO=OFF ${FA_WERROR:+-DFA_WERROR=$FA_WERROR} >/dev/null
cmake --build build-asan -j "$(nproc)"
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
ctest --test-dir build-asan -j "$(nproc)" --output-on-failure ${1:+-R "$1"}
