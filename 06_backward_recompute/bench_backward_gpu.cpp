// Stage 06's GPU benchmark (Google Benchmark, manual time from CUDA events) on the FlashAttention
// papers' grid (B*N = 16384 tokens, H = 2048/d heads, common/cuda/bench_gpu.hpp), the
// backward only: D, the kernels of the plan and their workspace (dQ's accumulator zeroed, dQ
// converted), i.e. everything fa06::backward() launches.
//
//   BM_bwd/kernel:dtype/...   one backward of runner_bwd.hpp's kernel (gpu_v1 in fp32 at
//                             N <= 4096 only: it is the scalar port, ~100x slower) at d = 64 and
//                             128, and gpu_v2, gpu_v3 at the other native widths (32; 96: also
//                             gpu_v4; 192 and 256: gpu_v3 and gpu_v4)
//   BM_bwd_shape/...          gpu_v2 (bf16) at each compiled shape (fa06::bwd_shapes: 64 or 128
//                             keys a block, 16 or 32 a warp; the sweep behind default_bwd_shape)
//   BM_bwd_auto/...           "auto" (bf16) at every native width and padded ones between (40, 80,
//                             111, 160, 224: the copies to the next width included), labelled with
//                             what ran; TFLOP/s counts the real d's FLOPs, so padding shows as a loss
//   BM_bwd_variant/...        "auto" (bf16), causal, with a sliding window of `window` keys to the
//                             left (0: none) and a softcap (0: none), issue 34: TFLOP/s counts the
//                             pairs the window keeps, so a band that skips its tiles well keeps the
//                             causal rate; softcap's cost is the time against softcap 0
// Counters: TFLOP/s (backward 2.5 x the forward's 4*B*H*N_q*N_k*d, halved for causal, FA2's
//   convention: 5 matrix products against the forward's 2), pct_peak (of the datasheet's dense
//   peak), gpu_extra_bytes (the workspace, measured by the counted device buffers).
// Timing as stage 05's benchmark: input sets rotated past 3x the L2 cache, one warm-up launch,
// one backward between two CUDA events per iteration.
// Run (needs a GPU; scripts/gpu_check.sh keeps the JSON under its log folder):
//   build/06_backward_recompute/bench_06_backward_gpu --benchmark_out=bwd.json --benchmark_out_format=json
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_gpu.hpp"
#include "check.hpp"
#include "device_buffer.hpp"
#include "runner_bwd.hpp"

namespace {

using fa::bench::paper_problem;
using fa::bench::random_tensor;

// One backward of `kernel` in `dtype` on problem p, timed per launch. O and LSE are random too:
// the backward's cost does not depend on their values (LSE = 0 keeps every P finite).
void time_backward(benchmark::State& state, const std::string& kernel, fa::DType t, const fa::AttnProblem& p,
                   fa06::BwdShape shape) {
  const int64_t eb = fa::dtype_bytes(t);
  const int sets = fa::bench::input_sets(eb * (3 * p.q_elems() + 2 * p.kv_elems()));
  std::vector<const void*> Q, K, V, O, dO;
  for (int s = 0; s < sets; ++s) {
    Q.push_back(random_tensor(p.q_elems(), t, 10 + 5 * s));
    K.push_back(random_tensor(p.kv_elems(), t, 11 + 5 * s));
    V.push_back(random_tensor(p.kv_elems(), t, 12 + 5 * s));
    O.push_back(random_tensor(p.q_elems(), t, 13 + 5 * s));
    dO.push_back(random_tensor(p.q_elems(), t, 14 + 5 * s));
  }
  fa::DeviceBuffer<float> LSE(p.lse_elems(), fa::Mem::Io);
  FA_CUDA_CHECK(cudaMemset(LSE.get(), 0, size_t(LSE.bytes())));
  fa::DeviceBuffer<uint8_t> dQ(eb * p.q_elems(), fa::Mem::Io), dK(eb * p.kv_elems(), fa::Mem::Io),
      dV(eb * p.kv_elems(), fa::Mem::Io);
  auto launch = [&](int s) {
    const size_t i = size_t(s);
    fa06::backward(kernel, p, t, Q[i], K[i], V[i], O[i], dO[i], LSE.get(), dQ.get(), dK.get(), dV.get(), nullptr,
                   shape);
  };
  fa::bench::time_launches(state, sets, p.backward_flops(), t, launch);
  const fa06::BwdPlan pl = fa06::backward_plan(kernel, p, t, shape);
  state.counters["Br"] = double(pl.Br);
  state.counters["Bc"] = double(pl.Bc);
  state.counters["keys_per_warp"] = double(pl.keys_per_warp);
  state.counters["smem_bytes"] = double(pl.smem_dkdv);
  state.counters["d_kernel"] = double(pl.d_kernel);
  state.SetLabel(kernel == "auto" ? "auto (" + pl.runs + " at d = " + std::to_string(pl.d_kernel) + "):" + fa::dtype_name(t)
                                  : kernel + ":" + fa::dtype_name(t));
}

// Args: kernel index, dtype, N, d, causal.
void BM_bwd(benchmark::State& state) {
  time_backward(state, fa06::backward_kernels()[size_t(state.range(0))], fa::DType(state.range(1)),
                paper_problem(state.range(2), state.range(3), state.range(4) != 0), {});
}

// Args: key block, keys per warp, N, d, causal.
void BM_bwd_shape(benchmark::State& state) {
  time_backward(state, "gpu_v2", fa::DType::bf16, paper_problem(state.range(2), state.range(3), state.range(4) != 0),
                {state.range(0), state.range(1)});
}

// Args: N, d, causal.
void BM_bwd_auto(benchmark::State& state) {
  time_backward(state, "auto", fa::DType::bf16, paper_problem(state.range(0), state.range(1), state.range(2) != 0), {});
}

// Args: N, d, window (left side, causal: right 0; 0 = none), softcap (0 = none).
void BM_bwd_variant(benchmark::State& state) {
  fa::AttnProblem p = paper_problem(state.range(0), state.range(1), true);
  if (state.range(2) > 0) p.window_left = state.range(2), p.window_right = 0;
  p.softcap = float(state.range(3));
  time_backward(state, "auto", fa::DType::bf16, p, {});
}

void bwd_grid(benchmark::internal::Benchmark* b) {
  const auto& ks = fa06::backward_kernels();
  for (int64_t k = 0; k < int64_t(ks.size()); ++k)
    for (int64_t d : {64, 128})
      for (int64_t causal : {0, 1})
        for (int64_t N : {512, 1024, 2048, 4096, 8192, 16384}) {
          if (ks[size_t(k)].rfind("gpu_v4", 0) == 0 && d != 128) continue;  // runs gpu_v2 there
          if (ks[size_t(k)] == "gpu_v1") {
            if (N <= 4096) b->Args({k, int64_t(fa::DType::fp32), N, d, causal});
          } else {
            b->Args({k, int64_t(fa::DType::bf16), N, d, causal});
          }
        }
  // The other native widths: gpu_v2 (up to 128), gpu_v3, and gpu_v4 at 96, 192 and 256, the ones
  // that run there themselves.
  for (int64_t d : {32, 96, 192, 256})
    for (const std::string name : {"gpu_v2", "gpu_v3", "gpu_v4"}) {
      if (name == "gpu_v2" && d > 128) continue;  // runs gpu_v3 there
      if (name == "gpu_v4" && d < 96) continue;  // runs auto's choice there
      const int64_t k = std::find(ks.begin(), ks.end(), name) - ks.begin();
      for (int64_t causal : {0, 1})
        for (int64_t N : {512, 1024, 2048, 4096, 8192, 16384}) b->Args({k, int64_t(fa::DType::bf16), N, d, causal});
    }
  b->ArgNames({"kernel", "dtype", "N", "d", "causal"});
}

void auto_grid(benchmark::internal::Benchmark* b) {
  for (int64_t d : {32, 40, 64, 80, 96, 111, 128, 160, 192, 224, 256})
    for (int64_t causal : {0, 1})
      for (int64_t N : {1024, 4096, 16384}) b->Args({N, d, causal});
  b->ArgNames({"N", "d", "causal"});
}

void variant_grid(benchmark::internal::Benchmark* b) {
  for (int64_t d : {64, 128})
    for (int64_t N : {4096, 16384})
      for (int64_t w : {0, 256, 1024})
        for (int64_t cap : {0, 50}) b->Args({N, d, w, cap});
  b->ArgNames({"N", "d", "window", "softcap"});
}
void shape_grid(benchmark::internal::Benchmark* b) {
  for (int64_t d : {32, 64, 96, 128})
    for (const fa06::BwdShape& sh : fa06::bwd_shapes(d))
      for (int64_t causal : {0, 1})
        for (int64_t N : {1024, 8192}) b->Args({sh.Bc, sh.keys_per_warp, N, d, causal});
  b->ArgNames({"block_k", "keys_per_warp", "N", "d", "causal"});
}

}  // namespace

BENCHMARK(BM_bwd)->Apply(bwd_grid)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_bwd_shape)->Apply(shape_grid)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_bwd_auto)->Apply(auto_grid)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_bwd_variant)->Apply(variant_grid)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) { return fa::bench::gpu_benchmark_main(argc, argv, "bench_06_backward_gpu"); }
