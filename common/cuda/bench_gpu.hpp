// What the GPU benchmarks (stage 05's forward, stage 06's backward) share: the papers' problem
// grid, random inputs made on the GPU and kept, the L2 size (to rotate input sets past it), the
// datasheet peaks, the timed loop and main(). Header-only; link CUDA::curand and Google Benchmark.
#pragma once
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <curand.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "check.hpp"
#include "device_buffer.hpp"
#include "devstats.hpp"
#include "dtype.hpp"
#include "event_timer.hpp"
#include "gpu.hpp"
#include "problem.hpp"

namespace fa::bench {

// Dense peaks, TFLOP/s, from the H100/H200 SXM datasheet (the H200 has the H100's SMs and clocks).
constexpr double kPeakFp32 = 66.9, kPeakBf16 = 989.4;
inline double peak_tflops(DType t) { return t == DType::fp32 ? kPeakFp32 : kPeakBf16; }

inline void curand_check(curandStatus_t s) {
  if (s != CURAND_STATUS_SUCCESS) throw std::runtime_error("cuRAND error " + std::to_string(int(s)));
}

// n normal(0, 1) values in `dtype` at dst (device). cuRAND makes float32; 16-bit types are
// converted on the host once (a cast kernel would be more code than this).
inline void fill_normal(void* dst, int64_t n, DType t, uint64_t seed) {
  DeviceBuffer<float> tmp(n + (n & 1), Mem::Io);  // cuRAND's normals come in pairs
  curandGenerator_t gen;
  curand_check(curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  curand_check(curandSetPseudoRandomGeneratorSeed(gen, seed));
  curand_check(curandGenerateNormal(gen, tmp.get(), size_t(tmp.size()), 0.f, 1.f));
  curand_check(curandDestroyGenerator(gen));
  if (t == DType::fp32) {
    FA_CUDA_CHECK(cudaMemcpy(dst, tmp.get(), size_t(n) * 4, cudaMemcpyDeviceToDevice));
    return;
  }
  std::vector<float> h(static_cast<size_t>(n));
  std::vector<uint16_t> h16(static_cast<size_t>(n));
  FA_CUDA_CHECK(cudaMemcpy(h.data(), tmp.get(), size_t(n) * 4, cudaMemcpyDeviceToHost));
  encode(t, h.data(), n, h16.data());
  FA_CUDA_CHECK(cudaMemcpy(dst, h16.data(), size_t(n) * 2, cudaMemcpyHostToDevice));
}

// A random tensor of n elements in dtype t, made once per (n, t, seed) and kept: every problem of
// the papers' grid has the same element counts (B*N = 16384, H*d = 2048), so they share inputs.
inline const void* random_tensor(int64_t n, DType t, uint64_t seed) {
  static std::map<std::tuple<int64_t, int, uint64_t>, DeviceBuffer<uint8_t>> cache;
  auto& buf = cache[{n, int(t), seed}];
  if (buf.size() == 0) {
    buf = DeviceBuffer<uint8_t>(dtype_bytes(t) * n, Mem::Io);
    fill_normal(buf.get(), n, t, seed);
  }
  return buf.get();
}

// The L2 cache of the current GPU, bytes.
inline int64_t l2_bytes() {
  int dev = 0, l2 = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  return l2;
}

// How many input sets of set_bytes each to rotate so that their total exceeds 3x the L2 cache
// (at most 8): no timed iteration then reads its inputs from a warm cache.
inline int input_sets(int64_t set_bytes) {
  const int64_t s = (3 * l2_bytes() + set_bytes - 1) / set_bytes;
  return int(s < 1 ? 1 : s > 8 ? 8 : s);
}

// The FlashAttention papers' grid: B*N = 16384 tokens, H = 2048 / d heads (H * d = 2048).
inline AttnProblem paper_problem(int64_t N, int64_t d, bool causal) {
  AttnProblem p;
  p.B = 16384 / N, p.H = 2048 / d, p.H_kv = p.H, p.N_q = N, p.N_k = N, p.d = d, p.causal = causal;
  return p;
}

// The timed loop: launch(0) once untimed (module loading; it also measures the call's extra GPU
// memory), then each iteration one launch(s) between two CUDA events, s rotating over `sets`
// input sets. Sets the counters TFLOP/s and pct_peak (for `flops` per launch in dtype t),
// gpu_extra_bytes and input_sets.
template <class Launch>
void time_launches(benchmark::State& state, int sets, double flops, DType t, Launch&& launch) {
  int64_t extra = 0;
  {
    ExtraDeviceMemory mem;
    launch(0);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    extra = mem.peak_bytes();
  }
  int s = 0;
  for (auto _ : state) {
    EventTimer timer;
    launch(s);
    state.SetIterationTime(timer.stop() * 1e-3);
    s = (s + 1) % sets;
  }
  FA_CUDA_CHECK(cudaGetLastError());
  const double tf = flops * 1e-12;
  state.counters["TFLOP/s"] = benchmark::Counter(tf, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pct_peak"] = benchmark::Counter(tf / peak_tflops(t) * 100, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gpu_extra_bytes"] = double(extra);
  state.counters["input_sets"] = sets;
}

// The main() of a GPU benchmark program `name`: exits 0 with one line on stderr where there is no
// usable GPU (CI), else runs the registered benchmarks with the GPU's description in the JSON
// context. Exit code 1 for flags Google Benchmark does not know.
inline int gpu_benchmark_main(int argc, char** argv, const char* name) {
  std::string why;
  if (!gpu_available(&why)) {
    std::fprintf(stderr, "%s: skipped: no usable CUDA GPU (%s)\n", name, why.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("gpu", gpu_description());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace fa::bench
