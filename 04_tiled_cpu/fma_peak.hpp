// The machine's fp32 fused multiply-add peak, measured (not taken from a data sheet): the number
// stage 04's speed is judged against, shared by its benchmark (bench_tiled.cpp) and the C ABI
// that tools/compare_torch_cpu.py loads (capi.cpp).
#pragma once
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "microkernel.hpp"

namespace tiled {

// Each thread runs 12 independent chains acc = acc * a + b (one FMA each) on full vectors: enough
// chains to cover the FMA latency (4 cycles x 2 ports needs 8), so the loop is bound by FMA
// throughput alone. Returns a value that depends on every chain, so nothing is optimised away.
inline float fma_loop(int64_t iters) {
  using mk::vf;
  vf acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = mk::splat(1.f + 1e-3f * float(i));
  const vf a = mk::splat(0.999999f), b = mk::splat(1e-6f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = acc[i] * a + b;
  }
  float s = 0;
  for (int i = 0; i < 12; ++i) s += acc[i][0];
  return s;
}

// GFLOP/s (2 flops per FMA lane) of fma_loop on `threads` OpenMP threads, one timing of `iters`
// iterations per thread (20 M iterations: about 60 ms on a 2.6 GHz AVX-512 core). *sink receives
// the loop's result so that the caller can keep it alive.
inline double measure_fma_peak(int threads, int64_t iters, double* sink) {
  const auto t0 = std::chrono::steady_clock::now();
  double total = 0;
#pragma omp parallel num_threads(threads) reduction(+ : total)
  total += fma_loop(iters);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *sink += total;
  return double(threads) * double(iters) * 12 * mk::VW * 2 / s * 1e-9;
}

}  // namespace tiled
