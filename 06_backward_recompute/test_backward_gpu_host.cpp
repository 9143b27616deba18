// Stage 06's GPU backward, what needs no GPU (CI runs it): the launch arithmetic of
// fa06::backward_plan and what it refuses, and the band the kernels ask (kernels/bwd_variants.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bwd_variants.hpp"
#include "runner_bwd.hpp"

TEST_CASE("06 gpu plan: blocks of 64 rows for d <= 64, else 32; grids over key and query blocks") {
  for (auto [d, B] : {std::pair<int64_t, int64_t>{1, 64}, {64, 64}, {65, 32}, {128, 32}, {256, 32}}) {
    INFO("d = " << d);
    const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1000, 300, d, true);
    const fa06::BwdPlan pl = fa06::backward_plan("gpu_v1", p, fa::DType::fp32);
    CHECK(pl.Br == B);
    CHECK(pl.Bc == B);
    CHECK(pl.threads == 256);
    CHECK(pl.blocks_dkdv == 2 * 2 * ((300 + B - 1) / B));  // per (b, kv head, key block)
    CHECK(pl.blocks_dq == 2 * 8 * ((1000 + B - 1) / B));   // per (b, head, query block)
    CHECK(pl.workspace_bytes == 4 * 2 * 8 * 1000);         // D: one float per query row
    // Pass 1: K, V, dK, dV, Q, dO tiles with pitch d + 1, S^T and dS^T with pitch Br + 1, LSE, D.
    CHECK(pl.smem_dkdv == 4 * ((4 * B + 2 * B) * (d + 1) + 2 * B * (B + 1) + 2 * B));
    CHECK(pl.smem_dq == 4 * ((3 * B + 2 * B) * (d + 1) + 2 * B * (B + 1) + 2 * B));
    CHECK(pl.smem_dkdv <= 227 * 1024);  // fits an H100/H200 thread block
    CHECK(pl.smem_dq <= 227 * 1024);
  }
  const fa06::BwdPlan small = fa06::backward_plan("gpu_v1", fa::make_problem(1, 1, 1, 5, 3, 64, false), fa::DType::fp32);
  CHECK(small.Br == 5);  // no block larger than the problem
  CHECK(small.Bc == 3);
}

// The head dims of issue 37's list and the native width each runs at on the tensor cores (the
// next of 32, 64, 96, 128, 192, 256 at or above it), written out rather than derived.
const std::pair<int64_t, int64_t> kWidths[] = {{1, 32},   {8, 32},   {16, 32},   {32, 32},   {40, 64},
                                               {59, 64},  {64, 64},  {80, 96},   {96, 96},   {111, 128},
                                               {128, 128}, {160, 192}, {192, 192}, {224, 256}, {256, 256}};

TEST_CASE("06 gpu plan: the native widths, and the one each head dim runs at") {
  CHECK(fa06::native_widths() == std::vector<int64_t>{32, 64, 96, 128, 192, 256});
  for (auto [d, D] : kWidths) CHECK(fa06::native_width(d) == D);
  CHECK(fa06::native_width(33) == 64);
  CHECK(fa06::native_width(129) == 192);
  CHECK_THROWS_WITH_AS(fa06::native_width(257), doctest::Contains("--head-dim"), fa::InputError);
  CHECK(fa06::smem_optin_bytes(90) == 227 * 1024);
  CHECK(fa06::smem_optin_bytes(80) == 163 * 1024);
  CHECK(fa06::smem_optin_bytes(86) == 99 * 1024);
}

TEST_CASE("06 gpu plan: gpu_v2 takes 64 query rows a step, 64 or 128 keys a block, 16 or 32 a warp") {
  CHECK(fa06::bwd_shapes(32).size() == 3);
  CHECK(fa06::bwd_shapes(64).size() == 3);
  CHECK(fa06::bwd_shapes(96).size() == 2);   // 32 keys a warp would spill (192 accumulator registers)
  CHECK(fa06::bwd_shapes(128).size() == 2);  // ... and need 256
  CHECK(fa06::bwd_shapes(40).size() == 3);  // the shapes of the width d runs at (64)
  CHECK(fa06::bwd_shapes(160).empty());                  // gpu_v3 runs there
  for (const char* k : {"gpu_v2", "gpu_v2_det"})
    for (int64_t d : {32, 40, 64, 96, 111, 128}) {
      const int64_t D = fa06::native_width(d);
      std::vector<fa06::BwdShape> shapes = fa06::bwd_shapes(d);
      shapes.push_back({});  // the default
      for (const fa06::BwdShape& asked : shapes) {
        const fa06::BwdShape sh = asked.Bc ? asked : fa06::default_bwd_shape(d);
        INFO(k << " d = " << d << " Bc " << sh.Bc << " keys a warp " << sh.keys_per_warp);
        const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1000, 300, d, true);
        const fa06::BwdPlan pl = fa06::backward_plan(k, p, fa::DType::bf16, asked, 90);
        CHECK(pl.runs == k);
        CHECK(pl.d_kernel == D);
        CHECK(pl.note.empty() == (d == D));
        CHECK(pl.Br == 64);
        CHECK(pl.Bc == sh.Bc);
        CHECK(pl.keys_per_warp == sh.keys_per_warp);
        CHECK(pl.keys_per_warp == (asked.Bc ? asked.keys_per_warp : D <= 64 ? 32 : 16));
        CHECK(pl.stages == 2);
        CHECK(pl.threads == 32 * sh.Bc / sh.keys_per_warp);
        CHECK(pl.blocks_dkdv == 2 * 2 * ((300 + sh.Bc - 1) / sh.Bc));  // per (b, kv head, key block)
        CHECK(pl.blocks_dq == 0);                                      // no second pass
        // K_j, V_j, two Q_i and two dO_i tiles (pitch D + 8), dS^T (pitch 72), LSE and D twice.
        CHECK(pl.smem_dkdv == (2 * sh.Bc + 4 * 64) * (D + 8) * 2 + sh.Bc * 72 * 2 + 4 * 64 * 4);
        CHECK(pl.smem_dkdv <= 163 * 1024);  // fits an A100's thread block too
        const int64_t turns = std::string(k) == "gpu_v2_det" ? 4 * (2 * 8 * ((1000 + 63) / 64) + 1) : 0;
        // Padded: Q, dO (2 x 8 x 1000 rows) and K, V, dK, dV (2 x 2 x 300 rows) at D columns, 2 bytes.
        const int64_t pad = d == D ? 0 : 2 * (2 * 16000 + 4 * 1200) * D;
        CHECK(pl.pad_bytes == pad);
        CHECK(pl.workspace_bytes == 4 * 2 * 8 * 1000 + 4 * 2 * 8 * 1000 * D + turns + pad);  // D, dQacc (+ turns)
      }
    }
}

TEST_CASE("06 gpu plan: gpu_v3 takes 8 warps, 128 keys a block up to d = 128, 64 above, P^T in shared memory") {
  for (const char* k : {"gpu_v3", "gpu_v3_det"})
    for (auto [d, D] : kWidths)
      for (int sm : {90, 80}) {
        INFO(k << " d = " << d << " sm_" << sm);
        const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1000, 300, d, true);
        const fa06::BwdPlan pl = fa06::backward_plan(k, p, fa::DType::fp16, {}, sm);
        const int64_t Bc = D <= 128 ? 128 : 64;
        CHECK(pl.runs == k);
        CHECK(pl.d_kernel == D);
        CHECK(pl.Br == 64);
        CHECK(pl.Bc == Bc);
        CHECK(pl.threads == 256);
        CHECK(pl.blocks_dkdv == 2 * 2 * ((300 + Bc - 1) / Bc));
        // Two stages where they fit the GPU's shared memory (on sm_80 they do not from D = 128 on).
        const auto smem = [&](int64_t st) { return (2 * Bc + 2 * st * 64) * (D + 8) * 2 + 2 * Bc * 72 * 2 + 2 * st * 64 * 4; };
        const int64_t limit = sm == 90 ? 227 * 1024 : 163 * 1024;
        CHECK(pl.stages == (smem(2) <= limit ? 2 : 1));
        CHECK(pl.stages == (sm == 80 && D >= 128 ? 1 : 2));
        CHECK(pl.smem_dkdv == smem(pl.stages));
        CHECK(pl.smem_dkdv <= limit);
        CHECK((pl.stages == 1) == (pl.note.find("one stage") != std::string::npos));
        const int64_t turns = std::string(k) == "gpu_v3_det" ? 4 * (2 * 8 * ((1000 + 63) / 64) + 1) : 0;
        const int64_t pad = d == D ? 0 : 2 * (2 * 16000 + 4 * 1200) * D;
        CHECK(pl.workspace_bytes == 4 * 2 * 8 * 1000 + 4 * 2 * 8 * 1000 * D + turns + pad);
        CHECK_THROWS_WITH_AS(fa06::backward_plan(k, p, fa::DType::fp16, {128, 32}, sm),
                             doctest::Contains("shape (fa06::BwdShape)"), fa::InputError);
      }
  CHECK(fa06::backward_plan("gpu_v3", fa::make_problem(1, 2, 2, 100, 100, 32, false), fa::DType::fp32).runs == "gpu_v1");
}

TEST_CASE("06 gpu plan: gpu_v4 at d = 96 and 128 takes 128 keys a block, two warpgroups, swizzled tiles 128 columns wide") {
  for (const char* k : {"gpu_v4", "gpu_v4_det"})
    for (int64_t D : {96, 128}) {
      INFO(k << " D = " << D);
      const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1000, 300, D, true);
      const fa06::BwdPlan pl = fa06::backward_plan(k, p, fa::DType::bf16, {}, 90);
      CHECK(pl.runs == k);
      CHECK(pl.note.empty());
      CHECK(pl.d_kernel == D);
      CHECK(pl.Br == 64);
      CHECK(pl.Bc == 128);
      CHECK(pl.threads == 256);
      CHECK(pl.blocks_dkdv == 2 * 2 * 3);
      // K_j, V_j, 2 x Q_i, 2 x dO_i, dS^T in 16 bits, the first five 128 columns wide at D = 96 too
      // (two slabs of the swizzle, the second half used); LSE_i, D_i twice; 1024 bytes to align it.
      CHECK(pl.smem_dkdv == (2 * 128 * 128 + 4 * 64 * 128 + 128 * 64) * 2 + 4 * 64 * 4 + 1024);
      CHECK(pl.smem_dkdv <= 227 * 1024);
      const int64_t turns = std::string(k) == "gpu_v4_det" ? 4 * (2 * 8 * ((1000 + 63) / 64) + 1) : 0;
      CHECK(pl.workspace_bytes == 4 * 2 * 8 * 1000 + 4 * p.q_elems() + turns);
      CHECK_THROWS_WITH_AS(fa06::backward_plan(k, p, fa::DType::bf16, {128, 16}), doctest::Contains("shape (fa06::BwdShape)"),
                           fa::InputError);
    }
  // Padded: d = 80 (Phi-2's head dim) runs at 96 on gpu_v4 itself.
  const fa06::BwdPlan pp = fa06::backward_plan("gpu_v4", fa::make_problem(1, 2, 2, 100, 100, 80, false), fa::DType::bf16, {}, 90);
  CHECK(pp.runs == "gpu_v4");
  CHECK(pp.d_kernel == 96);
}

TEST_CASE("06 gpu plan: gpu_v4 at d = 192 and 256 takes 64 keys a block, the warpgroups sharing them (bwd_v4_wide)") {
  const bool v4_built =
      fa06::backward_plan("gpu_v4", fa::make_problem(1, 2, 2, 100, 100, 128, false), fa::DType::bf16, {}, 90).runs == "gpu_v4";
  if (!v4_built) return;  // a build without sm_90a code: the fallback case below covers it
  for (const char* k : {"gpu_v4", "gpu_v4_det"})
    for (int64_t D : {192, 256}) {
      INFO(k << " D = " << D);
      const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1000, 300, D, true);
      const fa06::BwdPlan pl = fa06::backward_plan(k, p, fa::DType::fp16, {}, 90);
      CHECK(pl.runs == k);
      CHECK(pl.note.empty());
      CHECK(pl.d_kernel == D);
      CHECK(pl.Br == 64);
      CHECK(pl.Bc == 64);
      CHECK(pl.threads == 256);
      CHECK(pl.blocks_dkdv == 2 * 2 * 5);  // ceil(300 / 64) key blocks per kv head
      // K_j, V_j, 2 x Q_i, 2 x dO_i, P^T, dS^T in 16 bits; LSE_i, D_i twice; two mbarriers; 1024
      // bytes of alignment.
      CHECK(pl.smem_dkdv == (2 * 64 * D + 4 * 64 * D + 2 * 64 * 64) * 2 + 4 * 64 * 4 + 2 * 8 + 1024);
      CHECK(pl.smem_dkdv <= 227 * 1024);
      // Padded: d = 150 and 200 run at 192 and 256 on gpu_v4 itself.
      const fa06::BwdPlan pp = fa06::backward_plan(k, fa::make_problem(1, 2, 2, 100, 100, D - 42, false), fa::DType::bf16, {}, 90);
      CHECK(pp.runs == k);
      CHECK(pp.d_kernel == D);
    }
}

TEST_CASE("06 gpu plan: gpu_v4 falls back, and says so: auto's choice at other widths, gpu_v3 off sm_90, gpu_v1 in fp32") {
  const fa::AttnProblem p64 = fa::make_problem(1, 2, 2, 100, 100, 64, false), p128 = fa::make_problem(1, 2, 2, 100, 100, 128, false);
  for (const std::string k : {"gpu_v4", "gpu_v4_det"}) {
    const std::string det = k == "gpu_v4_det" ? "_det" : "";
    INFO(k);
    fa06::BwdPlan pl = fa06::backward_plan(k, p64, fa::DType::bf16, {}, 90);
    CHECK(pl.runs == "gpu_v2" + det);
    CHECK(pl.keys_per_warp == 32);  // gpu_v2's own d = 64 shape
    CHECK(pl.note.find("d = 96, 128, 192 and 256 only") != std::string::npos);
    for (auto [d, D] : kWidths) {
      if (D >= 96) continue;
      INFO("d = " << d);
      pl = fa06::backward_plan(k, fa::make_problem(1, 2, 2, 100, 100, d, false), fa::DType::bf16, {}, 90);
      CHECK(pl.runs == fa06::default_backward_kernel(d, fa::DType::bf16, 0, 90) + det);
      CHECK(pl.d_kernel == D);
    }
    // d = 111 is padded to 128, d = 80 to 96, where gpu_v4 runs itself.
    const bool v4_built = fa06::backward_plan("gpu_v4", p128, fa::DType::bf16, {}, 90).runs == "gpu_v4";
    for (auto [d, D] : {std::pair<int64_t, int64_t>{111, 128}, {80, 96}}) {
      pl = fa06::backward_plan(k, fa::make_problem(1, 2, 2, 100, 100, d, false), fa::DType::bf16, {}, 90);
      CHECK(pl.runs == (v4_built ? k : "gpu_v3" + det));
      CHECK(pl.d_kernel == D);
    }
    pl = fa06::backward_plan(k, p128, fa::DType::fp16, {}, 80);
    CHECK(pl.runs == "gpu_v3" + det);
    CHECK(pl.note.find("sm_80") != std::string::npos);
    CHECK(pl.smem_dkdv == fa06::backward_plan("gpu_v3", p128, fa::DType::fp16, {}, 80).smem_dkdv);
    for (int64_t d : {96, 192, 200, 256}) {  // d = 96 and the wide form fall back the same way off sm_90
      pl = fa06::backward_plan(k, fa::make_problem(1, 2, 2, 100, 100, d, false), fa::DType::bf16, {}, 80);
      CHECK(pl.runs == "gpu_v3" + det);
      CHECK(pl.note.find("sm_80") != std::string::npos);
    }
    pl = fa06::backward_plan(k, p128, fa::DType::fp32, {}, 90);
    CHECK(pl.runs == "gpu_v1");
    CHECK(pl.note.find("gpu_v1") != std::string::npos);
  }
}

TEST_CASE("06 gpu plan: the default backward per head dim and dtype (the benchmark's fastest; guesses where unmeasured)") {
  for (int64_t d : {1, 64, 100, 128, 256}) {
    CHECK(fa06::default_backward_kernel(d, fa::DType::fp32) == "gpu_v1");
    CHECK(fa06::default_backward_kernel(d, fa::DType::fp32, 0, 80) == "gpu_v1");
  }
  // gpu_v4 on sm_90 where the build has sm_90a code (the course's builds do; the plan says whether).
  const bool v4_built =
      fa06::backward_plan("gpu_v4", fa::make_problem(1, 2, 2, 100, 100, 128, false), fa::DType::bf16, {}, 90).runs == "gpu_v4";
  const std::string at128 = v4_built ? "gpu_v4" : "gpu_v3";
  for (fa::DType t : {fa::DType::fp16, fa::DType::bf16}) {
    CHECK(fa06::default_backward_kernel(32, t, 0, 90) == "gpu_v2");
    CHECK(fa06::default_backward_kernel(64, t, 0, 90) == "gpu_v2");
    CHECK(fa06::default_backward_kernel(96, t, 0, 90) == at128);  // gpu_v4 where it runs
    CHECK(fa06::default_backward_kernel(80, t, 0, 90) == at128);  // d = 96's
    CHECK(fa06::default_backward_kernel(96, t, 0, 80) == "gpu_v3");
    CHECK(fa06::default_backward_kernel(128, t, 0, 90) == at128);
    CHECK(fa06::default_backward_kernel(192, t, 0, 90) == at128);  // gpu_v4's wide form where gpu_v4 runs
    CHECK(fa06::default_backward_kernel(256, t, 0, 90) == at128);
    CHECK(fa06::default_backward_kernel(200, t, 0, 90) == at128);
    CHECK(fa06::default_backward_kernel(40, t, 0, 90) == "gpu_v2");   // d = 64's
    CHECK(fa06::default_backward_kernel(111, t, 0, 90) == at128);     // d = 128's
    CHECK(fa06::default_backward_kernel(128, t, 227 * 1024, 80) == "gpu_v3");
    CHECK(fa06::default_backward_kernel(128, t, 227 * 1024, 89) == "gpu_v3");
    CHECK(fa06::default_backward_kernel(128, t, 163 * 1024, 80) == "gpu_v2");  // an A100: gpu_v3's two stages do not fit
    CHECK(fa06::default_backward_kernel(128, t, 0, 80) == "gpu_v2");
    CHECK(fa06::default_backward_kernel(256, t, 0, 80) == "gpu_v3");
  }
  CHECK(fa06::backward_plan("gpu_v2", fa::make_problem(1, 2, 2, 100, 100, 64, false), fa::DType::bf16).keys_per_warp == 32);
}

// Issue 37's list: every head dim runs on the tensor cores in 16 bits, on sm_90 and sm_80, at
// the native width the padding rule gives; float32 stays on gpu_v1 at d itself.
TEST_CASE("06 gpu plan: every d from 1 to 256 runs a tensor-core kernel in fp16/bf16, at the next native width") {
  const std::vector<std::string> asked = {"auto", "gpu_v2", "gpu_v2_det", "gpu_v3", "gpu_v3_det", "gpu_v4", "gpu_v4_det"};
  for (auto [d, D] : kWidths)
    for (fa::DType t : {fa::DType::fp16, fa::DType::bf16})
      for (int sm : {90, 80})
        for (const std::string& k : asked) {
          INFO(k << " d = " << d << " " << std::string(fa::dtype_name(t)) << " sm_" << sm);
          const fa::AttnProblem p = fa::make_problem(2, 4, 2, 333, 257, d, d % 2 == 0);
          const fa06::BwdPlan pl = fa06::backward_plan(k, p, t, {}, sm);
          CHECK(pl.runs != "gpu_v1");
          CHECK(pl.keys_per_warp > 0);
          CHECK(pl.d_kernel == D);
          CHECK(pl.smem_dkdv <= (sm == 90 ? 227 : 163) * 1024);
          CHECK(pl.pad_bytes == (d == D ? 0 : 2 * (2 * 2664 + 4 * 1028) * D));  // Q, dO; K, V, dK, dV
          // The note says the padding (and auto why it chose): the report shows it.
          CHECK((pl.note.find("native width " + std::to_string(D)) != std::string::npos) == (d != D));
          if (k == "auto") CHECK(pl.note.rfind("auto: ", 0) == 0);
          // auto follows default_backward_kernel (with this GPU's shared memory).
          if (k == "auto") CHECK(pl.runs == fa06::default_backward_kernel(d, t, fa06::smem_optin_bytes(sm), sm));
          // Above d = 128 gpu_v3 and gpu_v4 are compiled; gpu_v4 runs at 96, 128, 192, 256 on sm_90 only.
          if (D > 128) CHECK((pl.runs.rfind("gpu_v3", 0) == 0 || pl.runs.rfind("gpu_v4", 0) == 0));
          if (pl.runs.rfind("gpu_v4", 0) == 0) CHECK((D >= 96 && sm == 90));
          // A _det kernel stays deterministic whatever runs.
          if (k.size() > 4 && k.substr(k.size() - 4) == "_det") CHECK(pl.runs.substr(pl.runs.size() - 4) == "_det");
        }
  for (auto [d, D] : kWidths)
    for (const char* k : {"auto", "gpu_v2", "gpu_v3", "gpu_v4"}) {
      INFO(k << " d = " << d << " fp32");
      const fa06::BwdPlan pl = fa06::backward_plan(k, fa::make_problem(1, 2, 2, 100, 100, d, false), fa::DType::fp32, {}, 90);
      CHECK(pl.runs == "gpu_v1");
      CHECK(pl.d_kernel == d);
      CHECK(pl.pad_bytes == 0);
      CHECK(pl.note.find("gpu_v1") != std::string::npos);
    }
}

TEST_CASE("06 gpu plan: gpu_v2 runs gpu_v3 above d = 128, and says so") {
  for (int64_t d : {129, 160, 192, 224, 256}) {
    INFO("d = " << d);
    const fa06::BwdPlan pl = fa06::backward_plan("gpu_v2", fa::make_problem(1, 2, 2, 100, 100, d, false), fa::DType::bf16, {}, 90);
    CHECK(pl.runs == "gpu_v3");
    CHECK(pl.Bc == 64);
    CHECK(pl.note.find("d <= 128") != std::string::npos);
    CHECK(fa06::backward_plan("gpu_v2_det", fa::make_problem(1, 2, 2, 100, 100, d, false), fa::DType::bf16, {}, 90).runs ==
          "gpu_v3_det");
    CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v2", fa::make_problem(1, 2, 2, 100, 100, d, false), fa::DType::bf16, {128, 16}),
                         doctest::Contains("no block choice for gpu_v3"), fa::InputError);
  }
}

TEST_CASE("06 gpu plan: refuses what a kernel cannot run, naming the flag") {
  const fa::AttnProblem p = fa::make_problem(1, 1, 1, 8, 8, 64, false);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v1", p, fa::DType::fp32, {64, 16}), doctest::Contains("shape (fa06::BwdShape)"),
                       fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v2", p, fa::DType::bf16, {32, 16}), doctest::Contains("shape (fa06::BwdShape)"),
                       fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v2", fa::make_problem(1, 1, 1, 8, 8, 128, false), fa::DType::bf16, {128, 32}),
                       doctest::Contains("shape (fa06::BwdShape)"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v9", p, fa::DType::fp32), doctest::Contains("--bwd-kernel"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("auto", fa::make_problem(1, 1, 1, 8, 8, 257, false), fa::DType::bf16),
                       doctest::Contains("--head-dim"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v2", fa::make_problem(1, 1, 1, 8, 8, 96, false), fa::DType::bf16, {128, 32}),
                       doctest::Contains("shape (fa06::BwdShape)"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v1", fa::make_problem(1, 1, 1, 8, 8, 257, false), fa::DType::fp32),
                       doctest::Contains("--head-dim"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v1", fa::make_problem(1, 3, 2, 8, 8, 64, false), fa::DType::fp32),
                       doctest::Contains("--kv-heads"), fa::InputError);
}

// Issue 34: every GPU backward takes a sliding window and a softcap (docs/math.md section 8); the
// plan is the one without them (the variants change which tiles run and how, not the launch), and
// validate() refuses their bad values, naming the flag.
TEST_CASE("06 gpu plan: every kernel takes a window and a softcap; auto chooses as without; bad values refused, naming the flag") {
  std::vector<std::string> kernels = fa06::backward_kernels();
  kernels.push_back("auto");
  for (const std::string& k : kernels)
    for (int64_t d : {32, 64, 100, 128, 256})
      for (fa::DType t : {fa::DType::fp32, fa::DType::bf16})
        for (int sm : {90, 80}) {
          INFO(k << " d = " << d << " " << std::string(fa::dtype_name(t)) << " sm_" << sm);
          const fa::AttnProblem plain = fa::make_problem(2, 4, 2, 333, 257, d, true);
          fa::AttnProblem w = plain, c = plain, both = plain;
          w.window_left = 64, w.window_right = 0;
          c.softcap = 30.f;
          both.window_left = 16, both.window_right = 16, both.softcap = 50.f;
          const fa06::BwdPlan pl = fa06::backward_plan(k, plain, t, {}, sm);
          for (const fa::AttnProblem& p : {w, c, both}) {
            const fa06::BwdPlan pv = fa06::backward_plan(k, p, t, {}, sm);
            CHECK(pv.runs == pl.runs);
            CHECK(pv.note == pl.note);
            CHECK(pv.Bc == pl.Bc);
            CHECK(pv.blocks_dkdv == pl.blocks_dkdv);
            CHECK(pv.smem_dkdv == pl.smem_dkdv);
            CHECK(pv.workspace_bytes == pl.workspace_bytes);
          }
          // auto's choice with a window (and the fallbacks of the others) is the choice without.
          if (k == "auto") CHECK(fa06::backward_plan(k, w, t, {}, sm).runs == fa06::default_backward_kernel(d, t, 0, sm));
        }
  fa::AttnProblem bad = fa::make_problem(1, 2, 1, 64, 64, 64, false);
  bad.window_left = -2;
  for (const std::string& k : kernels)
    CHECK_THROWS_WITH_AS(fa06::backward_plan(k, bad, fa::DType::bf16), doctest::Contains("--window"), fa::InputError);
  bad.window_left = 8;
  for (float cap : {-1.f, std::nanf(""), INFINITY}) {
    bad.softcap = cap;
    CHECK_THROWS_WITH_AS(fa06::backward_plan("auto", bad, fa::DType::bf16), doctest::Contains("--softcap"), fa::InputError);
  }
}

// The band as the kernels ask it (kernels/bwd_variants.hpp), against AttnProblem::visible() pair by
// pair: the query blocks each key block runs are exactly those with a visible pair (and one range),
// the first key block of each query block is the lowest that runs it (the deterministic turns count
// from there), and on every tile the two diagonals give visible() exactly, a tile they do not cross
// being visible whole. Odd sizes, N_q != N_k both ways, causal, windows of 0, 1, below and above a
// block, one-sided, wider than N (and INT64_MAX), at the kernels' block sizes and odd ones.
// A packed batch (issue 34): gpu_v3 reads one in one launch; plan() refuses the rest.
TEST_CASE("06 gpu plan: a packed batch runs gpu_v3 (auto too); other kernels, fp32 and _det refuse it; totals size D and dQacc") {
  // 3 sequences, the longest of 300 queries and 500 keys; 600 queries and 900 keys in all.
  const fa::AttnProblem p = fa::make_problem(3, 8, 2, 300, 500, 128, true);
  int32_t dummy = 0;
  const fa::VarlenDevice packed{&dummy, &dummy, 600, 900};
  const fa06::BwdPlan pl = fa06::backward_plan("gpu_v3", p, fa::DType::bf16, {}, 90, packed);
  CHECK(pl.runs == "gpu_v3");
  CHECK(pl.blocks_dkdv == 3 * 2 * 4);  // (sequence, kv head, key block) of the longest: ceil(500 / 128)
  CHECK(pl.workspace_bytes == 4 * 600 * 8 + 4 * 600 * 8 * 128);  // D and dQacc: the batch's tokens x heads
  CHECK(fa06::backward_plan("auto", p, fa::DType::fp16, {}, 90, packed).runs == "gpu_v3");
  CHECK(fa06::backward_plan("auto", p, fa::DType::bf16, {}, 80, packed).runs == "gpu_v3");
  for (const char* k : {"gpu_v1", "gpu_v2", "gpu_v2_det", "gpu_v3_det", "gpu_v4", "gpu_v4_det"})
    CHECK_THROWS_WITH_AS(fa06::backward_plan(k, p, fa::DType::bf16, {}, 90, packed), doctest::Contains("--cu-seqlens-q"),
                         fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v3", p, fa::DType::fp32, {}, 90, packed), doctest::Contains("--cu-seqlens-q"),
                       fa::InputError);
  const fa::VarlenDevice short_batch{&dummy, &dummy, 299, 900};
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v3", p, fa::DType::bf16, {}, 90, short_batch),
                       doctest::Contains("--cu-seqlens-q/-k"), fa::InputError);
  // A padded problem past validate()'s 2^40 whose sequences are not (stage 05's test says more).
  const fa::AttnProblem wide = fa::make_problem(5000, 1, 1, 16384, 16384, 8, true);
  CHECK(fa06::backward_plan("gpu_v3", wide, fa::DType::bf16, {}, 90, fa::VarlenDevice{&dummy, &dummy, 21383, 21383}).runs ==
        "gpu_v3");
  // d = 80 runs at 96 on copies of the packed tensors: tokens x heads rows, not B N.
  const fa::AttnProblem p80 = fa::make_problem(3, 8, 2, 300, 500, 80, true);
  const fa06::BwdPlan pad = fa06::backward_plan("gpu_v3", p80, fa::DType::bf16, {}, 90, packed);
  CHECK(pad.d_kernel == 96);
  CHECK(pad.pad_bytes == 2 * (2 * 600 * 8 + 4 * 900 * 2) * 96);
}

TEST_CASE("06 gpu band: query_blocks, first_key_block and band_tile agree with visible() pair by pair") {
  const int64_t sizes[][2] = {{1, 1}, {1, 100}, {17, 17}, {64, 64}, {65, 129}, {129, 65}, {200, 37}, {37, 200}, {300, 300}};
  const int64_t windows[][2] = {{-1, -1}, {0, 0},  {1, 1},     {16, 16},   {100, 3},  {3, 100},
                                {-1, 10},  {50, -1}, {64, 0},  {5000, 5000}, {INT64_MAX, 0}, {0, INT64_MAX}};
  const int64_t blocks[][2] = {{64, 64}, {64, 128}, {64, 32}, {64, 16}, {32, 64}, {7, 13}};  // Br, Bc
  int64_t tiles = 0, crossed = 0;
  for (auto& nn : sizes)
    for (auto& w : windows)
      for (bool causal : {false, true})
        for (auto& bl : blocks) {
          fa::AttnProblem p = fa::make_problem(1, 1, 1, nn[0], nn[1], 8, causal);
          p.window_left = w[0], p.window_right = w[1];
          const int64_t Br = bl[0], Bc = bl[1], Tr = (p.N_q + Br - 1) / Br, Tc = (p.N_k + Bc - 1) / Bc;
          INFO("N_q " << p.N_q << " N_k " << p.N_k << " causal " << causal << " window " << w[0] << "," << w[1] << " Br "
                      << Br << " Bc " << Bc);
          // sees[i][j]: some pair of query block i and key block j is visible.
          std::vector<std::vector<bool>> sees(size_t(Tr), std::vector<bool>(size_t(Tc), false));
          for (int64_t i = 0; i < p.N_q; ++i)
            for (int64_t j = 0; j < p.N_k; ++j)
              if (p.visible(i, j)) sees[size_t(i / Br)][size_t(j / Bc)] = true;
          for (int64_t j = 0; j < Tc; ++j) {
            const int64_t c0 = j * Bc, bc = std::min(Bc, p.N_k - c0);
            const fa06::QueryBlocks qb = fa06::query_blocks(p, c0, bc, Br);
            INFO("key block " << j << ": query blocks " << qb.first << " .. " << qb.last);
            for (int64_t i = 0; i < Tr; ++i) CHECK(sees[size_t(i)][size_t(j)] == (qb.first <= i && i < qb.last));
            CHECK(qb.first >= 0);
            CHECK(qb.last <= Tr);
          }
          for (int64_t i = 0; i < Tr; ++i) {
            const int64_t r0 = i * Br, br = std::min(Br, p.N_q - r0);
            int64_t lowest = -1;
            for (int64_t j = 0; j < Tc && lowest < 0; ++j)
              if (sees[size_t(i)][size_t(j)]) lowest = j;
            if (lowest >= 0) CHECK(fa06::first_key_block(p, r0, Bc) == lowest);
            for (int64_t j = 0; j < Tc; ++j) {
              const int64_t c0 = j * Bc, bc = std::min(Bc, p.N_k - c0);
              const fa06::BandTile band = fa06::band_tile(p, r0, c0, int(Br), int(Bc));
              bool all = true;
              for (int64_t qc = 0; qc < br; ++qc)
                for (int64_t kr = 0; kr < bc; ++kr) {
                  const bool v = p.visible(r0 + qc, c0 + kr);
                  all = all && v;
                  if (band.sees(int(kr - qc)) != v) {
                    INFO("tile (" << i << ", " << j << ") query " << r0 + qc << " key " << c0 + kr << " band " << band.lo << ".." << band.hi);
                    CHECK(band.sees(int(kr - qc)) == v);
                  }
                }
              if (!band.crosses(int(Br), int(Bc))) CHECK(all);
              ++tiles, crossed += band.crosses(int(Br), int(Bc));
            }
          }
        }
  // Not every tile is masked: those wholly inside the band skip the mask.
  MESSAGE((tiles - crossed) << " of " << tiles << " tiles wholly inside the band");
  CHECK(crossed < tiles);
}
