// Stage 01 benchmark: N sweep at d = 64 (B = H = 1). Time, GFLOP/s and the measured extra bytes
// (S and P: 2 * N^2 * 4 bytes). Run: build/01_naive/bench_01_naive --benchmark_out=... (see
// scripts/bench.sh --update-docs, which writes docs/results/bench_01_naive.json).
#include "bench_util.hpp"
#include "naive.hpp"

static void BM_naive_forward(benchmark::State& state) {
  fa::bench_forward(state, naive::forward<float>, fa::bench_problem(state.range(0), 64));
}
BENCHMARK(BM_naive_forward)->RangeMultiplier(2)->Range(256, 4096)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
