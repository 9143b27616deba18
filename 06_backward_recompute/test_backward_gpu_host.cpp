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

TEST_CASE("06 gpu plan: gpu_v2 takes 64 query rows a step, 64 or 128 keys a block, 16 or 32 a warp") {
  CHECK(fa06::bwd_shapes(64).size() == 3);
  CHECK(fa06::bwd_shapes(128).size() == 2);  // 32 keys a warp would need 256 accumulator registers
  CHECK(fa06::bwd_shapes(96).empty());
  for (const char* k : {"gpu_v2", "gpu_v2_det"})
    for (int64_t d : {64, 128}) {
      std::vector<fa06::BwdShape> shapes = fa06::bwd_shapes(d);
      shapes.push_back({});  // the default
      for (const fa06::BwdShape& asked : shapes) {
        const fa06::BwdShape sh = asked.Bc ? asked : fa06::default_bwd_shape(d);
        INFO(k << " d = " << d << " Bc " << sh.Bc << " keys a warp " << sh.keys_per_warp);
        const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1000, 300, d, true);
        const fa06::BwdPlan pl = fa06::backward_plan(k, p, fa::DType::bf16, asked);
        CHECK(pl.runs == k);
        CHECK(pl.note.empty());
        CHECK(pl.Br == 64);
        CHECK(pl.Bc == sh.Bc);
        CHECK(pl.keys_per_warp == sh.keys_per_warp);
        CHECK(pl.threads == 32 * sh.Bc / sh.keys_per_warp);
        CHECK(pl.blocks_dkdv == 2 * 2 * ((300 + sh.Bc - 1) / sh.Bc));  // per (b, kv head, key block)
        CHECK(pl.blocks_dq == 0);                                      // no second pass
        // K_j, V_j, two Q_i and two dO_i tiles (pitch d + 8), dS^T (pitch 72), LSE and D twice.
        CHECK(pl.smem_dkdv == (2 * sh.Bc + 4 * 64) * (d + 8) * 2 + sh.Bc * 72 * 2 + 4 * 64 * 4);
        CHECK(pl.smem_dkdv <= 227 * 1024);
        const int64_t turns = std::string(k) == "gpu_v2_det" ? 4 * (2 * 8 * ((1000 + 63) / 64) + 1) : 0;
        CHECK(pl.workspace_bytes == 4 * 2 * 8 * 1000 + 4 * p.q_elems() + turns);  // D, dQacc (+ turns)
      }
    }
}

TEST_CASE("06 gpu plan: gpu_v3 takes 128 keys a block, 8 warps, and P^T in shared memory besides dS^T") {
  for (const char* k : {"gpu_v3", "gpu_v3_det"})
    for (int64_t d : {64, 128}) {
      INFO(k << " d = " << d);
      const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1000, 300, d, true);
      const fa06::BwdPlan pl = fa06::backward_plan(k, p, fa::DType::fp16);
      CHECK(pl.runs == k);
      CHECK(pl.Br == 64);
      CHECK(pl.Bc == 128);
      CHECK(pl.threads == 256);
      CHECK(pl.blocks_dkdv == 2 * 2 * 3);
      CHECK(pl.smem_dkdv == (2 * 128 + 4 * 64) * (d + 8) * 2 + 2 * 128 * 72 * 2 + 4 * 64 * 4);
      CHECK(pl.smem_dkdv <= 227 * 1024);
      const int64_t turns = std::string(k) == "gpu_v3_det" ? 4 * (2 * 8 * ((1000 + 63) / 64) + 1) : 0;
      CHECK(pl.workspace_bytes == 4 * 2 * 8 * 1000 + 4 * p.q_elems() + turns);
      CHECK_THROWS_WITH_AS(fa06::backward_plan(k, p, fa::DType::fp16, {128, 32}), doctest::Contains("shape (fa06::BwdShape)"),
                           fa::InputError);
    }
  CHECK(fa06::backward_plan("gpu_v3", fa::make_problem(1, 2, 2, 100, 100, 32, false), fa::DType::bf16).runs == "gpu_v1");
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

TEST_CASE("06 gpu plan: gpu_v4 falls back, and says so: gpu_v2 at d = 64, gpu_v3 off sm_90, gpu_v1 in fp32") {
  const fa::AttnProblem p64 = fa::make_problem(1, 2, 2, 100, 100, 64, false), p128 = fa::make_problem(1, 2, 2, 100, 100, 128, false);
  for (const std::string k : {"gpu_v4", "gpu_v4_det"}) {
    const std::string det = k == "gpu_v4_det" ? "_det" : "";
    INFO(k);
    fa06::BwdPlan pl = fa06::backward_plan(k, p64, fa::DType::bf16, {}, 90);
    CHECK(pl.runs == "gpu_v2" + det);
    CHECK(pl.keys_per_warp == 32);  // gpu_v2's own d = 64 shape
    CHECK(pl.note.find("d = 128 only") != std::string::npos);
    pl = fa06::backward_plan(k, p128, fa::DType::fp16, {}, 80);
    CHECK(pl.runs == "gpu_v3" + det);
    CHECK(pl.note.find("sm_80") != std::string::npos);
    CHECK(pl.smem_dkdv == fa06::backward_plan("gpu_v3", p128, fa::DType::fp16).smem_dkdv);
    pl = fa06::backward_plan(k, p128, fa::DType::fp32, {}, 90);
    CHECK(pl.runs == "gpu_v1");
    CHECK(pl.note.find("gpu_v1") != std::string::npos);
  }
}

TEST_CASE("06 gpu plan: the default backward per head dim and dtype (the benchmark's fastest)") {
  CHECK(fa06::default_backward_kernel(64, fa::DType::fp32) == "gpu_v1");
  CHECK(fa06::default_backward_kernel(128, fa::DType::fp32) == "gpu_v1");
  CHECK(fa06::default_backward_kernel(64, fa::DType::bf16) == "gpu_v2");
  // gpu_v4 on sm_90 where the build has sm_90a code (the course's builds do; the plan says whether).
  const bool v4_built =
      fa06::backward_plan("gpu_v4", fa::make_problem(1, 2, 2, 100, 100, 128, false), fa::DType::bf16, {}, 90).runs == "gpu_v4";
  CHECK(fa06::default_backward_kernel(128, fa::DType::bf16, 227 * 1024, 90) == (v4_built ? "gpu_v4" : "gpu_v3"));
  CHECK(fa06::default_backward_kernel(128, fa::DType::fp16, 227 * 1024, 90) == (v4_built ? "gpu_v4" : "gpu_v3"));
  CHECK(fa06::default_backward_kernel(128, fa::DType::bf16, 227 * 1024, 80) == "gpu_v3");
  CHECK(fa06::default_backward_kernel(128, fa::DType::fp16, 227 * 1024, 89) == "gpu_v3");
  CHECK(fa06::default_backward_kernel(128, fa::DType::bf16, 163 * 1024, 80) == "gpu_v2");  // an A100: gpu_v3 does not fit
  CHECK(fa06::backward_plan("gpu_v2", fa::make_problem(1, 2, 2, 100, 100, 64, false), fa::DType::bf16).keys_per_warp == 32);
}

TEST_CASE("06 gpu plan: gpu_v2 falls back to gpu_v1 for fp32 and for d other than 64 and 128, and says so") {
  for (auto [d, t] : {std::pair<int64_t, fa::DType>{64, fa::DType::fp32}, {32, fa::DType::bf16}, {96, fa::DType::fp16}}) {
    const fa06::BwdPlan pl = fa06::backward_plan("gpu_v2", fa::make_problem(1, 2, 2, 100, 100, d, false), t);
    CHECK(pl.runs == "gpu_v1");
    CHECK(pl.note.find("gpu_v1") != std::string::npos);
    CHECK(pl.blocks_dq > 0);
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
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v1", fa::make_problem(1, 1, 1, 8, 8, 257, false), fa::DType::fp32),
                       doctest::Contains("--head-dim"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v1", fa::make_problem(1, 3, 2, 8, 8, 64, false), fa::DType::fp32),
                       doctest::Contains("--kv-heads"), fa::InputError);
}
