// Stage 05's GPU tests (skipped, exit code 77, on a machine without a GPU: common/cuda/test_main_gpu.cpp).
//   - the conformance battery for every kernel in fp32, fp16 and bf16 (common/conformance.hpp;
//     v3 ... v6 in fp16 and bf16, where they run themselves)
//   - v1 at block shapes that do not divide N, at tiny and huge blocks, at head dims 1 .. 256
//   - every tensor-core version (v2 ... v13) at ragged sizes around its blocks, d = 64 and 128;
//     v13 at every native width and between them, v5 and v2 at padded widths, and auto;
//     v5 ... v12 at every block shape they are compiled for; v9 ... v12 against the version they
//     change, bit for bit
//   - determinism (a race shows as a result that moves between runs)
//   - offsets past 2^31 elements (every kernel at d = 64; v8, v10, v11, v12 at d = 128); a row sum past
//     fp16's range (every kernel)
//   - the measured extra GPU memory against the plan (0 for v1, S and P for cuBLAS)
//   - the C ABI (libfa05.so) computes what the C++ path computes, and reports errors as codes
// No timing here: speed lives in bench_05_cuda_tiled.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "check.hpp"
#include "conformance.hpp"
#include "device_buffer.hpp"
#include "fa05.h"
#include "fp8.hpp"
#include "gpu.hpp"
#include "reference.hpp"
#include "rng.hpp"
#include "stage_05.hpp"
#include "varlen.hpp"

namespace {

const fa::DType kDtypes[] = {fa::DType::fp32, fa::DType::fp16, fa::DType::bf16};

fa::Storage storage(const std::string& kernel, fa::DType t) {
  return {t, kernel == "auto" || fa05::kernel_info(kernel).P_in_dtype};  // auto: a tensor-core version in 16 bits
}

}  // namespace

TEST_CASE("05 v1: conformance battery in fp32, fp16 and bf16") {
  for (fa::DType t : kDtypes) {
    INFO("dtype " << std::string(fa::dtype_name(t)));
    fa::check_forward_battery(stage_05_forward("v1", t), false, storage("v1", t));
  }
}

TEST_CASE("05 v2 (tensor cores): conformance battery in fp16 and bf16 (and fp32 / other d: v1)") {
  for (fa::DType t : kDtypes) {
    INFO("dtype " << std::string(fa::dtype_name(t)));
    fa::check_forward_battery(stage_05_forward("v2", t), false, storage("v2", t));
  }
}

TEST_CASE("05 v3 ... v14: conformance battery in fp16 and bf16") {
  for (const char* k : {"v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14"})
    for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
      INFO(k << " dtype " << std::string(fa::dtype_name(t)));
      fa::check_forward_battery(stage_05_forward(k, t), false, storage(k, t));
    }
}

// The battery's ragged pairs and masks are mostly at d = 32 (where the tensor-core versions run
// v1): the same at the head dims they run themselves, with N around their 64- and 128-row blocks.
const int64_t kRaggedSizes[][2] = {{1, 1},       {1, 200},   {17, 17},    {63, 63},  {64, 64},
                                   {65, 65},     {127, 129}, {129, 127},  {200, 63}, {63, 200},
                                   {1000, 1000}, {300, 1000}, {1000, 300}};

// v7 ... v12 run only on sm_90 (elsewhere their plan runs v5, and says so); v8 runs only d = 128
// (at d = 64 its plan runs v7), v10 ... v12 too (their plan runs v9).
bool runs_itself(const std::string& k) { return !fa05::kernel_info(k).wgmma || fa::gpu_compute_capability() == 90; }
std::string expected_runs(const std::string& k, int64_t d) {
  if (!runs_itself(k)) return "v5";
  if (d == 64 && (k == "v8" || k == "v10" || k == "v11" || k == "v12")) return k == "v8" ? "v7" : "v9";
  return k;
}

void check_ragged(const char* k) {
  for (int64_t d : {64, 128})
    for (auto& nn : kRaggedSizes)
      for (bool causal : {false, true}) {
        const fa::Case c{std::string(k) + " shape", fa::make_problem(2, 4, 2, nn[0], nn[1], d, causal), fa::Fill::HighDims};
        for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
          CHECK(fa05::plan(k, c.p, t).runs == expected_runs(k, d));
          fa::check_forward_case(stage_05_forward(k, t), c, false, storage(k, t));
        }
      }
}

TEST_CASE("05 ragged v2: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v2"); }
TEST_CASE("05 ragged v3: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v3"); }
TEST_CASE("05 ragged v4: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v4"); }
TEST_CASE("05 ragged v5: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v5"); }
TEST_CASE("05 ragged v6: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v6"); }
TEST_CASE("05 ragged v7: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v7"); }
TEST_CASE("05 ragged v8: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v8"); }
TEST_CASE("05 ragged v9: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v9"); }
TEST_CASE("05 ragged v10: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v10"); }
TEST_CASE("05 ragged v11: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v11"); }
TEST_CASE("05 ragged v12: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v12"); }
TEST_CASE("05 ragged v14: N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("v14"); }

// Every head dim's route: the native widths of v13 (32 ... 256) and d between them, which run the
// next width with zero columns (TMA's fill where d is a multiple of 8, padded copies elsewhere), and
// the same d through v5 (mma.sync, widths 64 ... 256: the path of a GPU without wgmma) and v2
// (64 and 128, padded copies). Ragged N around the blocks, causal, GQA, fp16 and bf16.
const int64_t kWidthSizes[][2] = {{1, 1}, {17, 17}, {65, 65}, {127, 129}, {200, 63}, {63, 200}, {300, 1000}};
void check_widths(const char* k, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    for (auto& nn : kWidthSizes)
      for (bool causal : {false, true}) {
        const fa::Case c{std::string(k) + " d " + std::to_string(d), fa::make_problem(2, 4, 2, nn[0], nn[1], d, causal),
                         fa::Fill::HighDims};
        for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
          const fa05::Plan pl = fa05::plan(k, c.p, t);
          CHECK(fa05::kernel_info(pl.runs).tensor_cores);
          CHECK(pl.d_kernel >= d);
          fa::check_forward_case(stage_05_forward(k, t), c, false, storage(k, t));
        }
      }
}
TEST_CASE("05 v13: every native width (32, 64, 96, 128, 192, 256), ragged, causal, GQA, fp16 and bf16") {
  if (!runs_itself("v13")) MESSAGE("v13 runs v5 on this GPU");
  check_widths("v13", {32, 64, 96, 128, 192, 256});
}
TEST_CASE("05 v13: padded widths (1, 8, 40, 59, 80, 111, 160, 200, 224, 255), ragged, causal, GQA") {
  check_widths("v13", {1, 8, 40, 59, 80, 111, 160, 200, 224, 255});
}
// v13's every compiled shape at every native width it is compiled for (128 x 64 and 128 x 128,
// 192 x 128 up to d = 64, 128 x 80 above 128) and a padded d below each, ragged N
// around 192-row and 80-key blocks, causal, GQA, fp16 and bf16; each once in the default
// grid and once in 3 persistent blocks (so that blocks walk tiles through both Q buffers or one).
TEST_CASE("05 v13: every compiled block shape at every native width, ragged, causal, GQA, persistent") {
  if (!runs_itself("v13")) {
    MESSAGE("v13 runs v5 on this GPU: v13's shapes are not v5's");
    return;
  }
  const int64_t sizes[][2] = {{1, 1}, {79, 81}, {113, 111}, {191, 193}, {193, 400}, {400, 161}};
  int checked = 0;
  for (int64_t D : {32, 64, 96, 128, 192, 256})
    for (const fa05::BlockShape& sh : fa05::block_shapes("v13", D))
      for (int64_t d : {D, D - 24})
        for (auto& nn : sizes)
          for (bool causal : {false, true})
            for (int64_t cap : {0, 3}) {
              fa05::Config cfg;
              cfg.Br = sh.Br, cfg.Bc = sh.Bc, cfg.persistent_blocks = cap;
              const fa::Case c{"v13 " + std::to_string(sh.Br) + "x" + std::to_string(sh.Bc) + " d " + std::to_string(d) +
                                   " cap " + std::to_string(cap),
                               fa::make_problem(2, 4, 2, nn[0], nn[1], d, causal), fa::Fill::HighDims};
              const fa::DType t = (checked++ % 2) ? fa::DType::fp16 : fa::DType::bf16;
              const fa05::Plan pl = fa05::plan("v13", c.p, t, cfg);
              REQUIRE(pl.runs == "v13");
              CHECK(pl.d_kernel == D);
              CHECK(pl.Br == sh.Br);
              CHECK(pl.Bc == sh.Bc);
              fa::check_forward_case(stage_05_forward("v13", t, cfg), c, false, storage("v13", t));
            }
  CHECK(checked == 14 * 2 * 6 * 2 * 2);  // the 14 (width, shape) pairs, each case above
}
TEST_CASE("05 v14: every native width and padded ones, ragged, causal, GQA, fp16 and bf16") {
  check_widths("v14", {32, 64, 96, 128, 192, 256, 8, 40, 59, 80, 200});
}

// Issue 34's variants: the variant battery (windows of 0 and 1 key, below a block, across block
// edges, asymmetric, one-sided, with causal, N_q != N_k; softcaps 1 to 50 on logits of 30 and 100;
// both; real inputs) by the battery's rule, on the kernels that take them: v1 (every dtype) and
// v13 (fp16, bf16), and auto. Its cases are at d = 16 ... 64; the width test below takes v13's
// other widths through windows that cross its 128 x 128 and 128 x 64 blocks at ragged N.
TEST_CASE("05 v1: variant battery (sliding window, softcap) in fp32, fp16 and bf16") {
  for (fa::DType t : kDtypes) {
    INFO("dtype " << std::string(fa::dtype_name(t)));
    fa::check_variant_forward_battery(stage_05_forward("v1", t), false, storage("v1", t));
  }
}
TEST_CASE("05 v13, v14 and auto: variant battery (sliding window, softcap) in fp16 and bf16") {
  for (const char* k : {"v13", "v14", "auto"})
    for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
      if (std::string(k) == "v13" && !runs_itself(k)) continue;  // v13 off sm_90 would run v5, which refuses the variants
      INFO(k << " dtype " << std::string(fa::dtype_name(t)));
      fa::check_variant_forward_battery(stage_05_forward(k, t), false, storage(k, t));
    }
}
TEST_CASE("05 v13: windows across its blocks and softcaps at every native width, ragged, GQA") {
  // (N_q, N_k, left, right, causal, softcap): a band narrower than a block, one wider than two, a
  // left-only band with causal (the common sliding window), asymmetric with N_q < N_k and N_q > N_k
  // (rows left of key 0 see nothing), and a softcap alone and with a window.
  struct V {
    int64_t n_q, n_k, left, right;
    bool causal;
    float softcap;
  };
  const V vs[] = {{300, 300, 20, 20, false, 0.f},   {700, 700, 300, 0, true, 0.f},  {1000, 1000, 129, -1, true, 0.f},
                  {257, 900, 100, 60, false, 0.f}, {900, 257, 70, 10, false, 0.f}, {333, 333, -1, -1, true, 15.f},
                  {513, 513, 200, -1, true, 30.f}};
  if (!runs_itself("v13")) {
    MESSAGE("v13 runs v5 on this GPU, which takes no window: nothing to test");
    return;
  }
  for (int64_t d : {32, 64, 96, 128, 192, 256, 80})
    for (const V& v : vs) {
      fa::AttnProblem p = fa::make_problem(2, 4, 2, v.n_q, v.n_k, d, v.causal);
      p.window_left = v.left, p.window_right = v.right, p.softcap = v.softcap;
      const fa::Case c{"v13 variant d " + std::to_string(d), p, v.softcap > 0 ? fa::Fill::Logits100 : fa::Fill::HighDims};
      for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
        CHECK(fa05::plan("v13", c.p, t).runs == expected_runs("v13", d));
        fa::check_forward_case(stage_05_forward("v13", t), c, false, storage("v13", t));
      }
    }
}

// Packed variable-length batches (issue 34): v13 reads the whole batch in one launch, each tile
// its sequence's offsets. The battery (lengths 0, 1, 127, 129, 1000; N_q(b) != N_k(b); windows,
// softcaps, GQA, MQA; 40 short sequences) in both 16-bit types, then long sequences at every
// native width, and with two persistent blocks, so that each walks hundreds of tiles, most of
// them past their sequence's end.
TEST_CASE("05 v13 and auto: packed variable-length batches in one launch (varlen battery), fp16 and bf16") {
  if (!runs_itself("v13")) {
    MESSAGE("v13 runs v5 on this GPU, which reads no packed batch: nothing to test");
    return;
  }
  for (const char* k : {"v13", "auto"})
    for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
      INFO(k << " dtype " << std::string(fa::dtype_name(t)));
      fa::check_varlen_forward_battery(stage_05_varlen_forward(k, t), storage(k, t));
    }
}
TEST_CASE("05 v13: packed batches of long sequences at every native width, causal, windows, two persistent blocks") {
  if (!runs_itself("v13")) return;
  const auto offsets = [](const std::vector<int32_t>& lens) {
    std::vector<int32_t> cu{0};
    for (int32_t n : lens) cu.push_back(cu.back() + n);
    return cu;
  };
  // Sequences across several 128-row tiles and 64/128-key blocks, one empty, one of a single token,
  // N_q(b) != N_k(b) in both directions (chunked prefill: fewer queries than keys).
  const std::vector<int32_t> lq = {700, 1, 0, 900, 129, 300}, lk = {700, 1, 5, 900, 1000, 257};
  fa05::Config two;
  two.persistent_blocks = 2;
  for (int64_t d : {32, 64, 96, 128, 192, 256, 80})
    for (int variant = 0; variant < 3; ++variant) {
      if (variant == 0 && d != 128) continue;  // not causal: at one width (the float64 reference is the cost)
      fa::AttnProblem p = fa::make_problem(1, 4, 2, 1, 1, d, variant != 0);
      if (variant == 2) p.window_left = 200, p.softcap = 20.f;
      const fa::Case c{"v13 packed d " + std::to_string(d) + " variant " + std::to_string(variant), p,
                       variant == 2 ? fa::Fill::Logits100 : fa::Fill::HighDims, offsets(lq), offsets(lk)};
      for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
        fa::check_varlen_forward_case(stage_05_varlen_forward("v13", t), c, storage("v13", t));
        if (d == 128 || d == 80) fa::check_varlen_forward_case(stage_05_varlen_forward("v13", t, two), c, storage("v13", t));
      }
    }
}

// Decode: 1 to 16 query rows against a long cache, through GQA (1, 4 and 8 query heads per kv
// head: one row tile, or several), causal with N_q > 1 (bottom-right: speculative decoding), at
// the split count plan() picks and at forced ones (1: no merge; 2, 7; one split per 64-key tile,
// where the last is ragged). Each against float64 by the battery's rule, so a split that drops or
// double-counts a key, or a merge that weighs a split wrongly, fails.
TEST_CASE("05 v14 decode: split-KV at every split count, GQA packing, causal N_q > 1, fp16 and bf16") {
  const int64_t shapes[][4] = {{3, 8, 8, 1}, {2, 8, 2, 1}, {1, 16, 2, 1}, {2, 8, 2, 4}, {1, 8, 1, 16}, {2, 4, 4, 3}};
  for (auto& sh : shapes)
    for (int64_t N_k : {1, 63, 64, 65, 1000, 4097})
      for (bool causal : {false, true})
        for (int64_t d : {64, 128}) {
          const fa::Case c{"v14 decode", fa::make_problem(sh[0], sh[1], sh[2], sh[3], N_k, d, causal), fa::Fill::HighDims};
          const int64_t tiles = (N_k + 63) / 64;
          for (int64_t splits : {int64_t(0), int64_t(1), int64_t(2), int64_t(7), tiles}) {
            if (splits > tiles) continue;
            fa05::Config cfg;
            cfg.splits = splits;
            INFO("splits " << splits << " (0: the plan's)");
            const fa::DType t = splits % 2 ? fa::DType::fp16 : fa::DType::bf16;
            CHECK(fa05::plan("v14", c.p, t, cfg).runs == "v14");
            fa::check_forward_case(stage_05_forward("v14", t, cfg), c, false, storage("v14", t));
          }
        }
  // The plan splits a small batch's keys (else the test above would not see the merge).
  CHECK(fa05::plan("v14", fa::make_problem(1, 8, 2, 1, 4097, 64, false), fa::DType::bf16).splits > 1);
}

// A KV cache (issue 33; runner.hpp, KvCache): the case's B sequences, each of N_k keys, are laid
// into a cache of capacity C > N_k keys a sequence, with a decoy sequence after each (lengths 0
// and 1, alternately), so one launch holds ragged lengths. Paged (P > 0): the pages of every
// sequence are scattered by a seeded permutation, and each length-1 decoy's first page is a real
// sequence's first page (a page shared between sequences). Every key slot no sequence may read
// (past a length, unused pages) holds 30000 (finite in fp16: the adapter refuses NaN inputs), so
// a key past a length that is not masked swamps its row. The real rows come
// back to the battery's rule (float64, derived tolerance); the decoys are checked exactly: length
// 0 gives O = 0 and LSE = -inf, length 1 gives O = that key's V row (P = 1 exactly).
fa::ForwardFn cache_forward(const std::string& kernel, fa::DType t, int64_t P) {
  return [=](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
    const int64_t Bc = 2 * p.B, unit = P > 0 ? P : 1;
    fa::AttnProblem pc = p;  // the cache's problem: real sequence b at 2b, its decoy at 2b + 1
    pc.B = Bc;
    pc.N_k = (p.N_k + 37 + unit - 1) / unit * unit;  // capacity, past the real length
    const int64_t C = pc.N_k, d = p.d, Hkv = p.H_kv, pages_per_seq = P > 0 ? C / P : 0;
    const int64_t num_pages = P > 0 ? Bc * pages_per_seq : 0;
    std::vector<int32_t> lens(Bc), table(P > 0 ? Bc * pages_per_seq : 0, -1);
    std::vector<float> Qc(pc.q_elems()), Kc(pc.kv_elems(), 30000.f), Vc(pc.kv_elems(), 30000.f);
    fa::Rng rng(uint64_t(P) * 1000003 + uint64_t(p.N_k));
    std::vector<int32_t> perm(num_pages);
    for (int64_t i = 0; i < num_pages; ++i) perm[i] = int32_t(i);
    for (int64_t i = num_pages - 1; i > 0; --i) std::swap(perm[i], perm[int64_t(rng.uniform() * double(i + 1)) % (i + 1)]);
    for (int64_t b = 0; b < p.B; ++b) {
      lens[2 * b] = int32_t(p.N_k), lens[2 * b + 1] = int32_t(b % 2 == 0 ? 1 : 0);
      for (int64_t n = 0; n < pages_per_seq; ++n) table[2 * b * pages_per_seq + n] = perm[b * pages_per_seq + n];
      if (P > 0) table[(2 * b + 1) * pages_per_seq] = table[2 * b * pages_per_seq];  // shared page
    }
    // Offset of key j of kv head g of cache sequence cb.
    const auto at = [&](int64_t cb, int64_t g, int64_t j) {
      return P > 0 ? ((int64_t(table[cb * pages_per_seq + j / P]) * Hkv + g) * P + j % P) * d : ((cb * Hkv + g) * C + j) * d;
    };
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t g = 0; g < Hkv; ++g)
        for (int64_t j = 0; j < p.N_k; ++j)
          for (int64_t c = 0; c < d; ++c) {
            Kc[at(2 * b, g, j) + c] = K[((b * Hkv + g) * p.N_k + j) * d + c];
            Vc[at(2 * b, g, j) + c] = V[((b * Hkv + g) * p.N_k + j) * d + c];
          }
      if (P == 0)  // a contiguous decoy of length 1 has its own key 0
        for (int64_t g = 0; g < Hkv; ++g)
          for (int64_t c = 0; c < d; ++c) Kc[at(2 * b + 1, g, 0) + c] = float(rng.normal()), Vc[at(2 * b + 1, g, 0) + c] = float(rng.normal());
      const int64_t rows = p.H * p.N_q * d;
      std::copy(Q + b * rows, Q + (b + 1) * rows, Qc.begin() + 2 * b * rows);
      for (int64_t e = 0; e < rows; ++e) Qc[(2 * b + 1) * rows + e] = float(rng.normal());
    }
    std::vector<float> Oc(pc.q_elems()), LSEc(pc.lse_elems());
    fa::ForwardFn on_gpu = fa::gpu_forward(
        [&](const fa::AttnProblem& q, fa::DType dt, const void* Qd, const void* Kd, const void* Vd, void* Od, float* LSEd,
            cudaStream_t stream) {
          fa::DeviceBuffer<int32_t> lens_d(Bc, fa::Mem::Io, stream), table_d(int64_t(table.size()), fa::Mem::Io, stream);
          FA_CUDA_CHECK(cudaMemcpyAsync(lens_d.get(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice, stream));
          if (!table.empty())
            FA_CUDA_CHECK(cudaMemcpyAsync(table_d.get(), table.data(), table.size() * 4, cudaMemcpyHostToDevice, stream));
          const fa05::KvCache cache{lens_d.get(), P > 0 ? table_d.get() : nullptr, P, pages_per_seq, num_pages};
          fa05::forward(kernel, q, dt, Qd, Kd, Vd, Od, LSEd, cache, {}, stream);
          FA_CUDA_CHECK(cudaStreamSynchronize(stream));  // lens_d, table_d are freed on return
        },
        t);
    on_gpu(pc, Qc.data(), Kc.data(), Vc.data(), Oc.data(), LSEc.data());
    const int64_t rows = p.H * p.N_q;
    for (int64_t b = 0; b < p.B; ++b) {
      std::copy(Oc.begin() + 2 * b * rows * d, Oc.begin() + (2 * b + 1) * rows * d, O + b * rows * d);
      std::copy(LSEc.begin() + 2 * b * rows, LSEc.begin() + (2 * b + 1) * rows, LSE + b * rows);
      const int64_t cb = 2 * b + 1;  // the decoy
      for (int64_t h = 0; h < p.H; ++h)
        for (int64_t i = 0; i < p.N_q; ++i) {
          const int64_t r = (cb * p.H + h) * p.N_q + i;
          // The decoy's diagonal is aligned to its own length: with causal, only the rows
          // i >= N_q - 1 see its one key.
          const bool sees = lens[cb] > 0 && (!p.causal || i + lens[cb] - p.N_q >= 0);
          INFO("decoy of length " << lens[cb] << ", row " << i << " of head " << h);
          if (sees) CHECK(std::isfinite(LSEc[r]));
          else CHECK(LSEc[r] == -INFINITY);
          for (int64_t c = 0; c < d; ++c)
            CHECK(Oc[r * d + c] == (sees ? fa::round_to(t, Vc[at(cb, p.kv_head(h), 0) + c]) : 0.f));
        }
    }
  };
}

TEST_CASE("05 v14 KV cache: per-sequence lengths, paged (P = 16 ... 256), shared pages, decoys of length 0 and 1") {
  const int64_t shapes[][4] = {{2, 8, 2, 1}, {3, 8, 8, 1}, {1, 16, 2, 4}, {2, 8, 1, 16}, {2, 4, 4, 3}};
  for (auto& sh : shapes)
    for (int64_t N_k : {1, 63, 65, 1000, 4097})
      for (bool causal : {false, true})
        for (int64_t P : {0, 16, 64, 100, 256}) {
          const int64_t d = P == 100 ? 64 : 128;
          const fa::Case c{"v14 cache", fa::make_problem(sh[0], sh[1], sh[2], sh[3], N_k, d, causal), fa::Fill::HighDims};
          const fa::DType t = P % 32 ? fa::DType::fp16 : fa::DType::bf16;
          INFO("page size " << P << " (0: contiguous), N_k " << N_k << ", causal " << causal);
          fa::check_forward_case(cache_forward(P == 64 ? "auto" : "v14", t, P), c, false, storage("v14", t));
        }
}

// One small paged problem per page size, for compute-sanitizer (racecheck: the page offsets are
// written to shared memory a tile ahead of the copies that read them): splits of several tiles
// each, more than the ring holds, GQA, a sequence sharing a page with its decoy.
TEST_CASE("05 v14 KV cache: one small paged problem per page size (for compute-sanitizer)") {
  for (int64_t P : {16, 64, 256}) {
    const fa::Case c{"v14 cache small", fa::make_problem(2, 8, 2, 1, 1500, 128, false), fa::Fill::HighDims};
    INFO("page size " << P);
    fa::check_forward_case(cache_forward("v14", fa::DType::bf16, P), c, false, storage("v14", fa::DType::bf16));
  }
}

// Issue 34 in decode: a sliding window moves where v14's splits start (the band, not the cache),
// each row masks both ends; a softcap before the mask. At the plan's split count and forced ones,
// contiguous and on a KV cache (lengths, pages: the band follows each sequence's length).
TEST_CASE("05 v14: windows and softcaps in decode, at every split count and on a KV cache") {
  struct W {
    int64_t left, right;
    bool causal;
    float softcap;
  };
  const W ws[] = {{100, -1, true, 0.f}, {0, 0, true, 0.f}, {700, 50, false, 0.f}, {-1, -1, true, 30.f}, {300, -1, true, 10.f}};
  const int64_t shapes[][4] = {{2, 8, 2, 1}, {1, 16, 2, 4}, {2, 4, 4, 3}};
  for (auto& sh : shapes)
    for (int64_t N_k : {65, 1000, 4097})
      for (const W& w : ws) {
        fa::AttnProblem p = fa::make_problem(sh[0], sh[1], sh[2], sh[3], N_k, 128, w.causal);
        p.window_left = w.left, p.window_right = w.right, p.softcap = w.softcap;
        const fa::Case c{"v14 variant", p, w.softcap > 0 ? fa::Fill::Logits100 : fa::Fill::HighDims};
        INFO("N_k " << N_k << " window " << w.left << "," << w.right << " causal " << w.causal << " softcap " << w.softcap);
        for (int64_t splits : {0, 1, 3}) {
          fa05::Config cfg;
          cfg.splits = splits;
          if (splits > (p.key_end(p.N_q - 1) - p.key_begin(0) + 63) / 64) continue;  // more than the band's tiles
          INFO("splits " << splits << " (0: the plan's)");
          fa::check_forward_case(stage_05_forward("v14", fa::DType::bf16, cfg), c, false, storage("v14", fa::DType::bf16));
        }
        for (int64_t P : {0, 64}) {
          INFO("cache, page size " << P << " (0: contiguous)");
          fa::check_forward_case(cache_forward("v14", fa::DType::fp16, P), c, false, storage("v14", fa::DType::fp16));
        }
      }
}

TEST_CASE("05 v5 at every width (mma.sync: 64, 128, 192, 256, and padded d)") { check_widths("v5", {24, 100, 160, 192, 256}); }
TEST_CASE("05 v2 at padded widths (d < 128 but 64)") { check_widths("v2", {8, 40, 80, 127}); }
TEST_CASE("05 auto: the fastest kernel for the problem, at every head dim of real models") {
  check_widths("auto", {32, 64, 80, 96, 128, 256});
  const fa::AttnProblem p = fa::make_problem(1, 2, 1, 100, 100, 80, true);
  CHECK(fa05::plan("auto", p, fa::DType::bf16).runs == fa05::auto_kernel(p, fa::DType::bf16).kernel);
  CHECK(fa05::plan("auto", p, fa::DType::fp32).runs == "v1");
}

// Every block shape v5 ... v12 are compiled for (the sweep's candidates), not only the default
// one, with N around 32, 64, 128 and 256.
void check_shapes(const char* k) {
  if (!runs_itself(k)) {
    MESSAGE(k << " runs v5 on this GPU: v5's shapes are checked by its own case");
    return;
  }
  const int64_t sizes[][2] = {{1, 1},     {17, 17},   {31, 33},  {63, 65},  {127, 129},
                              {129, 127}, {200, 63},  {63, 200}, {257, 300}};
  for (int64_t d : {64, 128})
    for (const fa05::BlockShape& sh : fa05::block_shapes(k, d)) {
      fa05::Config cfg;
      cfg.Br = sh.Br, cfg.Bc = sh.Bc;
      for (auto& nn : sizes)
        for (bool causal : {false, true}) {
          const fa::Case c{std::string(k) + " " + std::to_string(sh.Br) + "x" + std::to_string(sh.Bc),
                           fa::make_problem(1, 4, 2, nn[0], nn[1], d, causal), fa::Fill::HighDims};
          CHECK(fa05::plan(k, c.p, fa::DType::bf16, cfg).Br == sh.Br);
          fa::check_forward_case(stage_05_forward(k, fa::DType::bf16, cfg), c, false, storage(k, fa::DType::bf16));
        }
    }
}

// v8's persistent blocks: capped at 1 and 3 blocks, so that each walks many tiles (the
// next tile's loads started during the last block of one; causal tiles with no key to see; the
// Q and K/V buffers alternating across tiles), at every shape, ragged, causal with rows that see
// no key, GQA, fp16 and bf16. Without a cap, the small problems above fit one tile per block.
TEST_CASE("05 v8: persistent blocks walking many tiles, every shape, ragged, causal, GQA") {
  if (!runs_itself("v8")) {
    MESSAGE("v8 runs v5 on this GPU");
    return;
  }
  const int64_t sizes[][2] = {{1, 1}, {63, 200}, {200, 63}, {300, 1000}, {1000, 300}};
  for (int64_t d : {128})  // v8 runs d = 128 only
    for (const fa05::BlockShape& sh : fa05::block_shapes("v8", d))
      for (int64_t cap : {1, 3}) {
        fa05::Config cfg;
        cfg.Br = sh.Br, cfg.Bc = sh.Bc, cfg.persistent_blocks = cap;
        for (auto& nn : sizes)
          for (bool causal : {false, true}) {
            const fa::Case c{"v8 " + std::to_string(sh.Br) + "x" + std::to_string(sh.Bc) + ", " + std::to_string(cap) +
                                 " blocks",
                             fa::make_problem(2, 4, 2, nn[0], nn[1], d, causal), fa::Fill::HighDims};
            for (fa::DType t : {fa::DType::fp16, fa::DType::bf16})
              fa::check_forward_case(stage_05_forward("v8", t, cfg), c, false, storage("v8", t));
          }
      }
}

// The same bits whatever the grid: a tile's arithmetic does not depend on which block runs it, so
// any cap gives v8's uncapped result exactly (a race or a wrong buffer across tiles would not).
// Causal 1000 x 300 at Br = 64: tiles 48 ... 127 of the walk see no key, so a cap of 50 makes
// blocks that start on such a tile and walk on; checked against float64 too.
TEST_CASE("05 v8: the same bits at every grid cap; walks through tiles with no key to see") {
  if (!runs_itself("v8")) {
    MESSAGE("v8 runs v5 on this GPU");
    return;
  }
  for (const fa::AttnProblem& p : {fa::make_problem(2, 4, 2, 1000, 300, 128, true), fa::make_problem(2, 4, 2, 300, 1000, 128, false)})
    for (const fa05::BlockShape& sh : fa05::block_shapes("v8", 128)) {
      INFO(p.describe() << ", shape " << sh.Br << "x" << sh.Bc);
      const fa::Inputs in = fa::random_inputs(p, 21);
      fa05::Config cfg;
      cfg.Br = sh.Br, cfg.Bc = sh.Bc;
      const fa::ForwardRun all = fa::run_forward(stage_05_forward("v8", fa::DType::bf16, cfg), in);
      for (int64_t cap : {1, 2, 3, 5, 50}) {
        INFO("cap " << cap);
        cfg.persistent_blocks = cap;
        const fa::ForwardRun r = fa::run_forward(stage_05_forward("v8", fa::DType::bf16, cfg), in);
        CHECK(fa::same_bits(r.O, all.O));
        CHECK(fa::same_bits(r.LSE, all.LSE));
      }
      cfg.persistent_blocks = 50;
      fa::check_forward_case(stage_05_forward("v8", fa::DType::bf16, cfg), fa::Case{"v8, 50 blocks", p, fa::Fill::HighDims},
                             false, storage("v8", fa::DType::bf16));
    }
}

// v9 does v7's operations on the same values in the same order (rescale O, then add P V; the
// same softmax); only when each is issued changes. So at the same block shape it must give v7's
// bits exactly, a far stricter check of its one-block-late pipeline (which V buffer, which alpha,
// the last P V, the waits) than the battery's tolerance. Ragged, causal with query blocks that
// see no key, GQA, and N = 1000 for many key blocks; every shape, fp16 and bf16, three repeats.
// (Added on 2026-11-30 after a review; first run in the next gpu_check.)
TEST_CASE("05 v9: the same bits as v7 at every shape (ragged, causal, GQA)") {
  if (!runs_itself("v9")) {
    MESSAGE("v9 runs v5 on this GPU");
    return;
  }
  for (int64_t d : {64, 128})
    for (const fa::AttnProblem& p : {fa::make_problem(2, 4, 2, 200, 63, d, true), fa::make_problem(1, 4, 2, 63, 200, d, false),
                                     fa::make_problem(1, 2, 1, 1000, 1000, d, true), fa::make_problem(1, 2, 2, 257, 1000, d, false)}) {
      const fa::Inputs in = fa::random_inputs(p, 33);
      for (const fa05::BlockShape& sh : fa05::block_shapes("v9", d))
        for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
          INFO(p.describe() << ", shape " << sh.Br << "x" << sh.Bc << ", " << std::string(fa::dtype_name(t)));
          fa05::Config cfg;
          cfg.Br = sh.Br, cfg.Bc = sh.Bc;
          const fa::ForwardRun ref = fa::run_forward(stage_05_forward("v7", t, cfg), in);
          for (int rep = 0; rep < 3; ++rep) {
            const fa::ForwardRun r = fa::run_forward(stage_05_forward("v9", t, cfg), in);
            CHECK(fa::same_bits(r.O, ref.O));
            CHECK(fa::same_bits(r.LSE, ref.LSE));
          }
        }
    }
}

TEST_CASE("05 v5: every compiled block shape, ragged and causal, bf16") { check_shapes("v5"); }
TEST_CASE("05 v6: every compiled block shape, ragged and causal, bf16") { check_shapes("v6"); }
TEST_CASE("05 v7: every compiled block shape, ragged and causal, bf16") { check_shapes("v7"); }
TEST_CASE("05 v8: every compiled block shape, ragged and causal, bf16") { check_shapes("v8"); }
TEST_CASE("05 v9: every compiled block shape, ragged and causal, bf16") { check_shapes("v9"); }
TEST_CASE("05 v10: every compiled block shape, ragged and causal, bf16") { check_shapes("v10"); }
TEST_CASE("05 v11: every compiled block shape, ragged and causal, bf16") { check_shapes("v11"); }
TEST_CASE("05 v12: every compiled block shape, ragged and causal, bf16") { check_shapes("v12"); }

// A persistent version k must give the bits of ref, a version whose tiles do the same arithmetic,
// at every shape and every grid: capped at 1, 2 and 3 blocks each block walks many tiles (the
// next tile's copies in the last block, the counter's answers a tile ahead, buffers alternating
// across tiles); causal 200 x 63 and 1000 x 300 end their walks with query blocks that see no key
// (tiles with one key block, then none); and the two 4 x 16-head problems have 512 tiles each, so
// the default grid (one block per SM) walks several each. Ragged, GQA, fp16 and bf16; the small
// ones against float64 too at a cap of 3.
void check_same_bits_walk(const char* k, const char* ref_kernel) {
  for (int64_t d : {128})  // v10 ... v12 run d = 128 only
    for (const fa::AttnProblem& p :
         {fa::make_problem(2, 4, 2, 200, 63, d, true), fa::make_problem(1, 4, 2, 63, 200, d, false),
          fa::make_problem(1, 2, 1, 1000, 1000, d, true), fa::make_problem(1, 2, 2, 257, 1000, d, false),
          fa::make_problem(4, 16, 4, 1000, 1000, d, false), fa::make_problem(4, 16, 4, 1000, 300, d, true)}) {
      const fa::Inputs in = fa::random_inputs(p, 34);
      for (const fa05::BlockShape& sh : fa05::block_shapes(k, d))
        for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
          INFO(k << " against " << ref_kernel << ", " << p.describe() << ", shape " << sh.Br << "x" << sh.Bc << ", "
                 << std::string(fa::dtype_name(t)));
          fa05::Config cfg;
          cfg.Br = sh.Br, cfg.Bc = sh.Bc;
          const fa::ForwardRun ref = fa::run_forward(stage_05_forward(ref_kernel, t, cfg), in);
          for (int64_t cap : {0, 1, 2, 3, 0}) {
            INFO("cap " << cap);
            cfg.persistent_blocks = cap;
            const fa::ForwardRun r = fa::run_forward(stage_05_forward(k, t, cfg), in);
            CHECK(fa::same_bits(r.O, ref.O));
            CHECK(fa::same_bits(r.LSE, ref.LSE));
          }
          cfg.persistent_blocks = 3;
          if (p.B * p.H <= 8)  // the 64-head problems' float64 reference would take minutes on the host
            fa::check_forward_case(stage_05_forward(k, t, cfg), fa::Case{std::string(k) + ", 3 blocks", p, fa::Fill::HighDims},
                                   false, storage(k, t));
        }
    }
}

// v10 runs v9's steps on each tile; only which thread block runs a tile, and which buffers it
// uses, depend on the scheduler.
TEST_CASE("05 v10: the same bits as v9 at every shape and grid cap (ragged, causal, GQA)") {
  if (!runs_itself("v10")) {
    MESSAGE("v10 runs v5 on this GPU");
    return;
  }
  check_same_bits_walk("v10", "v9");
}

// v11 is v10 with another way out for O (through shared memory): the same values, so the same
// bits, and a wrong row or column of the staged copy, or one that races the copy of a later
// tile's Q_i into the same buffer (the tile after the next), would not give them.
TEST_CASE("05 v11: the same bits as v10 at every shape and grid cap (ragged, causal, GQA)") {
  if (!runs_itself("v11")) {
    MESSAGE("v11 runs v5 on this GPU");
    return;
  }
  check_same_bits_walk("v11", "v10");
}

// v12 runs v11's arithmetic on each tile; only who copies, and how the warps wait for the copies
// and for each other, change. The same bits, at every grid cap: a buffer released too early (a
// copy overwriting K_j, V_j or a tile's Q_i / staged O while still read), a wrong parity, or a
// tile number read before it was written would not give them.
TEST_CASE("05 v12: the same bits as v11 at every shape and grid cap (ragged, causal, GQA)") {
  if (!runs_itself("v12")) {
    MESSAGE("v12 runs v5 on this GPU");
    return;
  }
  check_same_bits_walk("v12", "v11");
}

TEST_CASE("05 cublas (materialised baseline): conformance battery in fp32, fp16 and bf16") {
  for (fa::DType t : kDtypes) {
    INFO("dtype " << std::string(fa::dtype_name(t)));
    fa::check_forward_battery(stage_05_forward("cublas", t), false, storage("cublas", t));
  }
}

TEST_CASE("05 v1: conformance battery at other block shapes (fp32)") {
  struct Shape {
    const char* what;
    fa05::Config cfg;
  };
  const Shape shapes[] = {
      {"Br = 7, Bc = 13 (divide nothing)", {0, 7, 13}},
      {"Br = Bc = 1 (stage 03 one key at a time)", {0, 1, 1}},
      {"Br = 128, Bc = 32", {0, 128, 32}},
      {"M = 4 KiB (tiny blocks)", {4096, 0, 0}},
      {"M = 160 KiB (big blocks)", {160 * 1024, 0, 0}},
  };
  for (const Shape& s : shapes) {
    INFO(s.what);
    fa::check_forward_battery(stage_05_forward("v1", fa::DType::fp32, s.cfg));
  }
}

TEST_CASE("05 v1: head dims 1 .. 256, ragged, causal, GQA, every dtype") {
  for (int64_t d : {1, 2, 3, 96, 100, 129, 160, 192, 200, 255, 256})
    for (bool causal : {false, true}) {
      const fa::Case c{"head dim " + std::to_string(d) + (causal ? " causal" : ""),
                       fa::make_problem(2, 4, 2, 67, causal ? 45 : 131, d, causal), fa::Fill::HighDims};
      for (fa::DType t : kDtypes) fa::check_forward_case(stage_05_forward("v1", t), c, false, storage("v1", t));
    }
}

TEST_CASE("05: a problem a kernel cannot run is refused before the GPU runs") {
  const fa::Inputs in = fa::random_inputs(fa::make_problem(1, 1, 1, 8, 8, 257, false), 1);
  CHECK_THROWS_AS(fa::run_forward(stage_05_forward("v1", fa::DType::fp32), in), fa05::Unsupported);
  fa05::Config huge;
  huge.Br = 4096, huge.Bc = 4096;
  const fa::Inputs in2 = fa::random_inputs(fa::make_problem(1, 1, 1, 5000, 5000, 64, false), 1);
  CHECK_THROWS_AS(fa::run_forward(stage_05_forward("v1", fa::DType::fp32, huge), in2), fa05::Unsupported);
}

TEST_CASE("05: every kernel gives bit-identical results run after run (no race)") {
  // d = 72: v1's odd layout, the padded copies of v2 ... v12 and v13's zero-filled columns; d = 64
  // and 128: the tensor-core kernels' native widths.
  for (const fa::AttnProblem& p : {fa::make_problem(2, 4, 2, 301, 257, 72, true), fa::make_problem(2, 4, 2, 301, 257, 64, true),
                                   fa::make_problem(1, 4, 1, 200, 333, 128, false)}) {
    const fa::Inputs in = fa::random_inputs(p, 11);
    for (const fa05::KernelInfo& k : fa05::kernels())
      for (fa::DType t : kDtypes) {
        INFO(k.name << " " << std::string(fa::dtype_name(t)) << " " << p.describe());
        const fa::ForwardFn f = stage_05_forward(k.name, t);
        const fa::ForwardRun a = fa::run_forward(f, in);
        for (int rep = 0; rep < 3; ++rep) {
          const fa::ForwardRun b = fa::run_forward(f, in);
          CHECK(fa::same_bits(a.O, b.O));
          CHECK(fa::same_bits(a.LSE, b.LSE));
        }
      }
  }
}

TEST_CASE("05: extra GPU memory measured equals the plan (v1: none; cublas: S and P)") {
  const fa::AttnProblem p = fa::make_problem(2, 4, 1, 300, 200, 64, true);
  const fa::Inputs in = fa::random_inputs(p, 2);
  for (const fa05::KernelInfo& k : fa05::kernels())
    for (fa::DType t : kDtypes) {
      INFO(k.name << " " << std::string(fa::dtype_name(t)));
      const fa::ForwardRun r = fa::run_forward(stage_05_forward(k.name, t), in);
      CHECK(r.gpu_ms > 0);
      CHECK(r.gpu_extra_bytes == fa05::plan(k.name, p, t).workspace_bytes);
    }
  CHECK(fa05::plan("v1", p, fa::DType::bf16).workspace_bytes == 0);
  CHECK(fa05::plan("cublas", p, fa::DType::bf16).workspace_bytes == 6 * p.B * p.H * p.N_q * p.N_k);
}

// Q and O hold more than 2^31 elements, so a 32-bit offset would wrap: the last rows, and the
// rows around element 2^31, are checked against float64 (one head, few keys, so the check is
// cheap; bf16 halves the upload). Issue 13, item 3. At d = 64 every kernel; at d = 128 the ones
// that run themselves only there (v8, v10 ... v12: at d = 64 they run v7 and v9).
void check_offsets_past_2_31(int64_t d, const std::vector<std::string>& kernel_names) {
  const int64_t N_q = (int64_t(1) << 31) / d + 128, N_k = 24;
  fa::AttnProblem p = fa::make_problem(1, 1, 1, N_q, N_k, d, true);
  fa::Inputs in;
  in.p = p;
  in.Q = fa::Tensor({1, 1, N_q, d});
  in.K = fa::Tensor({1, 1, N_k, d});
  in.V = fa::Tensor({1, 1, N_k, d});
  // A cheap deterministic pattern (a hash of the index), rounded to bf16 so that the check sees
  // what the kernel sees.
  auto val = [](uint64_t i) {
    i = (i ^ (i >> 31)) * 0x9e3779b97f4a7c15ull;
    return fa::round_to(fa::DType::bf16, float(double(i >> 40) / double(1 << 24) * 4.0 - 2.0));
  };
  for (int64_t i = 0; i < in.Q.numel(); ++i) in.Q[i] = val(uint64_t(i));
  for (int64_t i = 0; i < in.K.numel(); ++i) in.K[i] = val(uint64_t(i) + 7), in.V[i] = val(uint64_t(i) + 13);
  // Reference rows: the last 64 and 64 around row 2^31 / d (element 2^31), computed once.
  std::vector<int64_t> rows;
  for (int64_t i = N_q - 64; i < N_q; ++i) rows.push_back(i);
  for (int64_t i = (int64_t(1) << 31) / d - 32; i < (int64_t(1) << 31) / d + 32; ++i) rows.push_back(i);
  // Causal bottom-right with N_q > N_k: row i sees keys j <= i + N_k - N_q (none for the first rows).
  fa::TensorD O64, L64;
  fa::reference_forward_rows(p, in.Q, in.K, in.V, rows, O64, L64);
  for (const std::string& name : kernel_names) {
    INFO("kernel " << name << " at d = " << d << " (runs " << fa05::plan(name, p, fa::DType::bf16).runs << ")");
    const fa::ForwardRun r = fa::run_forward(stage_05_forward(name, fa::DType::bf16), in);
    double worst = 0;
    for (size_t x = 0; x < rows.size(); ++x) {
      const int64_t i = rows[x];
      const double lse = L64[int64_t(x)];  // -inf for a row that sees no key (its O is 0)
      for (int64_t c = 0; c < d; ++c) worst = std::max(worst, std::fabs(double(r.O[i * d + c]) - O64[int64_t(x) * d + c]));
      if (std::isinf(lse)) CHECK(r.LSE[i] == -std::numeric_limits<float>::infinity());
      else CHECK(std::fabs(double(r.LSE[i]) - lse) < 1e-4);
    }
    INFO("worst |O - O64| over the checked rows: " << worst);
    // |O| <= 2: a bf16 rounding of O, and one of P where the kernel multiplies P in bf16.
    CHECK(worst < 2 * fa::dtype_unit_roundoff(fa::DType::bf16) * 2.0);
    // Every row was written (the poison is NaN).
    CHECK(fa::count_nonfinite(r.O.ptr(), r.O.numel()) == 0);
  }
}

TEST_CASE("05: offsets past 2^31 elements, every kernel (Q, O of 2^31 + 8192 elements, bf16)") {
  std::vector<std::string> all;
  for (const fa05::KernelInfo& kern : fa05::kernels()) all.push_back(kern.name);
  check_offsets_past_2_31(64, all);
}

TEST_CASE("05: offsets past 2^31 elements at d = 128, v8, v10, v11, v12 (Q, O of 2^31 + 16384 elements, bf16)") {
  std::vector<std::string> d128;
  for (const char* k : {"v8", "v10", "v11", "v12"})
    if (runs_itself(k)) d128.push_back(k);
  if (d128.empty()) {
    MESSAGE("v8, v10, v11 and v12 run v5 on this GPU: checked at d = 64 by the case above");
    return;
  }
  check_offsets_past_2_31(128, d128);
}

// Every score equal (Q = 0), N_k = 300000 keys: the row sum l = N_k is past fp16's largest finite
// value (65504) even in a quarter of the keys (the share one lane of v2 ... v8 holds), so a kernel
// that keeps l in fp16 cannot hold it: it overflows, or (v2 with the bug zoo's FP16_ROWSUM, adding
// 16 per block) stops at 32768, where fp16's spacing is 32 and 32768 + 16 rounds back to even.
// O must be the mean of V and LSE = log(N_k). The battery's sizes never reach this. The materialised
// baseline (cublas) stores P normalised in the dtype: every P is 1/N_k rounded (in fp16 a
// subnormal, 56 x 2^-24), so its O is the mean times N_k * round(1/N_k), predicted here exactly.
// At d = 256, v13's widest tiles (one Q buffer) and v5's widest mma.sync kernel.
TEST_CASE("05: offsets past 2^31 elements at d = 256, v13 and v5 (Q, O of 2^31 + 32768 elements, bf16)") {
  check_offsets_past_2_31(256, {"v13", "v5"});
}

TEST_CASE("05: a row sum past 65504 (N_k = 300000, every score equal), every kernel, fp16 and bf16") {
  const int64_t N_q = 16, N_k = 300000, d = 64;
  fa::Inputs in;
  in.p = fa::make_problem(1, 1, 1, N_q, N_k, d, false);
  in.Q = fa::Tensor({1, 1, N_q, d});
  in.K = fa::Tensor({1, 1, N_k, d});
  in.V = fa::Tensor({1, 1, N_k, d});
  auto hash01 = [](uint64_t i) {  // a deterministic value in [0, 1)
    i = (i ^ (i >> 29)) * 0x9e3779b97f4a7c15ull;
    return double(i >> 40) / double(1 << 24);
  };
  for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
    for (int64_t i = 0; i < in.Q.numel(); ++i) in.Q[i] = 0.f;
    for (int64_t i = 0; i < in.K.numel(); ++i) {
      in.K[i] = fa::round_to(t, float(hash01(uint64_t(i)) * 4.0 - 2.0));
      in.V[i] = fa::round_to(t, float(1.0 + 0.2 * (hash01(uint64_t(i) + 99) - 0.5)));
    }
    std::vector<double> mean(d, 0.0);  // O of every row: the mean of V's rows
    for (int64_t j = 0; j < N_k; ++j)
      for (int64_t c = 0; c < d; ++c) mean[c] += in.V[j * d + c];
    for (double& x : mean) x /= double(N_k);
    for (const fa05::KernelInfo& kern : fa05::kernels()) {
      INFO("kernel " << kern.name << " (runs " << fa05::plan(kern.name, in.p, t).runs << "), dtype "
                     << std::string(fa::dtype_name(t)));
      const fa::ForwardRun r = fa::run_forward(stage_05_forward(kern.name, t), in);
      const double f = kern.name == std::string("cublas") ? double(fa::round_to(t, 1.f / float(N_k))) * double(N_k) : 1.0;
      INFO("O expected: mean(V) x " << f);
      double worst = 0;
      for (int64_t i = 0; i < N_q; ++i) {
        for (int64_t c = 0; c < d; ++c) worst = std::max(worst, std::fabs(double(r.O[i * d + c]) - f * mean[c]));
        CHECK(std::fabs(double(r.LSE[i]) - std::log(double(N_k))) < 1e-5 * std::log(double(N_k)));
      }
      INFO("worst |O - mean(V)|: " << worst);
      // |O| < 1.1. Allowed: the rounding of O to the dtype (twice its unit roundoff), plus the
      // fp32 accumulation of P V over N_k / 16 tensor-core steps, each allowed one unit roundoff
      // of fp32 (2^-24) in the same direction: the tensor cores' fp32 accumulator truncates
      // instead of rounding to nearest (Fasi, Higham, Mikaitis, Pranesh 2021, "Numerical behavior
      // of NVIDIA tensor cores"), so the error grows like n u, not sqrt(n) u. Measured on the
      // H200 (2026-11-30): 1.47e-3 for v2 ... v7 in fp16, past the first allowance alone
      // (1.08e-3); v1 (FFMA, round to nearest) stays inside it.
      CHECK(worst < (2 * fa::dtype_unit_roundoff(t) + double(N_k / 16) * std::ldexp(1.0, -24)) * 1.1);
    }
  }
}

TEST_CASE("05: the C ABI (libfa05.so) computes what the C++ path computes") {
  for (const fa::AttnProblem& p : {fa::make_problem(2, 6, 3, 77, 45, 40, true), fa::make_problem(2, 6, 3, 77, 45, 64, true)})
  for (const fa05::KernelInfo& k : fa05::kernels())
    for (fa::DType t : kDtypes) {
      const fa::Inputs in = fa::random_inputs(p, 9);
      INFO(k.name << " " << std::string(fa::dtype_name(t)) << " " << p.describe());
      const fa::ForwardRun ref = fa::run_forward(stage_05_forward(k.name, t), in);
      const int64_t eb = fa::dtype_bytes(t);
      std::vector<uint8_t> hq(size_t(eb * p.q_elems())), hk(size_t(eb * p.kv_elems())), hv(hk.size());
      fa::encode(t, in.Q.ptr(), p.q_elems(), hq.data());
      fa::encode(t, in.K.ptr(), p.kv_elems(), hk.data());
      fa::encode(t, in.V.ptr(), p.kv_elems(), hv.data());
      fa::DeviceBuffer<uint8_t> dq(int64_t(hq.size()), fa::Mem::Io), dk(int64_t(hk.size()), fa::Mem::Io),
          dv(int64_t(hv.size()), fa::Mem::Io), dO(int64_t(hq.size()), fa::Mem::Io);
      fa::DeviceBuffer<float> dl(p.lse_elems(), fa::Mem::Io);
      FA_CUDA_CHECK(cudaMemcpy(dq.get(), hq.data(), hq.size(), cudaMemcpyHostToDevice));
      FA_CUDA_CHECK(cudaMemcpy(dk.get(), hk.data(), hk.size(), cudaMemcpyHostToDevice));
      FA_CUDA_CHECK(cudaMemcpy(dv.get(), hv.data(), hv.size(), cudaMemcpyHostToDevice));
      const int status = fa05_forward(k.name.c_str(), dq.get(), dk.get(), dv.get(), dO.get(), dl.get(), p.B,
                                      p.H, p.H_kv, p.N_q, p.N_k, p.d, int(t), 1, 0.f, nullptr);
      REQUIRE_MESSAGE(status == FA05_OK, fa05_last_error());
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint8_t> ho(hq.size());
      fa::Tensor O(in.Q.shape), L({p.B, p.H, p.N_q});
      FA_CUDA_CHECK(cudaMemcpy(ho.data(), dO.get(), ho.size(), cudaMemcpyDeviceToHost));
      FA_CUDA_CHECK(cudaMemcpy(L.ptr(), dl.get(), size_t(L.numel()) * 4, cudaMemcpyDeviceToHost));
      fa::decode(t, ho.data(), p.q_elems(), O.ptr());
      CHECK(fa::same_bits(O, ref.O));
      CHECK(fa::same_bits(L, ref.LSE));
    }
  // Errors are codes with a message, never a crash; an unsupported d is told from a bad argument.
  fa::DeviceBuffer<float> buf(64, fa::Mem::Io);
  CHECK(fa05_forward("v1", buf.get(), buf.get(), buf.get(), buf.get(), buf.get(), 1, 1, 1, 1, 1, 300, 0, 0, 0.f,
                     nullptr) == FA05_UNSUPPORTED);
  CHECK(std::string(fa05_last_error()).find("--head-dim") != std::string::npos);
  CHECK(fa05_forward("v1", buf.get(), buf.get(), buf.get(), buf.get(), buf.get(), 1, 3, 2, 1, 1, 8, 0, 0, 0.f,
                     nullptr) == FA05_INVALID_ARGUMENT);
  // fa05_forward_varlen: the same bits as the C++ path on a packed batch (device offsets), and
  // host offsets refused as host memory before any kernel runs.
  if (runs_itself("v13")) {
    const fa::VarlenHost v{{0, 77, 77, 300}, {0, 45, 90, 91}};
    fa::AttnProblem tmpl = fa::make_problem(1, 6, 3, 1, 1, 64, true);
    tmpl.window_left = 30;
    const fa::Inputs in = fa::random_varlen_inputs(tmpl, v, 11);
    const fa::AttnProblem& p = in.p;
    for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
      INFO("varlen " << std::string(fa::dtype_name(t)));
      const fa::ForwardRun ref = fa::run_forward(stage_05_varlen_forward("v13", t), in);
      const int64_t eb = fa::dtype_bytes(t), nq = in.Q.numel(), nk = in.K.numel();
      std::vector<uint8_t> hq(size_t(eb * nq)), hk(size_t(eb * nk)), hv(hk.size());
      fa::encode(t, in.Q.ptr(), nq, hq.data());
      fa::encode(t, in.K.ptr(), nk, hk.data());
      fa::encode(t, in.V.ptr(), nk, hv.data());
      fa::DeviceBuffer<uint8_t> dq(int64_t(hq.size()), fa::Mem::Io), dk(int64_t(hk.size()), fa::Mem::Io),
          dv(int64_t(hv.size()), fa::Mem::Io), dO(int64_t(hq.size()), fa::Mem::Io);
      fa::DeviceBuffer<float> dl(p.H * v.total_q(), fa::Mem::Io);
      fa::DeviceBuffer<int32_t> cq(4, fa::Mem::Io), ck(4, fa::Mem::Io);
      FA_CUDA_CHECK(cudaMemcpy(dq.get(), hq.data(), hq.size(), cudaMemcpyHostToDevice));
      FA_CUDA_CHECK(cudaMemcpy(dk.get(), hk.data(), hk.size(), cudaMemcpyHostToDevice));
      FA_CUDA_CHECK(cudaMemcpy(dv.get(), hv.data(), hv.size(), cudaMemcpyHostToDevice));
      FA_CUDA_CHECK(cudaMemcpy(cq.get(), v.cu_q.data(), 16, cudaMemcpyHostToDevice));
      FA_CUDA_CHECK(cudaMemcpy(ck.get(), v.cu_k.data(), 16, cudaMemcpyHostToDevice));
      const auto call = [&](const int32_t* q_off) {
        return fa05_forward_varlen("v13", dq.get(), dk.get(), dv.get(), dO.get(), dl.get(), q_off, ck.get(), 3,
                                   v.total_q(), v.total_k(), p.N_q, p.N_k, p.H, p.H_kv, p.d, int(t), 1, 0.f, 30, -1,
                                   0.f, nullptr);
      };
      CHECK(call(v.cu_q.data()) == FA05_INVALID_ARGUMENT);
      CHECK(std::string(fa05_last_error()).find("cu_seqlens_q") != std::string::npos);
      REQUIRE_MESSAGE(call(cq.get()) == FA05_OK, fa05_last_error());
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<uint8_t> ho(hq.size());
      fa::Tensor O(in.Q.shape), L({p.H, v.total_q()});
      FA_CUDA_CHECK(cudaMemcpy(ho.data(), dO.get(), ho.size(), cudaMemcpyDeviceToHost));
      FA_CUDA_CHECK(cudaMemcpy(L.ptr(), dl.get(), size_t(L.numel()) * 4, cudaMemcpyDeviceToHost));
      fa::decode(t, ho.data(), nq, O.ptr());
      CHECK(fa::same_bits(O, ref.O));
      CHECK(fa::same_bits(L, ref.LSE));
    }
  }
  int64_t huge = 0;  // S of the cuBLAS baseline for 64 heads of 2^20 x 2^14: 2^40 floats
  CHECK(fa05_workspace_bytes("cublas", 1, 64, 64, 1 << 20, 1 << 14, 64, 1, 0, &huge) == FA05_OK);
  CHECK(huge == 6 * (int64_t(64) << 34));
}

// v15 (FP8, issue 35): the battery's cases at d = 128 (its one width) and ragged shapes around its
// 128 x 128 blocks, causal, GQA, under the FP8 rule (conformance.hpp, Storage::fp8), and the
// RMSE of O against float64 beside what e4m3 storage alone causes (reference_forward_stored_fp8),
// FlashAttention-3's measure. On a GPU that is not sm_90: refused, naming --dtype.
namespace {
const fa::Storage kFp8{fa::DType::bf16, true, true};
double rmse_vs(const fa::Tensor& a, const fa::TensorD& b) {
  double s = 0;
  for (int64_t e = 0; e < a.numel(); ++e) s += (double(a[e]) - b[e]) * (double(a[e]) - b[e]);
  return std::sqrt(s / double(std::max<int64_t>(a.numel(), 1)));
}
}  // namespace

TEST_CASE("05 v15 (FP8): the battery at d = 128, ragged sizes, causal, GQA, and its RMSE beside storage's") {
  const fa::ForwardFn f = stage_05_fp8_forward();
  if (fa::gpu_compute_capability() != 90) {
    CHECK_THROWS_AS(fa05::plan_fp8(fa::make_problem(1, 1, 1, 8, 8, 128, false)), fa05::Unsupported);
    return;
  }
  int ran = 0;
  for (const fa::Case& c : fa::forward_battery()) {
    if (c.p.d != 128 || c.p.softcap > 0 || c.p.window_left >= 0 || c.p.window_right >= 0 || !c.cu_q.empty()) continue;
    fa::check_forward_case(f, c, false, kFp8);
    ++ran;
  }
  CHECK(ran >= 3);
  for (auto& nn : kRaggedSizes)
    for (bool causal : {false, true}) {
      const fa::Case c{"v15 shape", fa::make_problem(2, 4, 2, nn[0], nn[1], 128, causal), fa::Fill::HighDims};
      fa::check_forward_case(f, c, false, kFp8);
    }
  for (int64_t n : {2048, 300}) {  // MQA, a long row of key blocks
    const fa::Case c{"v15 long", fa::make_problem(1, 8, 1, n, n + 77, 128, true), fa::Fill::Normal};
    fa::check_forward_case(f, c, false, kFp8);
  }
  // RMSE against float64 (FlashAttention-3's Table 3 measure), normal inputs, N = 2048.
  for (bool causal : {false, true}) {
    fa::Inputs in = fa::random_inputs(fa::make_problem(1, 4, 4, 2048, 2048, 128, causal), 5);
    for (fa::Tensor* t : {&in.Q, &in.K, &in.V}) fa::fp8::round_e4m3_blocks(t->ptr(), 4, 2048, 128, t == &in.Q ? 64 : 128);
    const fa::ForwardRun r = fa::run_forward(f, in);
    fa::TensorD O64, L64, Os, Ls;
    fa::reference_forward(in.p, in.Q, in.K, in.V, O64, L64);
    fa::reference_forward_stored_fp8(in.p, in.Q, in.K, in.V, Os, Ls);
    double s = 0;
    for (int64_t e = 0; e < Os.numel(); ++e) s += (Os[e] - O64[e]) * (Os[e] - O64[e]);
    const double model = std::sqrt(s / double(Os.numel())), kernel = rmse_vs(r.O, O64);
    MESSAGE("v15 RMSE of O vs float64 (e4m3 inputs, N = 2048, causal " << causal << "): kernel " << kernel
            << ", storage alone " << model << ", ratio " << kernel / model);
    CHECK(kernel <= 2 * model);  // the arithmetic (13-bit accumulation, ex2) may at most double storage's error
  }
}

TEST_CASE("05 v15 (FP8): the same bits run after run, and the e4m3 entry point equals the bf16 one") {
  if (fa::gpu_compute_capability() != 90) return;
  fa::Inputs in = fa::random_inputs(fa::make_problem(2, 4, 2, 333, 901, 128, true), 3);
  for (fa::Tensor* t : {&in.Q, &in.K, &in.V}) fa::round_tensor(*t, fa::DType::bf16);  // what the bf16 entry point reads
  const fa::ForwardFn f = stage_05_fp8_forward();
  const fa::ForwardRun a = fa::run_forward(f, in);
  CHECK(a.gpu_extra_bytes == fa05::fp8_workspace_bytes(in.p));
  for (int rep = 0; rep < 3; ++rep) {
    const fa::ForwardRun b = fa::run_forward(f, in);
    CHECK(fa::same_bits(a.O, b.O));
    CHECK(fa::same_bits(a.LSE, b.LSE));
  }
  // The host quantiser's bytes and scales through forward_fp8_e4m3 give forward_fp8's bits.
  const fa::AttnProblem& p = in.p;
  const fa::fp8::E4m3Blocks q = fa::fp8::quantize_e4m3_blocks(in.Q.ptr(), p.B * p.H, p.N_q, p.d, 64);
  const fa::fp8::E4m3Blocks k = fa::fp8::quantize_e4m3_blocks(in.K.ptr(), p.B * p.H_kv, p.N_k, p.d, 128);
  const fa::fp8::E4m3Blocks v = fa::fp8::quantize_e4m3_blocks(in.V.ptr(), p.B * p.H_kv, p.N_k, p.d, 128);
  const auto up = [](const auto& host) {
    using T = typename std::decay_t<decltype(host)>::value_type;
    fa::DeviceBuffer<T> d(int64_t(host.size()), fa::Mem::Io);
    FA_CUDA_CHECK(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  };
  auto dQ = up(q.bits), dK = up(k.bits), dV = up(v.bits);
  auto sQ = up(q.scales), sK = up(k.scales), sV = up(v.scales);
  fa::DeviceBuffer<uint16_t> O(p.q_elems(), fa::Mem::Io);
  fa::DeviceBuffer<float> LSE(p.lse_elems(), fa::Mem::Io);
  fa05::forward_fp8_e4m3(p, {dQ.get(), dK.get(), dV.get(), sQ.get(), sK.get(), sV.get()}, O.get(), LSE.get(), {}, nullptr);
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint16_t> o(size_t(p.q_elems()));
  std::vector<float> lse(size_t(p.lse_elems()));
  FA_CUDA_CHECK(cudaMemcpy(o.data(), O.get(), o.size() * 2, cudaMemcpyDeviceToHost));
  FA_CUDA_CHECK(cudaMemcpy(lse.data(), LSE.get(), lse.size() * 4, cudaMemcpyDeviceToHost));
  int64_t diff = 0;
  for (size_t e = 0; e < o.size(); ++e) diff += lowp::float_from_bf16_bits(o[e]) != a.O[int64_t(e)];
  for (size_t e = 0; e < lse.size(); ++e) diff += std::memcmp(&lse[e], &a.LSE[int64_t(e)], 4) != 0;
  CHECK(diff == 0);

  // Misaligned pointers are refused, through the C ABI, before any launch: O keeps its poison.
  FA_CUDA_CHECK(cudaMemset(O.get(), 0xff, size_t(p.q_elems()) * 2));
  char* Ob = reinterpret_cast<char*>(O.get());
  float* L1 = reinterpret_cast<float*>(reinterpret_cast<char*>(LSE.get()) + 1);
  const float* sV1 = reinterpret_cast<const float*>(reinterpret_cast<const char*>(sV.get()) + 1);
  const auto e4m3 = [&](void* o, float* lse, const float* sv) {
    return fa05_forward_fp8_e4m3(dQ.get(), dK.get(), dV.get(), sQ.get(), sK.get(), sv, o, lse, p.B, p.H, p.H_kv, p.N_q,
                                 p.N_k, p.d, int(p.causal), p.resolved_scale(), nullptr);
  };
  CHECK(e4m3(Ob + 2, LSE.get(), sV.get()) == FA05_UNSUPPORTED);  // TMA and 16-byte stores: a kernel limit
  CHECK(e4m3(O.get(), L1, sV.get()) == FA05_INVALID_ARGUMENT);     // no valid float pointer is misaligned
  CHECK(e4m3(O.get(), LSE.get(), sV1) == FA05_INVALID_ARGUMENT);
  fa::DeviceBuffer<uint16_t> Q16(p.q_elems(), fa::Mem::Io), K16(p.kv_elems(), fa::Mem::Io), V16(p.kv_elems(), fa::Mem::Io);
  CHECK(fa05_forward_fp8(Q16.get(), K16.get(), V16.get(), Ob + 2, LSE.get(), p.B, p.H, p.H_kv, p.N_q, p.N_k, p.d,
                         int(p.causal), p.resolved_scale(), nullptr) == FA05_UNSUPPORTED);  // before the quantisers
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  FA_CUDA_CHECK(cudaMemcpy(o.data(), O.get(), o.size() * 2, cudaMemcpyDeviceToHost));
  int64_t written = 0;
  for (uint16_t x : o) written += x != 0xffff;
  CHECK(written == 0);
}

// |x| in [1, 5] x 2^e: bf16 normal for e >= -126, and the float64 sign kept.
static float magnitude(float x, int e) { return std::ldexp(x >= 0 ? 1.f + std::fmin(x, 4.f) : -1.f + std::fmax(x, -4.f), e); }

// Rows whose scores are all below 2^-100 in size: softmax is uniform over the visible keys (in v15
// and in float64) and O64 is the mean of V's visible rows. P = 1 is exact in e4m3 (256 P = 2^8); each
// V element is stored to half an e4m3 step (2^-4 relative, plus 2^-10 of its block's scale below
// e4m3's normals) and O is rounded to bf16 (2^-9 relative; 2^-8 bounds the float32 sums too), so
// |O - O64| <= vmax_i (2^-4 + 2^-8), vmax_i the largest |V| row i sees. LSE = log(visible keys) +
// a score below 2^-100: the float log's rounding (1e-6 relative). Returns the elements off (NaN counts).
static int64_t uniform_rows_off(const fa::Inputs& in, const fa::ForwardRun& r) {
  fa::TensorD O64, L64;
  fa::reference_forward(in.p, in.Q, in.K, in.V, O64, L64);
  const fa::AttnProblem& p = in.p;
  int64_t bad = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i) {
        double vmax = 0;
        for (int64_t j = p.key_begin(i); j < p.key_end(i); ++j)
          for (int64_t c = 0; c < p.d; ++c) vmax = std::fmax(vmax, std::fabs(double(in.V.ptr()[p.kv_offset(b, h, j) + c])));
        const double tol = vmax * (0x1p-4 + 0x1p-8);
        for (int64_t c = 0; c < p.d; ++c) {
          const int64_t e = p.q_offset(b, h, i) + c;
          bad += !(std::fabs(double(r.O[e]) - O64[e]) <= tol);
        }
        const int64_t e = p.lse_offset(b, h, i);
        bad += !(std::fabs(double(r.LSE[e]) - L64[e]) <= 1e-6 * std::fabs(L64[e]) + 1e-7);
      }
  return bad;
}

TEST_CASE("05 v15 (FP8): blocks of tiny magnitude (scales below 2^-127) give finite rows equal to float64's") {
  if (fa::gpu_compute_capability() != 90) return;
  // |x| in [1, 5] x 2^-124: a block's scale is about 2^-131, so 1 / scale would overflow and the score
  // unit scale log2(e) sQ sK (about 2^-265) underflows to 0, where a masked score's -inf x 0 is NaN.
  // Causal, so masked scores exist. Every score is below 2^-200 in size.
  fa::Inputs in = fa::random_inputs(fa::make_problem(1, 2, 1, 200, 333, 128, true), 11);
  for (fa::Tensor* t : {&in.Q, &in.K, &in.V}) {
    float* x = t->ptr();
    for (int64_t e = 0; e < t->numel(); ++e) x[e] = magnitude(x[e], -124);
    fa::round_tensor(*t, fa::DType::bf16);
  }
  CHECK(uniform_rows_off(in, fa::run_forward(stage_05_fp8_forward(), in)) == 0);
}

TEST_CASE("05 v15 (FP8): V blocks whose scales differ by up to 2^190 (tiny, zero, tiny, huge, tiny) merge without overflow") {
  if (fa::gpu_compute_capability() != 90) return;
  // Five 128-key V blocks: about 2^-124, all zero (its scale is 1), 2^-124, 2^60, 2^-124. Causal, so
  // rows 128 ... 383 see tiny V beside the zero block: there the unit must stay 1 (1 / 2^-131 would
  // overflow), and they are checked at their own tiny magnitude. Q is tiny, so softmax is uniform.
  fa::Inputs in = fa::random_inputs(fa::make_problem(1, 2, 1, 640, 640, 128, true), 12);
  float* q = in.Q.ptr();
  for (int64_t e = 0; e < in.Q.numel(); ++e) q[e] = magnitude(q[e], -124);
  float* v = in.V.ptr();
  const int block_exp[5] = {-124, 0, -124, 60, -124};
  for (int64_t j = 0; j < 640; ++j)
    for (int64_t c = 0; c < 128; ++c) {
      float& x = v[j * 128 + c];
      x = j / 128 == 1 ? 0.f : magnitude(x, block_exp[j / 128]);
    }
  fa::round_tensor(in.Q, fa::DType::bf16);
  fa::round_tensor(in.V, fa::DType::bf16);
  CHECK(uniform_rows_off(in, fa::run_forward(stage_05_fp8_forward(), in)) == 0);
}

TEST_CASE("05 v15 (FP8): one small ragged causal GQA problem (for compute-sanitizer)") {
  if (fa::gpu_compute_capability() != 90) return;
  fa::check_forward_case(stage_05_fp8_forward(), fa::Case{"v15 small", fa::make_problem(1, 4, 2, 150, 301, 128, true), fa::Fill::HighDims},
                         false, kFp8);
}
