#!/usr/bin/env bash
# Stages 04 and 06 (the vectorised CPU stages) built for other vector ISAs than this machine's
# -march=native, and their tests run: microkernel.hpp's vectors follow the ISA the compiler
# targets (16 floats with AVX-512, 8 with AVX2, 4 with SSE2), so each width is its own code.
#   build-avx2/  -mavx2 -mfma (on any x86-64 machine with AVX2)
#   build-sse2/  FA_NATIVE=OFF alone: x86-64's baseline, SSE2
# The AVX-512 build is the default one (build/, -march=native) where the machine has it.
# Usage: scripts/isa_check.sh [avx2] [sse2]    (default: both; .ci/run calls it)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
targets=(test_04_tiled_cpu test_04_capi 04_tiled_cpu test_06_backward_recompute 06_backward_recompute)
for isa in "${@:-avx2 sse2}"; do
  for v in $isa; do
    case "$v" in
      avx2) flags="-mavx2 -mfma" ;;
      sse2) flags="" ;;
      *) echo "isa_check.sh: expected avx2 or sse2, found '$v'" >&2; exit 2 ;;
    esac
    if [ "$v" = avx2 ] && ! grep -q ' avx2 ' /proc/cpuinfo; then
      echo "isa_check: this CPU has no AVX2; skipping the AVX2 build"
      continue
    fi
    echo "== $v build (FA_NATIVE=OFF, CXXFLAGS '$flags')"
    # Without CUDA (-DCMAKE_CUDA_COMPILER=): only the CPU vector code differs between the ISAs, and
    # with nvcc present stage 06's targets would compile every GPU kernel again (about 2.5 minutes
    # per build on 2 cores).
    cmake -S . -B "build-$v" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_NATIVE=OFF -DFA_BUILD_BENCHMARKS=OFF \
      -DFA_BUG_ZOO=OFF -DCMAKE_CUDA_COMPILER= ${FA_WERROR:+-DFA_WERROR=$FA_WERROR} "-DCMAKE_CXX_FLAGS=$flags" >/dev/null
    cmake --build "build-$v" --target "${targets[@]}"
    ctest --test-dir "build-$v" -j "$(nproc)" --output-on-failure -R '^(04_tiled_cpu|04_tiled_cpu_capi|06_backward_recompute)$'
  done
done
