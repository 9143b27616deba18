// Stage 06's GPU backward, what needs no GPU (CI runs it): the launch arithmetic of
// fa06::backward_plan and what it refuses.
#include <doctest/doctest.h>

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

TEST_CASE("06 gpu plan: refuses what gpu_v1 cannot run, naming the flag") {
  const fa::AttnProblem p = fa::make_problem(1, 1, 1, 8, 8, 64, false);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v1", p, fa::DType::bf16), doctest::Contains("--dtype"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v9", p, fa::DType::fp32), doctest::Contains("--kernel"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v1", fa::make_problem(1, 1, 1, 8, 8, 257, false), fa::DType::fp32),
                       doctest::Contains("--head-dim"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa06::backward_plan("gpu_v1", fa::make_problem(1, 3, 2, 8, 8, 64, false), fa::DType::fp32),
                       doctest::Contains("--kv-heads"), fa::InputError);
}
