// Google Benchmark helpers shared by every stage's benchmark: one timed forward (or backward) per
// iteration on random inputs, with the counters the course reports.
//   GFLOP/s      : FlashAttention convention, forward 4*B*H*N_q*N_k*d (halved if causal)
//   extra_bytes  : peak heap bytes above inputs and outputs during one call (memtrack.hpp)
#pragma once
#include <benchmark/benchmark.h>

#include "harness.hpp"
#include "memtrack.hpp"

namespace fa {

inline void bench_forward(benchmark::State& state, const ForwardFn& f, const AttnProblem& p) {
  const Inputs in = random_inputs(p, 0);
  Tensor O({p.B, p.H, p.N_q, p.d}), LSE({p.B, p.H, p.N_q});
  int64_t extra = 0;
  {
    ExtraMemory mem;  // one untimed call to measure memory (and warm the caches)
    f(p, in.Q.ptr(), in.K.ptr(), in.V.ptr(), O.ptr(), LSE.ptr());
    extra = mem.peak_bytes();
  }
  for (auto _ : state) {
    f(p, in.Q.ptr(), in.K.ptr(), in.V.ptr(), O.ptr(), LSE.ptr());
    benchmark::DoNotOptimize(O.ptr());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(p.forward_flops() * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["extra_bytes"] = double(extra);
  state.counters["N"] = double(p.N_q);
  state.counters["d"] = double(p.d);
}

// The grid the CPU stages' benchmarks share (04 forward, 06 backward): Args {N, d, causal,
// threads} with N in {256, 1024, 4096, 16384}, d in {64, 128}, causal and not, 1 and 2 threads.
inline void cpu_grid(benchmark::internal::Benchmark* b) {
  for (int64_t N : {256, 1024, 4096, 16384})
    for (int64_t d : {64, 128})
      for (int64_t causal : {0, 1})
        for (int64_t t : {1, 2}) b->Args({N, d, causal, t});
  b->ArgNames({"N", "d", "causal", "threads"});
}

inline AttnProblem bench_problem(int64_t N, int64_t d, bool causal = false) {
  AttnProblem p;
  p.B = 1, p.H = 1, p.H_kv = 1, p.N_q = N, p.N_k = N, p.d = d, p.causal = causal;
  return p;
}

}  // namespace fa
