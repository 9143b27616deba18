// Stage 02 benchmark: N sweep at d = 64 (B = H = 1). Time, GFLOP/s and the measured extra bytes
// (S and P: 2 * N^2 * 4 bytes, as in stage 01; the sweep stops at 4096 for that reason). Run:
// build/02_safe_softmax/bench_02_safe_softmax --benchmark_out=docs/results/bench_02_safe_softmax.json
//   --benchmark_out_format=json
#include "bench_util.hpp"
#include "safe_softmax.hpp"

static void BM_safe_softmax_forward(benchmark::State& state) {
  fa::bench_forward(state, safe_softmax::forward<float>, fa::bench_problem(state.range(0), 64));
}
BENCHMARK(BM_safe_softmax_forward)->RangeMultiplier(2)->Range(256, 4096)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
