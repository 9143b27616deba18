// Stage 04 benchmark, against the machine's measured fp32 FMA peak and the materialised attention
// a C++ engineer would write with BLAS (cblas_sgemm for S and for P V, OpenBLAS).
//
//   BM_fma_peak/threads      a loop of independent fused multiply-adds in registers: the fp32 peak
//   BM_tiled/N/d/causal/thr  stage 04, default blocks (tiled::blocks_for), 1 or 2 OpenMP threads
//   BM_blas/N/d/causal/thr   S = Q K^T (sgemm), masked safe softmax, O = P V (sgemm)
//   BM_stage0{1,2,3}/N       stages 01-03 (single-threaded by design), d = 64, N <= 4096
//   BM_varlen/mode/causal    a packed batch of 8 sequences of 64 ... 4096 tokens (H = 8, d = 64, 2
//                            threads): mode 0 varlen (varlen_forward: stage 04 per sequence on
//                            offset pointers, token-major), 1 padded to the longest ([8, H, 4096, d],
//                            the padding computed too), 2 each sequence copied to its own contiguous
//                            [1, H, N, d] first (copies untimed: what the token-major rows cost).
//                            Not in the default run: FA_BENCH_VARLEN=1 ... --benchmark_filter=BM_varlen
//                            (docs/lab/04_tiled_cpu.md, "Varlen against padding to the longest sequence")
// Counters: GFLOP/s (FlashAttention convention: 4 N_q N_k d, halved for causal; every timed
// benchmark uses UseRealTime(), so rates divide by wall time, as OpenMP runs need), pct_peak (of
// the FMA peak with the same thread count: the one BM_fma_peak prints, recorded in every row as
// peak_GFLOP/s), extra_bytes (measured peak heap above inputs/outputs).
// Skipped, to keep the whole run near 5 minutes on 2 cores: stages 01-03 above N = 4096 (at
// N = 16384 stage 02 alone would hold 2 GiB for S and P and run for about a minute per call).
// Run (writes docs/results/bench_04_tiled_cpu.json):
//   build/04_tiled_cpu/bench_04_tiled_cpu --benchmark_out=docs/results/bench_04_tiled_cpu.json --benchmark_out_format=json
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "bench_util.hpp"
#include "fma_peak.hpp"
#include "microkernel.hpp"
#include "bench_baselines.hpp"
#include "tiled.hpp"
#include "varlen.hpp"
#ifdef FA_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

// ---- the fp32 FMA peak, measured (fma_peak.hpp) ---------------------------------------------
double measure_peak(int threads) {
  double sink = 0;
  const double g = tiled::measure_fma_peak(threads, 20'000'000, &sink);
  benchmark::DoNotOptimize(sink);
  return g;
}

// The peak that pct_peak divides by, per thread count. BM_fma_peak (registered first, so it runs
// first) stores its result here, so the percentages divide by the number its row prints; when a
// --benchmark_filter leaves it out, the same loop is measured here instead (best of 3).
double peak_cache[3] = {0, 0, 0};

double peak_gflops(int threads) {
  if (peak_cache[threads] == 0) {
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) best = std::max(best, measure_peak(threads));
    peak_cache[threads] = best;
  }
  return peak_cache[threads];
}

void add_pct_peak(benchmark::State& state, const fa::AttnProblem& p, int threads) {
  // A rate counter: flops per second / peak flops per second, in percent.
  state.counters["pct_peak"] = benchmark::Counter(
      p.forward_flops() / (peak_gflops(threads) * 1e9) * 100, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_GFLOP/s"] = peak_gflops(threads);  // the divisor, so the JSON says which
  state.counters["threads"] = threads;
  state.counters["causal"] = p.causal;
}

void BM_fma_peak(benchmark::State& state) {
  const int threads = int(state.range(0));
  double g = 0;
  for (auto _ : state) g = std::max(g, measure_peak(threads));
  peak_cache[threads] = g;  // pct_peak of the rows that follow divides by this very number
  state.counters["GFLOP/s"] = g;
  state.counters["threads"] = threads;
  state.counters["vector_floats"] = tiled::mk::VW;
}

// ---- stage 04 --------------------------------------------------------------------------------
void BM_tiled(benchmark::State& state) {
  const fa::AttnProblem p = fa::bench_problem(state.range(0), state.range(1), state.range(2) != 0);
  const int threads = int(state.range(3));
  tiled::Blocks blk;  // the stage's default blocks, as forward() resolves them for this problem
  blk.threads = threads;
  blk = tiled::blocks_for(p, blk);
  fa::bench_forward(state, [&](const fa::AttnProblem& q, const float* Q, const float* K,
                               const float* V, float* O, float* L) {
    tiled::forward<float>(q, Q, K, V, O, L, blk);
  }, p);
  add_pct_peak(state, p, threads);
  state.counters["Br"] = double(blk.Br);
  state.counters["Bc"] = double(blk.Bc);
}

#ifdef FA_HAVE_OPENBLAS
// ---- the BLAS baseline: materialised attention -----------------------------------------------
// S = scale Q K^T and O = P V are two cblas_sgemm calls per (b, h); in between, the causal mask
// and a safe softmax per row (std::exp, OpenMP over rows). Extra memory: S (P overwrites it).
void blas_forward(const fa::AttnProblem& p, const float* Q, const float* K, const float* V,
                  float* O, float* LSE, int threads) {
  std::vector<float> S(size_t(p.N_q * p.N_k));
  const float scale = p.resolved_scale(), neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(p.N_q), int(p.N_k), int(p.d), scale,
                  Q + p.q_offset(b, h, 0), int(p.d), K + p.kv_offset(b, h, 0), int(p.d), 0.f,
                  S.data(), int(p.N_k));
#pragma omp parallel for num_threads(threads)
      for (int64_t i = 0; i < p.N_q; ++i) {
        float* s = S.data() + i * p.N_k;
        const int64_t seen = p.key_end(i);  // causal only here: row i sees keys 0 .. seen - 1
        std::fill(s + seen, s + p.N_k, neg_inf);
        float m = neg_inf, l = 0;
        for (int64_t j = 0; j < seen; ++j) m = std::max(m, s[j]);
        for (int64_t j = 0; j < p.N_k; ++j) l += (s[j] = j < seen ? std::exp(s[j] - m) : 0.f);
        const float inv = seen ? 1.f / l : 0.f;
        for (int64_t j = 0; j < p.N_k; ++j) s[j] *= inv;
        LSE[p.lse_offset(b, h, i)] = seen ? m + std::log(l) : neg_inf;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(p.N_q), int(p.d), int(p.N_k), 1.f,
                  S.data(), int(p.N_k), V + p.kv_offset(b, h, 0), int(p.d), 0.f,
                  O + p.q_offset(b, h, 0), int(p.d));
    }
}

void BM_blas(benchmark::State& state) {
  const fa::AttnProblem p = fa::bench_problem(state.range(0), state.range(1), state.range(2) != 0);
  const int threads = int(state.range(3));
  openblas_set_num_threads(threads);
  fa::bench_forward(state, [&](const fa::AttnProblem& q, const float* Q, const float* K,
                               const float* V, float* O, float* L) {
    blas_forward(q, Q, K, V, O, L, threads);
  }, p);
  add_pct_peak(state, p, threads);
}
#endif

// ---- stages 01-03 (single-threaded) ------------------------------------------------------------
template <void (*F)(const fa::AttnProblem&, const float*, const float*, const float*, float*, float*)>
void BM_stage(benchmark::State& state) {
  const fa::AttnProblem p = fa::bench_problem(state.range(0), 64, false);
  fa::bench_forward(state, F, p);
  add_pct_peak(state, p, 1);
}

// ---- a packed variable-length batch against padding (common/varlen.hpp) ---------------------
// Lengths from 64 to 4096 mixed (a pretraining pack or a serving batch: a few long, many short).
const std::vector<int32_t> kVarlenLens = {4096, 64, 1000, 200, 2048, 129, 512, 3000};

void BM_varlen(benchmark::State& state) {
  const int mode = int(state.range(0));
  const bool causal = state.range(1) != 0;
  fa::VarlenHost v;
  v.cu_q = {0};
  for (int32_t n : kVarlenLens) v.cu_q.push_back(v.cu_q.back() + n);
  v.cu_k = v.cu_q;
  const fa::AttnProblem p = fa::make_problem(1, 8, 8, 1, 1, 64, causal);
  const fa::Inputs in = fa::random_varlen_inputs(p, v, 0);  // Q, K, V [total, 8, 64]
  const int64_t B = v.batch(), H = p.H, d = p.d, N = in.p.N_q;  // N: the longest sequence
  tiled::Blocks blk;
  blk.threads = 2;
  const fa::ForwardFn f = [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, float* O,
                              float* L) { tiled::forward<float>(q, Q, K, V, O, L, blk); };
  double work = fa::varlen_forward_flops(p, v);  // what the call computes, by the FLOP convention
  if (mode == 0) {
    fa::Tensor O({v.total_q(), H, d}), LSE({H, v.total_q()});
    for (auto _ : state) {
      fa::varlen_forward(f, p, v, in.Q.ptr(), in.K.ptr(), in.V.ptr(), O.ptr(), LSE.ptr());
      benchmark::DoNotOptimize(O.ptr());
      benchmark::ClobberMemory();
    }
  } else if (mode == 1) {
    const fa::AttnProblem pad = fa::make_problem(B, H, H, N, N, d, causal);
    const fa::Tensor Q = fa::pad_packed(in.Q, v.cu_q, H, d, N), K = fa::pad_packed(in.K, v.cu_k, H, d, N),
                     V = fa::pad_packed(in.V, v.cu_k, H, d, N);
    fa::Tensor O({B, H, N, d}), LSE({B, H, N});
    work = pad.forward_flops();
    for (auto _ : state) {
      f(pad, Q.ptr(), K.ptr(), V.ptr(), O.ptr(), LSE.ptr());
      benchmark::DoNotOptimize(O.ptr());
      benchmark::ClobberMemory();
    }
  } else {
    std::vector<fa::Tensor> Qs, Ks, Vs, Os, Ls;
    std::vector<fa::AttnProblem> ps;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = v.n_q(b);
      Qs.push_back(fa::gather_rows(in.Q, H, d, v.cu_q[b], n));
      Ks.push_back(fa::gather_rows(in.K, H, d, v.cu_k[b], n));
      Vs.push_back(fa::gather_rows(in.V, H, d, v.cu_k[b], n));
      Os.emplace_back(std::vector<int64_t>{1, H, n, d});
      Ls.emplace_back(std::vector<int64_t>{1, H, n});
      ps.push_back(fa::make_problem(1, H, H, n, n, d, causal));
    }
    for (auto _ : state) {
      for (int64_t b = 0; b < B; ++b) f(ps[b], Qs[b].ptr(), Ks[b].ptr(), Vs[b].ptr(), Os[b].ptr(), Ls[b].ptr());
      benchmark::DoNotOptimize(Os[0].ptr());
      benchmark::ClobberMemory();
    }
  }
  // GFLOP/s of useful work (each sequence's own N(b)^2, whatever the mode computes), and the work done.
  state.counters["GFLOP/s"] = benchmark::Counter(fa::varlen_forward_flops(p, v) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["work_GFLOP"] = work * 1e-9;
  state.counters["tokens"] = double(v.total_q());
  state.counters["causal"] = causal;
  state.counters["threads"] = blk.threads;
}

}  // namespace

BENCHMARK(BM_fma_peak)->Arg(1)->Arg(2)->ArgName("threads")->Iterations(3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_tiled)->Apply(fa::cpu_grid)->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMillisecond);
#ifdef FA_HAVE_OPENBLAS
BENCHMARK(BM_blas)->Apply(fa::cpu_grid)->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif
BENCHMARK(BM_stage<bench_baselines::stage01>)->Name("BM_stage01")->Arg(256)->Arg(1024)->Arg(4096)
    ->ArgName("N")->MinTime(0.1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_stage<bench_baselines::stage02>)->Name("BM_stage02")->Arg(256)->Arg(1024)->Arg(4096)
    ->ArgName("N")->MinTime(0.1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_stage<bench_baselines::stage03>)->Name("BM_stage03")->Arg(256)->Arg(1024)->Arg(4096)
    ->ArgName("N")->MinTime(0.1)->UseRealTime()->Unit(benchmark::kMillisecond);
// Registered only with FA_BENCH_VARLEN set in the environment: the padded run takes seconds per
// call on 2 cores, and the default run (scripts/bench.sh) is kept near 5 minutes.
[[maybe_unused]] const bool kVarlenRegistered =
    std::getenv("FA_BENCH_VARLEN") != nullptr &&
    (benchmark::RegisterBenchmark("BM_varlen", BM_varlen)
         ->ArgsProduct({{0, 1, 2}, {0, 1}})
         ->ArgNames({"mode", "causal"})
         ->Iterations(3)
         ->UseRealTime()
         ->Unit(benchmark::kMillisecond),
     true);

// The vector ISA this build targets goes into the JSON's context: results from machines with
// other ISAs are told apart by it.
[[maybe_unused]] const bool kIsaContext =
    (benchmark::AddCustomContext("isa", std::string(tiled::mk::kIsa) + ", " + std::to_string(tiled::mk::VW) +
                                            " floats per vector"),
     true);

BENCHMARK_MAIN();
