// Stage 06's GPU tests (skipped, exit code 77, on a machine without a GPU):
//   - the backward battery for gpu_v1 (fp32), fed by stage 05 v1's O and LSE, and for the
//     tensor-core backwards gpu_v2, gpu_v3, gpu_v4 and their _det variants (fp16, bf16), fed by stage 05
//     v7's (v5's off sm_90), against the float64 reference backward and stage 01's materialised backward (16-bit:
//     plus what storing values in 16 bits causes)
//   - ragged sizes around the blocks, N_q != N_k, causal (rows that see no key), GQA: gpu_v1 at
//     d = 1 .. 256, gpu_v2 and gpu_v3 at d = 64 and 128 (gpu_v2 at each of its block shapes), gpu_v4
//     at d = 128
//   - bit-identical gradients run after run for gpu_v1 (no atomics) and the _det variants (dQ
//     added in key-block order)
//   - scale != 1/sqrt(d), MQA and B > 1 at the tensor-core head dims
//   - the extra GPU memory: D for gpu_v1; D and dQ's float32 accumulator for the others
// No timing here.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "devstats.hpp"
#include "stage_06_gpu.hpp"

namespace {
const fa::DType kHalfTypes[] = {fa::DType::fp16, fa::DType::bf16};
// The storage gpu_v2 uses (P and dS multiply in 16 bits), for the battery's baseline.
fa::Storage v2_storage(fa::DType t) { return {t, true}; }
bool is_v4(const std::string& k) { return k.rfind("gpu_v4", 0) == 0; }
// gpu_v4 runs on sm_90 with a build for sm_90a; elsewhere the plan falls back (tested on the host:
// test_backward_gpu_host.cpp) and its GPU tests here are skipped, with a message.
bool v4_runs_here() {
  const bool yes = fa06::backward_plan("gpu_v4", fa::make_problem(1, 1, 1, 64, 64, 128, false), fa::DType::bf16).runs == "gpu_v4";
  if (!yes) MESSAGE("gpu_v4 does not run on this GPU or build (it needs sm_90 and sm_90a code): its cases are skipped");
  return yes;
}
}  // namespace

TEST_CASE("06 gpu_v1: backward battery, O and LSE from stage 05 v1 on the GPU") {
  fa::check_backward_battery(stage_06_gpu_backward(), false, stage_06_gpu_forward(fa::DType::fp32));
}

TEST_CASE("06 gpu_v1: ragged N around the blocks, N_q != N_k, causal, GQA, d = 1 .. 256") {
  const int64_t sizes[][2] = {{1, 1}, {1, 70}, {31, 33}, {64, 64}, {65, 129}, {129, 65}, {200, 37}};
  for (int64_t d : {1, 3, 64, 65, 128, 256})
    for (auto& nn : sizes)
      for (bool causal : {false, true}) {
        const fa::Case c{"gpu_v1 shape", fa::make_problem(2, 4, 2, nn[0], nn[1], d, causal), fa::Fill::HighDims};
        fa::check_backward_case(stage_06_gpu_backward(), c, false, stage_05_forward("v1", fa::DType::fp32));
      }
}

TEST_CASE("06 gpu_v1: bit-identical gradients over 20 runs (deterministic: no atomics)") {
  for (const fa::AttnProblem& p : {fa::make_problem(2, 4, 1, 301, 257, 64, true), fa::make_problem(1, 4, 2, 200, 333, 128, false)}) {
    INFO(p.describe());
    fa::Inputs in = fa::random_inputs(p, 3);
    fa::add_grad_output(in, "", 4);
    const fa::ForwardRun fwd = fa::run_forward(stage_05_forward("v1", fa::DType::fp32), in);
    const fa::BackwardFn f = stage_06_gpu_backward();
    const fa::BackwardRun a = fa::run_backward(f, in, fwd);
    for (int rep = 1; rep < 20; ++rep) {
      const fa::BackwardRun b = fa::run_backward(f, in, fwd);
      CHECK(fa::same_bits(a.dQ, b.dQ));
      CHECK(fa::same_bits(a.dK, b.dK));
      CHECK(fa::same_bits(a.dV, b.dV));
    }
  }
}

TEST_CASE("06 gpu_v1: extra GPU memory is D, one float per query row (the plan's workspace)") {
  const fa::AttnProblem p = fa::make_problem(2, 4, 2, 300, 500, 64, true);
  fa::Inputs in = fa::random_inputs(p, 2);
  fa::add_grad_output(in, "", 4);
  const fa::ForwardRun fwd = fa::run_forward(stage_05_forward("v1", fa::DType::fp32), in);
  fa::ExtraDeviceMemory mem;
  fa::run_backward(stage_06_gpu_backward(), in, fwd);
  CHECK(mem.peak_bytes() == fa06::backward_plan("gpu_v1", p, fa::DType::fp32).workspace_bytes);
  CHECK(mem.peak_bytes() == 4 * p.lse_elems());
}

TEST_CASE("06 gpu_v2: backward battery in fp16 and bf16, O and LSE from stage 05 v7 (other d: gpu_v1)") {
  for (fa::DType t : kHalfTypes) {
    INFO("dtype " << std::string(fa::dtype_name(t)));
    fa::check_backward_battery(stage_06_gpu_backward("gpu_v2", t), false, stage_06_gpu_forward(t), v2_storage(t));
  }
}

TEST_CASE("06 gpu_v4, gpu_v4_det: backward battery in bf16 (gpu_v4 also fp16; d = 64: gpu_v2 runs)") {
  if (!v4_runs_here()) return;
  for (const char* k : {"gpu_v4", "gpu_v4_det"})
    for (fa::DType t : kHalfTypes) {
      if (std::string(k) != "gpu_v4" && t == fa::DType::fp16) continue;
      INFO(k << " " << std::string(fa::dtype_name(t)));
      // The battery's d = 128 cases run the kernel itself (the others: its fallbacks).
      CHECK(fa06::backward_plan(k, fa::make_problem(1, 2, 2, 77, 77, 128, false), t).runs == k);
      fa::check_backward_battery(stage_06_gpu_backward(k, t), false, stage_06_gpu_forward(t), v2_storage(t));
    }
}

TEST_CASE("06 gpu_v2_det, gpu_v3, gpu_v3_det: backward battery in bf16 (gpu_v3 also fp16)") {
  for (const char* k : {"gpu_v2_det", "gpu_v3", "gpu_v3_det"})
    for (fa::DType t : kHalfTypes) {
      if (std::string(k) != "gpu_v3" && t == fa::DType::fp16) continue;
      INFO(k << " " << std::string(fa::dtype_name(t)));
      fa::check_backward_battery(stage_06_gpu_backward(k, t), false, stage_06_gpu_forward(t), v2_storage(t));
    }
}

// The battery's cases are mostly at d = 32 (where gpu_v2 runs gpu_v1): the same at the head dims
// it runs itself, with N around its 64-row query steps, at every compiled block shape.
const int64_t kRaggedSizes[][2] = {{1, 1},     {1, 200},  {17, 17},  {63, 63},    {64, 64},    {65, 65},
                                   {127, 129}, {129, 127}, {200, 63}, {63, 200}, {300, 1000}, {1000, 300}};

// gpu_v2 or gpu_v3 (and its _det variant) at d = 64 and 128, at each of its block shapes; gpu_v4
// at d = 128 (the one it runs).
void check_ragged(const std::string& version) {
  if (version == "gpu_v4" && !v4_runs_here()) return;
  for (const std::string& k : {version, version + "_det"})
    for (int64_t d : {64, 128}) {
      if (version == "gpu_v4" && d != 128) continue;
      std::vector<fa06::BwdShape> shapes = fa06::bwd_shapes(d);
      if (version != "gpu_v2") shapes = {{}};  // one shape, no choice
      for (const fa06::BwdShape& sh : shapes)
        for (auto& nn : kRaggedSizes)
          for (bool causal : {false, true}) {
            const fa::Case c{k + " shape", fa::make_problem(2, 4, 2, nn[0], nn[1], d, causal), fa::Fill::HighDims};
            for (fa::DType t : kHalfTypes) {
              if (k != version && t == fa::DType::fp16) continue;  // the _det variants: bf16
              INFO(k << " Bc " << sh.Bc << ", " << sh.keys_per_warp << " keys a warp, " << std::string(fa::dtype_name(t)));
              const fa06::BwdPlan pl = fa06::backward_plan(k, c.p, t, sh);
              CHECK(pl.runs == k);
              if (sh.Bc) CHECK(pl.Bc == sh.Bc);
              fa::check_backward_case(stage_06_gpu_backward(k, t, sh), c, false, stage_06_gpu_forward(t), v2_storage(t));
            }
          }
    }
}

TEST_CASE("06 gpu_v2: ragged N_q != N_k, causal, GQA at d = 64 and 128, every block shape, fp16 and bf16") {
  check_ragged("gpu_v2");
}

TEST_CASE("06 gpu_v3: ragged N_q != N_k, causal, GQA at d = 64 and 128, fp16 and bf16") { check_ragged("gpu_v3"); }

TEST_CASE("06 gpu_v4: ragged N_q != N_k, causal, GQA at d = 128, fp16 and bf16") { check_ragged("gpu_v4"); }

// The battery's cases with another scale, MQA and B > 1 are at d <= 32 (gpu_v1 runs them): the
// same at d = 64 and 128 for the tensor-core backwards.
TEST_CASE("06 gpu_v2, gpu_v3, gpu_v4: scale 0.3, MQA (8 heads, 1 kv head), B = 3 at d = 64 and 128 (gpu_v4: 128)") {
  for (const char* k : {"gpu_v2", "gpu_v3", "gpu_v3_det", "gpu_v4", "gpu_v4_det"})
    for (int64_t d : {64, 128})
      for (bool causal : {false, true}) {
        if (is_v4(k) && (d != 128 || !v4_runs_here())) continue;
        fa::AttnProblem p = fa::make_problem(3, 8, 1, 100, 150, d, causal);
        p.scale = 0.3f;
        const fa::Case c{std::string(k) + " scale/MQA/batch", p, fa::Fill::Normal};
        INFO(k << " d = " << d);
        CHECK(fa06::backward_plan(k, p, fa::DType::bf16).runs == k);
        fa::check_backward_case(stage_06_gpu_backward(k, fa::DType::bf16), c, false,
                                stage_06_gpu_forward(fa::DType::bf16), v2_storage(fa::DType::bf16));
      }
}

TEST_CASE("06 gpu_v2_det, gpu_v3_det, gpu_v4_det: bit-identical gradients over 20 runs (dQ added in key-block order)") {
  for (const char* k : {"gpu_v2_det", "gpu_v3_det", "gpu_v4_det"})
  for (const fa::AttnProblem& p :
       {fa::make_problem(2, 4, 1, 301, 257, 64, true), fa::make_problem(1, 4, 2, 700, 1333, 128, false),
        fa::make_problem(1, 4, 2, 1000, 700, 128, true)})
    for (const fa06::BwdShape& sh : std::string(k) == "gpu_v2_det" ? fa06::bwd_shapes(p.d) : std::vector<fa06::BwdShape>{{}}) {
      INFO(k << " " << p.describe() << " Bc " << sh.Bc << ", " << sh.keys_per_warp << " keys a warp");
      const fa::DType t = fa::DType::bf16;
      if (is_v4(k) && (p.d != 128 || !v4_runs_here())) continue;  // d = 64: gpu_v2_det runs, tested above
      CHECK(fa06::backward_plan(k, p, t, sh).runs == k);
      fa::Inputs in = fa::random_inputs(p, 3);
      fa::add_grad_output(in, "", 4);
      const fa::ForwardRun fwd = fa::run_forward(stage_06_gpu_forward(t), in);
      const fa::BackwardFn f = stage_06_gpu_backward(k, t, sh);
      const fa::BackwardRun a = fa::run_backward(f, in, fwd);
      for (int rep = 1; rep < 20; ++rep) {
        const fa::BackwardRun b = fa::run_backward(f, in, fwd);
        CHECK(fa::same_bits(a.dQ, b.dQ));
        CHECK(fa::same_bits(a.dK, b.dK));
        CHECK(fa::same_bits(a.dV, b.dV));
      }
    }
}

TEST_CASE("06 gpu_v2, gpu_v3, gpu_v4: extra GPU memory is D and dQ's float32 accumulator (_det: + one int per query block)") {
  const fa::AttnProblem p = fa::make_problem(2, 4, 2, 300, 500, 128, true);
  const fa::DType t = fa::DType::bf16;
  fa::Inputs in = fa::random_inputs(p, 2);
  fa::add_grad_output(in, "", 4);
  const fa::ForwardRun fwd = fa::run_forward(stage_06_gpu_forward(t), in);
  for (const char* name : {"gpu_v2", "gpu_v2_det", "gpu_v3", "gpu_v3_det", "gpu_v4", "gpu_v4_det"}) {
    const std::string k = name;
    INFO(k);
    if (is_v4(k) && !v4_runs_here()) continue;
    CHECK(fa06::backward_plan(k, p, t).runs == k);
    fa::ExtraDeviceMemory mem;
    fa::run_backward(stage_06_gpu_backward(k, t), in, fwd);
    CHECK(mem.peak_bytes() == fa06::backward_plan(k, p, t).workspace_bytes);
    const int64_t turns = k.size() > 4 && k.substr(k.size() - 4) == "_det" ? 4 * (2 * 4 * ((300 + 63) / 64) + 1) : 0;
    CHECK(mem.peak_bytes() == 4 * p.lse_elems() + 4 * p.q_elems() + turns);
  }
}
