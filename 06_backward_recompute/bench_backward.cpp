// Stage 06 benchmark: the recomputing backward against stage 01's materialised backward, in one
// process (so the ratio is fair), on the course's 2-core machines.
//   BM_bwd_tiled/N/d/causal/threads   stage 06's backward (default blocks), 1 or 2 OpenMP threads
//   BM_bwd_blocks/Br/Bc/d/causal      the block-size sweep (N = 4096, 2 threads) behind the defaults
//   BM_bwd_naive/N                    stage 01's backward, single-threaded, d = 64, N <= 4096
// Counters: GFLOP/s by FlashAttention's convention (backward = 2.5x the forward's 4 N_q N_k d,
// halved for causal; stage 06 really does 7 block products to that convention's 5, see
// backward_tiled.hpp), extra_bytes (measured peak heap above inputs and outputs). Wall time
// (UseRealTime), as OpenMP runs need.
// Run (writes docs/results/bench_06_backward_recompute.json):
//   build/06_backward_recompute/bench_06_backward_recompute --benchmark_out=docs/results/bench_06_backward_recompute.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <string>

#include "bench_util.hpp"
#include "memtrack.hpp"
#include "stage_06.hpp"

namespace bench_baselines {  // bench_baseline01.cpp: stage 01's backward, with its own program's flags
void stage01_backward(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
                      const float* dO, const float* LSE, float* dQ, float* dK, float* dV);
}

namespace {

// One timed backward per iteration, from the forward's O and LSE (computed once, untimed).
void bench_backward(benchmark::State& state, const fa::BackwardFn& f, const fa::AttnProblem& p) {
  fa::Inputs in = fa::random_inputs(p, 0);
  fa::add_grad_output(in, "", 1);
  const fa::ForwardRun fwd = fa::run_forward(stage_06().forward, in);
  fa::Tensor dQ(in.Q.shape), dK(in.K.shape), dV(in.V.shape);
  int64_t extra = 0;
  {
    fa::ExtraMemory mem;  // one untimed call measures the memory and warms the caches
    f(p, in.Q.ptr(), in.K.ptr(), in.V.ptr(), fwd.O.ptr(), in.dO.ptr(), fwd.LSE.ptr(), dQ.ptr(), dK.ptr(), dV.ptr());
    extra = mem.peak_bytes();
  }
  for (auto _ : state) {
    f(p, in.Q.ptr(), in.K.ptr(), in.V.ptr(), fwd.O.ptr(), in.dO.ptr(), fwd.LSE.ptr(), dQ.ptr(), dK.ptr(), dV.ptr());
    benchmark::DoNotOptimize(dQ.ptr());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(p.backward_flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["extra_bytes"] = double(extra);
  state.counters["N"] = double(p.N_q);
  state.counters["d"] = double(p.d);
  state.counters["causal"] = p.causal;
}

void BM_bwd_tiled(benchmark::State& state) {
  const fa::AttnProblem p = fa::bench_problem(state.range(0), state.range(1), state.range(2) != 0);
  tiled::Blocks blk;
  blk.threads = int(state.range(3));
  bench_backward(state, [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, const float* O,
                            const float* dO, const float* L, float* dQ, float* dK, float* dV) {
    bwd::backward<float>(q, Q, K, V, O, dO, L, dQ, dK, dV, blk);
  }, p);
  state.counters["threads"] = double(blk.threads);
}

// The block-size sweep behind bwd::default_blocks: N = 4096, 2 threads. Args: Br, Bc, d, causal.
void BM_bwd_blocks(benchmark::State& state) {
  const fa::AttnProblem p = fa::bench_problem(4096, state.range(2), state.range(3) != 0);
  tiled::Blocks blk;
  blk.Br = state.range(0), blk.Bc = state.range(1), blk.threads = 2;
  bench_backward(state, [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, const float* O,
                            const float* dO, const float* L, float* dQ, float* dK, float* dV) {
    bwd::backward<float>(q, Q, K, V, O, dO, L, dQ, dK, dV, blk);
  }, p);
}

void blocks_grid(benchmark::internal::Benchmark* b) {
  for (int64_t d : {64, 128})
    for (int64_t causal : {0, 1})
      for (auto [br, bc] : {std::pair<int64_t, int64_t>{32, 128}, {64, 64}, {64, 128}, {64, 256}, {128, 64}, {128, 128}})
        b->Args({br, bc, d, causal});
  b->ArgNames({"Br", "Bc", "d", "causal"});
}

void BM_bwd_naive(benchmark::State& state) {
  bench_backward(state, bench_baselines::stage01_backward, fa::bench_problem(state.range(0), 64, false));
  state.counters["threads"] = 1;
}

}  // namespace

BENCHMARK(BM_bwd_tiled)->Apply(fa::cpu_grid)->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_bwd_blocks)->Apply(blocks_grid)->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_bwd_naive)->Arg(256)->Arg(1024)->Arg(4096)->ArgName("N")->MinTime(0.1)->UseRealTime()->Unit(benchmark::kMillisecond);

// The vector ISA this build targets goes into the JSON's context: results from machines with
// other ISAs are told apart by it.
[[maybe_unused]] const bool kIsaContext =
    (benchmark::AddCustomContext("isa", std::string(tiled::mk::kIsa) + ", " + std::to_string(tiled::mk::VW) +
                                            " floats per vector"),
     true);

BENCHMARK_MAIN();
