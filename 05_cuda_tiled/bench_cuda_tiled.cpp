// Stage 05 benchmark (Google Benchmark, manual time from CUDA events) on the FlashAttention
// papers' grid: B*N = 16384 tokens, H = 2048/d heads, N in {512 .. 16384}, d in {64, 128},
// causal and not. Every kernel of runner.hpp in fp32 and bf16, and cuBLAS GEMMs as the measured
// ceilings of the same process.
//
//   BM_gemm/dtype            an 8192^3 cuBLAS GEMM (fp32 without TF32; bf16 on tensor cores):
//                            the practical peak of the dtype on this GPU, measured
//   BM_attn/kernel:dtype/... one forward of runner.hpp's kernel
//   BM_v1_sram/...           v1 at several shared-memory budgets M (the block-size sweep)
//   BM_shape/...             v5, v6, v7 (bf16) at each compiled block shape Br x Bc (the sweeps
//                            behind their default shapes)
//   BM_decode_cache/...      v14 on a KV cache (N_q = 1, bf16, d = 128): no cache, per-sequence
//                            lengths, paged at several page sizes (what the block table costs);
//                            counter GB/s of K and V read
//   BM_decode_splits/...     v14 (N_q = 1, bf16, d = 128, no cache) at forced split counts, labelled
//                            with the plan's own choice: the measurement behind split_kv_plan()
//   BM_fp8/...               v15 (FP8, d = 128) on the paper's grid: mode 0 from bf16 inputs (the
//                            quantisation, V's transpose and the kernel), mode 1 from e4m3 inputs
//                            with their scales (the transpose and the kernel); beside v13 in bf16
//                            (BM_attn/kernel:12/dtype:2/.../d:128) in the same process
// Counters: TFLOP/s (forward 4*B*H*N_q*N_k*d, halved for causal, FlashAttention's convention),
//   pct_peak (of the datasheet's dense peak: fp32 66.9, bf16 989.4 TFLOP/s for the H100/H200 SXM),
//   gpu_extra_bytes (the kernel's workspace, measured by the counted device buffers). The share
//   of the measured GEMM rate (BM_gemm, same run) is computed from the JSON by
//   tools/gpu_tables.py.
// Timing: inputs random normal (cuRAND), several input sets rotated when one set would fit in
// L2 (so no iteration reads from a warm cache), one untimed warm-up launch, then each iteration
// is one launch between two CUDA events (kernel time only, no host overhead).
// Run (writes docs/results/bench_05_cuda_tiled.json; needs a GPU):
//   build/05_cuda_tiled/bench_05_cuda_tiled --benchmark_out=docs/results/bench_05_cuda_tiled.json --benchmark_out_format=json
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_gpu.hpp"
#include "check.hpp"
#include "device_buffer.hpp"
#include "devstats.hpp"
#include "event_timer.hpp"
#include "runner.hpp"
#include "runner_fp8.hpp"

namespace {

using fa::bench::fill_normal;
using fa::bench::paper_problem;
using fa::bench::peak_tflops;
using fa::bench::random_tensor;

void BM_gemm(benchmark::State& state) {
  const fa::DType t = fa::DType(state.range(0));
  const int n = 8192;
  const int64_t eb = fa::dtype_bytes(t);
  fa::DeviceBuffer<uint8_t> A(eb * n * n, fa::Mem::Io), B(eb * n * n, fa::Mem::Io), C(eb * n * n, fa::Mem::Io);
  fill_normal(A.get(), int64_t(n) * n, t, 1);
  fill_normal(B.get(), int64_t(n) * n, t, 2);
  cublasHandle_t h = nullptr;
  if (const cublasStatus_t st = cublasCreate(&h); st != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError((std::string("cublasCreate: ") + cublasGetStatusString(st)).c_str());
    return;
  }
  const cudaDataType_t ty = t == fa::DType::fp32 ? CUDA_R_32F : CUDA_R_16BF;
  const float one = 1.f, zero = 0.f;
  auto gemm = [&] {
    return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A.get(), ty, n, B.get(), ty, n, &zero,
                        C.get(), ty, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  };
  if (const cublasStatus_t st = gemm(); st != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError((std::string("cublasGemmEx: ") + cublasGetStatusString(st)).c_str());
    cublasDestroy(h);
    return;
  }
  for (auto _ : state) {
    fa::EventTimer timer;
    if (const cublasStatus_t st = gemm(); st != CUBLAS_STATUS_SUCCESS) {  // a failed call is no time
      state.SkipWithError((std::string("cublasGemmEx: ") + cublasGetStatusString(st)).c_str());
      break;
    }
    state.SetIterationTime(timer.stop() * 1e-3);
  }
  cublasDestroy(h);
  const double flops = 2.0 * n * n * double(n);
  state.counters["TFLOP/s"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pct_peak"] = benchmark::Counter(flops * 1e-12 / peak_tflops(t) * 100,
                                                  benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(fa::dtype_name(t));
}

// One forward of `kernel` in `dtype` on problem p, timed per launch.
void time_forward(benchmark::State& state, const std::string& kernel, fa::DType t, const fa::AttnProblem& p,
                  const fa05::Config& cfg) {
  const int64_t eb = fa::dtype_bytes(t);
  const int64_t set_bytes = eb * (p.q_elems() + 2 * p.kv_elems());
  const int sets = fa::bench::input_sets(set_bytes);
  std::vector<const void*> Q, K, V;
  for (int s = 0; s < sets; ++s) {
    Q.push_back(random_tensor(p.q_elems(), t, 10 + 3 * s));
    K.push_back(random_tensor(p.kv_elems(), t, 11 + 3 * s));
    V.push_back(random_tensor(p.kv_elems(), t, 12 + 3 * s));
  }
  fa::DeviceBuffer<uint8_t> O(eb * p.q_elems(), fa::Mem::Io);
  fa::DeviceBuffer<float> LSE(p.lse_elems(), fa::Mem::Io);
  auto launch = [&](int s) {
    fa05::forward(kernel, p, t, Q[size_t(s)], K[size_t(s)], V[size_t(s)], O.get(), LSE.get(), cfg, nullptr);
  };
  fa::bench::time_launches(state, sets, p.forward_flops(), t, launch);
  const fa05::Plan pl = fa05::plan(kernel, p, t, cfg);
  state.counters["Br"] = double(pl.Br);
  state.counters["Bc"] = double(pl.Bc);
  state.counters["smem_bytes"] = double(pl.smem_bytes);
  state.SetLabel(kernel + ":" + fa::dtype_name(t));
}

// Args: kernel index, dtype, N, d, causal.
void BM_attn(benchmark::State& state) {
  const std::string kernel = fa05::kernels()[size_t(state.range(0))].name;
  time_forward(state, kernel, fa::DType(state.range(1)),
               paper_problem(state.range(2), state.range(3), state.range(4) != 0), {});
}

// v15 (FP8). Args: N, causal, mode (0: bf16 in, quantised on the GPU each call; 1: e4m3 in).
// TFLOP/s count the same FLOPs as bf16's (pct_peak is of bf16's 989.4; FP8's dense peak is twice that).
void BM_fp8(benchmark::State& state) {
  const fa::AttnProblem p = paper_problem(state.range(0), 128, state.range(1) != 0);
  const bool e4m3_in = state.range(2) != 0;
  const fa::DType t = fa::DType::bf16;
  const int64_t set_bytes = 2 * (p.q_elems() + 2 * p.kv_elems());
  const int sets = fa::bench::input_sets(set_bytes);
  std::vector<const void*> Q, K, V;
  for (int s = 0; s < sets; ++s) {
    Q.push_back(random_tensor(p.q_elems(), t, 10 + 3 * s));
    K.push_back(random_tensor(p.kv_elems(), t, 11 + 3 * s));
    V.push_back(random_tensor(p.kv_elems(), t, 12 + 3 * s));
  }
  // e4m3 inputs: random bytes of finite values (patterns 0 ... 0x7D, either sign), scales 2^-7.
  const auto bytes = [](int64_t n, uint64_t x) {
    std::vector<uint8_t> h(static_cast<size_t>(n));
    for (uint8_t& b : h) x ^= x << 13, x ^= x >> 7, x ^= x << 17, b = uint8_t((x >> 8) % 0x7E | ((x >> 40) & 0x80));
    auto* d = new fa::DeviceBuffer<uint8_t>(n, fa::Mem::Io);  // lives for the process, as random_tensor's
    FA_CUDA_CHECK(cudaMemcpy(d->get(), h.data(), size_t(n), cudaMemcpyHostToDevice));
    return d->get();
  };
  const auto scales = [](int64_t n) {
    std::vector<float> h(static_cast<size_t>(n), 0x1p-7f);
    auto* d = new fa::DeviceBuffer<float>(n, fa::Mem::Io);
    FA_CUDA_CHECK(cudaMemcpy(d->get(), h.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
    return d->get();
  };
  fa05::Fp8Inputs in8;
  if (e4m3_in)
    in8 = {bytes(p.q_elems(), 1), bytes(p.kv_elems(), 2), bytes(p.kv_elems(), 3), scales(p.B * p.H * fa05::fp8_q_blocks(p)),
           scales(p.B * p.H_kv * fa05::fp8_kv_blocks(p)), scales(p.B * p.H_kv * fa05::fp8_kv_blocks(p))};
  fa::DeviceBuffer<uint8_t> O(2 * p.q_elems(), fa::Mem::Io);
  fa::DeviceBuffer<float> LSE(p.lse_elems(), fa::Mem::Io);
  auto launch = [&](int s) {
    if (e4m3_in) fa05::forward_fp8_e4m3(p, in8, O.get(), LSE.get(), {}, nullptr);
    else fa05::forward_fp8(p, Q[size_t(s)], K[size_t(s)], V[size_t(s)], O.get(), LSE.get(), {}, nullptr);
  };
  fa::bench::time_launches(state, e4m3_in ? 1 : sets, p.forward_flops(), t, launch);
  state.SetLabel(e4m3_in ? "v15:e4m3 in" : "v15:bf16 in");
}

// v1 at shared-memory budgets M (KiB): the block-size sweep. Args: M_KiB, dtype, N, d, causal.
void BM_v1_sram(benchmark::State& state) {
  fa05::Config cfg;
  cfg.sram_bytes = state.range(0) * 1024;
  time_forward(state, "v1", fa::DType(state.range(1)), paper_problem(state.range(2), state.range(3), state.range(4) != 0), cfg);
}

// v5 ... v13 at each compiled block shape: the sweeps behind fa05::default_shape().
// Args: kernel index, Br, Bc, N, d, causal.
void BM_shape(benchmark::State& state) {
  fa05::Config cfg;
  cfg.Br = state.range(1), cfg.Bc = state.range(2);
  time_forward(state, fa05::kernels()[size_t(state.range(0))].name, fa::DType::bf16,
               paper_problem(state.range(3), state.range(4), state.range(5) != 0), cfg);
}

// v14 on a KV cache. Args: B, H, H_kv, N_k, page size P (0: contiguous), mode (0: no cache, 1:
// lengths all N_k, 2: lengths all N_k, paged with the pages of each sequence scattered by a
// seeded permutation). Same bytes read in every mode: the differences are the cache's cost.
void BM_decode_cache(benchmark::State& state) {
  const int64_t B = state.range(0), H = state.range(1), Hkv = state.range(2), N_k = state.range(3), P = state.range(4);
  const int64_t mode = state.range(5);
  const fa::DType t = fa::DType::bf16;
  const fa::AttnProblem p = fa::make_problem(B, H, Hkv, 1, N_k, 128, false);
  const void* Q = random_tensor(p.q_elems(), t, 21);
  const void* K = random_tensor(p.kv_elems(), t, 22);
  const void* V = random_tensor(p.kv_elems(), t, 23);
  fa::DeviceBuffer<uint8_t> O(2 * p.q_elems(), fa::Mem::Io);
  fa::DeviceBuffer<float> LSE(p.lse_elems(), fa::Mem::Io);
  const int64_t pages_per_seq = P > 0 ? N_k / P : 0, num_pages = B * pages_per_seq;
  std::vector<int32_t> lens(static_cast<size_t>(B), static_cast<int32_t>(N_k));
  std::vector<int32_t> table(static_cast<size_t>(num_pages));
  for (int64_t i = 0; i < num_pages; ++i) table[size_t(i)] = int32_t(i);
  uint64_t x = 12345;  // a seeded shuffle (xorshift): the pages of a sequence land anywhere
  for (int64_t i = num_pages - 1; i > 0; --i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::swap(table[size_t(i)], table[size_t(x % uint64_t(i + 1))]);
  }
  fa::DeviceBuffer<int32_t> lens_d(B, fa::Mem::Io), table_d(num_pages, fa::Mem::Io);
  FA_CUDA_CHECK(cudaMemcpy(lens_d.get(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  if (num_pages > 0) FA_CUDA_CHECK(cudaMemcpy(table_d.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  fa05::KvCache cache;
  if (mode >= 1) cache.lens = lens_d.get();
  if (mode == 2) cache = {lens_d.get(), table_d.get(), P, pages_per_seq, num_pages};
  auto launch = [&](int) { fa05::forward("v14", p, t, Q, K, V, O.get(), LSE.get(), cache, {}, nullptr); };
  fa::bench::time_launches(state, 1, p.forward_flops(), t, launch);
  state.counters["GB/s"] = benchmark::Counter(double(2 * p.kv_elems() * 2) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(mode == 0 ? "no cache" : mode == 1 ? "lengths" : "paged P=" + std::to_string(P));
}

// v14 with the split count forced (0: the plan's). Args: B, H, H_kv, N_k, splits.
void BM_decode_splits(benchmark::State& state) {
  const int64_t B = state.range(0), H = state.range(1), Hkv = state.range(2), N_k = state.range(3);
  const fa::DType t = fa::DType::bf16;
  const fa::AttnProblem p = fa::make_problem(B, H, Hkv, 1, N_k, 128, false);
  fa05::Config cfg;
  cfg.splits = state.range(4);
  const int64_t planned = fa05::plan("v14", p, t, fa05::Config{}).splits;
  bool runs = false;  // a count past one split per tile, or one that leaves a split empty, is not a point
  try {
    runs = fa05::plan("v14", p, t, cfg).splits == (cfg.splits > 0 ? cfg.splits : planned);
  } catch (const fa05::Unsupported&) {
  }
  if (!runs) {
    state.SkipWithError("not that many non-empty splits of 64-key tiles here");
    return;
  }
  const void* Q = random_tensor(p.q_elems(), t, 21);
  const void* K = random_tensor(p.kv_elems(), t, 22);
  const void* V = random_tensor(p.kv_elems(), t, 23);
  fa::DeviceBuffer<uint8_t> O(2 * p.q_elems(), fa::Mem::Io);
  fa::DeviceBuffer<float> LSE(p.lse_elems(), fa::Mem::Io);
  auto launch = [&](int) { fa05::forward("v14", p, t, Q, K, V, O.get(), LSE.get(), {}, cfg, nullptr); };
  fa::bench::time_launches(state, 1, p.forward_flops(), t, launch);
  state.counters["GB/s"] = benchmark::Counter(double(2 * p.kv_elems() * 2) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("plan: " + std::to_string(planned) + " splits");
}

void splits_grid(benchmark::internal::Benchmark* b) {
  // units (B H_kv row tiles): 8, 2, 32, 64, 128, and 72 and 96 (between half the SMs and all of them)
  const int64_t shapes[][4] = {{1, 32, 8, 131072}, {1, 32, 1, 131072}, {1, 32, 32, 131072}, {8, 32, 8, 32768},
                               {16, 32, 8, 8192},  {9, 32, 8, 32768},  {3, 32, 32, 65536}};
  for (auto& sh : shapes)
    for (int64_t s : {0, 1, 2, 3, 4, 7, 8, 16, 24, 29, 33, 48, 66, 128})
      b->Args({sh[0], sh[1], sh[2], sh[3], s});
  b->ArgNames({"B", "H", "H_kv", "N_k", "splits"});
}

void decode_grid(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][4] = {{8, 32, 8, 32768}, {1, 32, 8, 131072}, {64, 32, 32, 4096}};
  for (auto& sh : shapes) {
    b->Args({sh[0], sh[1], sh[2], sh[3], 0, 0});
    b->Args({sh[0], sh[1], sh[2], sh[3], 0, 1});
    for (int64_t P : {16, 64, 256}) b->Args({sh[0], sh[1], sh[2], sh[3], P, 2});
  }
  b->ArgNames({"B", "H", "H_kv", "N_k", "P", "mode"});
}

void attn_grid(benchmark::internal::Benchmark* b) {
  for (int64_t k = 0; k < int64_t(fa05::kernels().size()); ++k)
    for (int64_t t : {int64_t(fa::DType::fp32), int64_t(fa::DType::bf16)})
      for (int64_t d : {64, 128})
        for (int64_t causal : {0, 1})
          for (int64_t N : {512, 1024, 2048, 4096, 8192, 16384}) {
            const std::string& name = fa05::kernels()[size_t(k)].name;
            // Only what the kernel runs itself (v2 in fp32 would time v1 again).
            if (fa05::plan(name, paper_problem(N, d, causal != 0), fa::DType(t)).runs == name)
              b->Args({k, t, N, d, causal});
          }
  b->ArgNames({"kernel", "dtype", "N", "d", "causal"});
}

void sram_grid(benchmark::internal::Benchmark* b) {
  for (int64_t d : {64, 128})
    for (int64_t m : {16, 32, 48, 64, 96, 160}) b->Args({m, int64_t(fa::DType::bf16), 4096, d, 0});
  b->ArgNames({"M_KiB", "dtype", "N", "d", "causal"});
}

void shape_grid(benchmark::internal::Benchmark* b) {
  for (int64_t k = 0; k < int64_t(fa05::kernels().size()); ++k)
    for (int64_t d : {32, 64, 96, 128, 192, 256})  // v13's native widths (each has a choice of shape); the others': 64, 128
      if (fa05::kernels()[size_t(k)].name == "v13" || d == 64 || d == 128)
      for (const fa05::BlockShape& sh : fa05::block_shapes(fa05::kernels()[size_t(k)].name, d))
        for (int64_t causal : {0, 1})
          for (int64_t N : {512, 1024, 2048, 4096, 8192, 16384})
            // v13's default depends on N (4096 and 16384 for it alone); only what the kernel runs
            // itself (v8 at d = 64 runs v7)
            if ((fa05::kernels()[size_t(k)].name == "v13" || (N != 4096 && N != 16384)) &&
                fa05::plan(fa05::kernels()[size_t(k)].name, paper_problem(N, d, causal != 0), fa::DType::bf16).runs ==
                fa05::kernels()[size_t(k)].name)
              b->Args({k, sh.Br, sh.Bc, N, d, causal});
  b->ArgNames({"kernel", "Br", "Bc", "N", "d", "causal"});
}

}  // namespace

BENCHMARK(BM_gemm)->Arg(int64_t(fa::DType::fp32))->Arg(int64_t(fa::DType::bf16))->ArgName("dtype")
    ->UseManualTime()->MinTime(0.2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_attn)->Apply(attn_grid)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_v1_sram)->Apply(sram_grid)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_cache)->Apply(decode_grid)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_decode_splits)->Apply(splits_grid)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_fp8)->ArgsProduct({{512, 1024, 2048, 4096, 8192, 16384}, {0, 1}, {0, 1}})->ArgNames({"N", "causal", "mode"})
    ->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_shape)->Apply(shape_grid)->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) { return fa::bench::gpu_benchmark_main(argc, argv, "bench_05_cuda_tiled"); }
