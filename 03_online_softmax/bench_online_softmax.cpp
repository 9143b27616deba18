// Stage 03 benchmark: N sweep at d = 64 (B = H = 1). Time, GFLOP/s and the measured extra bytes
// (one state of d + 2 floats, whatever N). Run:
// build/03_online_softmax/bench_03_online_softmax --benchmark_out=docs/results/bench_03_online_softmax.json
//   --benchmark_out_format=json
#include "bench_util.hpp"
#include "online_softmax.hpp"

static void BM_online_softmax_forward(benchmark::State& state) {
  fa::bench_forward(state, online_softmax::forward<float>, fa::bench_problem(state.range(0), 64));
}
BENCHMARK(BM_online_softmax_forward)->RangeMultiplier(2)->Range(256, 8192)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
