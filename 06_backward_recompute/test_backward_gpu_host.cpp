// Stage 06's GPU backward, what needs no GPU (CI runs it): the launch arithmetic of
// fa06::backward_plan and what it refuses.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

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

TEST_CASE("06 gpu plan: gpu_v4 takes 128 keys a block, two warpgroups, swizzled tiles without padding") {
  for (const char* k : {"gpu_v4", "gpu_v4_det"}) {
    INFO(k);
    const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1000, 300, 128, true);
    const fa06::BwdPlan pl = fa06::backward_plan(k, p, fa::DType::bf16, {}, 90);
    CHECK(pl.runs == k);
    CHECK(pl.note.empty());
    CHECK(pl.Br == 64);
    CHECK(pl.Bc == 128);
    CHECK(pl.threads == 256);
    CHECK(pl.blocks_dkdv == 2 * 2 * 3);
    // K_j, V_j, 2 x Q_i, 2 x dO_i, dS^T in 16 bits; LSE_i, D_i twice; 1024 bytes to align the swizzle.
    CHECK(pl.smem_dkdv == (2 * 128 * 128 + 4 * 64 * 128 + 128 * 64) * 2 + 4 * 64 * 4 + 1024);
    CHECK(pl.smem_dkdv <= 227 * 1024);
    const int64_t turns = std::string(k) == "gpu_v4_det" ? 4 * (2 * 8 * ((1000 + 63) / 64) + 1) : 0;
    CHECK(pl.workspace_bytes == 4 * 2 * 8 * 1000 + 4 * p.q_elems() + turns);
    CHECK_THROWS_WITH_AS(fa06::backward_plan(k, p, fa::DType::bf16, {128, 16}), doctest::Contains("shape (fa06::BwdShape)"),
                         fa::InputError);
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
    CHECK(pl.note.find("d = 128 only") != std::string::npos);
    for (auto [d, D] : kWidths) {
      if (D == 128) continue;
      INFO("d = " << d);
      pl = fa06::backward_plan(k, fa::make_problem(1, 2, 2, 100, 100, d, false), fa::DType::bf16, {}, 90);
      CHECK(pl.runs == fa06::default_backward_kernel(d, fa::DType::bf16, 0, 90) + det);
      CHECK(pl.d_kernel == D);
    }
    // d = 111 is padded to 128, where gpu_v4 runs itself.
    const bool v4_built = fa06::backward_plan("gpu_v4", p128, fa::DType::bf16, {}, 90).runs == "gpu_v4";
    pl = fa06::backward_plan(k, fa::make_problem(1, 2, 2, 100, 100, 111, false), fa::DType::bf16, {}, 90);
    CHECK(pl.runs == (v4_built ? k : "gpu_v3" + det));
    CHECK(pl.d_kernel == 128);
    pl = fa06::backward_plan(k, p128, fa::DType::fp16, {}, 80);
    CHECK(pl.runs == "gpu_v3" + det);
    CHECK(pl.note.find("sm_80") != std::string::npos);
    CHECK(pl.smem_dkdv == fa06::backward_plan("gpu_v3", p128, fa::DType::fp16, {}, 80).smem_dkdv);
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
    CHECK(fa06::default_backward_kernel(96, t, 0, 90) == "gpu_v3");
    CHECK(fa06::default_backward_kernel(128, t, 0, 90) == at128);
    CHECK(fa06::default_backward_kernel(192, t, 0, 90) == "gpu_v3");
    CHECK(fa06::default_backward_kernel(256, t, 0, 90) == "gpu_v3");
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
          // Above d = 128 only gpu_v3 is compiled; gpu_v4 runs only at 128 on sm_90.
          if (D > 128) CHECK(pl.runs.rfind("gpu_v3", 0) == 0);
          if (pl.runs.rfind("gpu_v4", 0) == 0) CHECK((D == 128 && sm == 90));
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

// Issue 34: the CPU backward takes a sliding window and a softcap; the GPU backward refuses them.
TEST_CASE("06 gpu plan: a window or a softcap is refused, naming the flag (the CPU backward takes them)") {
  for (const char* k : {"auto", "gpu_v1", "gpu_v2", "gpu_v4"}) {
    INFO("kernel " << k);
    fa::AttnProblem w = fa::make_problem(1, 2, 1, 64, 64, 64, true);
    w.window_right = 0, w.window_left = 8;
    CHECK_THROWS_WITH_AS(fa06::backward_plan(k, w, fa::DType::bf16), doctest::Contains("--window"), fa::InputError);
    fa::AttnProblem c = fa::make_problem(1, 2, 1, 64, 64, 64, false);
    c.softcap = 30.f;
    CHECK_THROWS_WITH_AS(fa06::backward_plan(k, c, fa::DType::bf16), doctest::Contains("--softcap"), fa::InputError);
  }
}
