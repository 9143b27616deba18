// Stage 06's GPU tests (skipped, exit code 77, on a machine without a GPU):
//   - the backward battery for gpu_v1 (fp32), fed by stage 05 v1's O and LSE, and for the
//     tensor-core backwards gpu_v2, gpu_v3, gpu_v4 and their _det variants (fp16, bf16), fed by stage 05
//     v7's (v5's off sm_90), against the float64 reference backward and stage 01's materialised backward (16-bit:
//     plus what storing values in 16 bits causes)
//   - ragged sizes around the blocks, N_q != N_k, causal (rows that see no key), GQA: gpu_v1 at
//     d = 1 .. 256, gpu_v2 and gpu_v3 at d = 64 and 128 (gpu_v2 at each of its block shapes), gpu_v4
//     at d = 96 and 128
//   - every native width (32, 64, 96, 128, 192, 256) and padded ones between (40, 59, 80, 111, 160,
//     224: zero-padded to the next width, runner_bwd.hpp): auto's choice in fp16 and bf16 on
//     ragged, causal, GQA shapes; gpu_v2 at d = 32 and 96 at each block shape, gpu_v3 at 32, 96,
//     192 and 256, gpu_v4 at 96, 192, 256 and padded to them; what an A100 would run (the plan for
//     sm_80: gpu_v3 in one stage from d = 128)
//   - bit-identical gradients run after run for gpu_v1 (no atomics) and the _det variants (dQ
//     added in key-block order)
//   - scale != 1/sqrt(d), MQA and B > 1 at the tensor-core head dims
//   - the extra GPU memory: D for gpu_v1; D and dQ's float32 accumulator for the others, and the
//     padded copies where d is not a native width
//   - packed variable-length batches (issue 34): gpu_v3 in one launch against gpu_v3 per sequence
//   - the variants (issue 34): the variant backward battery (windows, softcaps) for gpu_v1 in fp32,
//     fp16, bf16 and each tensor-core backward in fp16/bf16 (also at d = 128), ragged shapes whose
//     band edges cross the blocks, bit-identical gradients with a window; O and LSE from stage
//     01's forward on the CPU (the backward alone is judged), and auto's backward fed by stage 05's
//     GPU forward (auto: v13, v1 in fp32), as the program runs it
// No timing here.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "baseline.hpp"
#include "check.hpp"
#include "conformance.hpp"
#include "device_buffer.hpp"
#include "dtype.hpp"
#include "devstats.hpp"
#include "reference.hpp"
#include "stage_06_gpu.hpp"
#include "varlen.hpp"

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

// The battery's head dims (1, 16, 32, 63, 64, 80, 128) all run on the tensor cores now, most of
// them padded to a native width.
TEST_CASE("06 gpu_v2: backward battery in fp16 and bf16, O and LSE from stage 05 v7 (d > 128: gpu_v3)") {
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

// The battery's cases are mostly at d <= 32: the same at the head dims d = 64 and 128, with N
// around the 64-row query steps, at every compiled block shape.
const int64_t kRaggedSizes[][2] = {{1, 1},     {1, 200},  {17, 17},  {63, 63},    {64, 64},    {65, 65},
                                   {127, 129}, {129, 127}, {200, 63}, {63, 200}, {300, 1000}, {1000, 300}};

// gpu_v2 or gpu_v3 (and its _det variant) at d = 64 and 128, at each of its block shapes; gpu_v4
// at d = 96 and 128 (bwd_v4_wgmma.cuh's two widths).
void check_ragged(const std::string& version) {
  if (version == "gpu_v4" && !v4_runs_here()) return;
  const std::vector<int64_t> dims = version == "gpu_v4" ? std::vector<int64_t>{96, 128} : std::vector<int64_t>{64, 128};
  for (const std::string& k : {version, version + "_det"})
    for (int64_t d : dims) {
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

TEST_CASE("06 gpu_v4: ragged N_q != N_k, causal, GQA at d = 96 and 128, fp16 and bf16") { check_ragged("gpu_v4"); }

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

// ---- Every head dim (issue 37): the native widths and padded ones between ----------------------

namespace {
// Ragged sizes around the 64-row query steps and the 64- and 128-key blocks, shorter than
// kRaggedSizes (the float64 references dominate the time at d = 256).
const int64_t kWidthSizes[][2] = {{1, 1}, {17, 17}, {65, 65}, {63, 200}, {200, 63}, {127, 129}, {257, 129}};

// `kernel` (as the plan is asked) on ragged, causal and GQA shapes at head dim d, fp16 and bf16
// (the _det variants: bf16), checked by the battery's rule; planned for compute capability sm.
void check_width(const std::string& kernel, int64_t d, int sm = 0, fa06::BwdShape shape = {},
                 const std::vector<std::vector<int64_t>>& sizes = {}) {
  std::vector<std::vector<int64_t>> nn = sizes;
  if (nn.empty())
    for (auto& s : kWidthSizes) nn.push_back({s[0], s[1]});
  const bool det = kernel.size() > 4 && kernel.substr(kernel.size() - 4) == "_det";
  for (const auto& n : nn)
    for (bool causal : {false, true})
      for (fa::DType t : kHalfTypes) {
        if (det && t == fa::DType::fp16) continue;
        // GQA (4 query heads on 2 kv heads), B = 2; the last head dims dominate (a kernel that
        // drops or misplaces the padded-over columns fails).
        const fa::Case c{kernel + " d = " + std::to_string(d), fa::make_problem(2, 4, 2, n[0], n[1], d, causal),
                         fa::Fill::HighDims};
        const fa06::BwdPlan pl = fa06::backward_plan(kernel, c.p, t, shape, sm);
        INFO(kernel << " runs " << pl.runs << " at d = " << pl.d_kernel << " (" << pl.note << "), Bc " << pl.Bc << ", "
                    << std::string(fa::dtype_name(t)) << (sm ? ", planned for sm_" + std::to_string(sm) : ""));
        REQUIRE(pl.runs != "gpu_v1");
        CHECK(pl.d_kernel == fa06::native_width(d));
        fa::check_backward_case(stage_06_gpu_backward(kernel, t, shape, sm), c, false, stage_06_gpu_forward(t),
                                v2_storage(t));
      }
}
}  // namespace

TEST_CASE("06 gpu widths: auto at d = 32, 40, 59, 64, 80, 96 (native and padded), fp16 and bf16, ragged, causal, GQA") {
  for (int64_t d : {32, 40, 59, 64, 80, 96}) check_width("auto", d);
}

TEST_CASE("06 gpu widths: auto at d = 111, 128, 160, 192, 224, 256 (native and padded), fp16 and bf16, ragged, causal, GQA") {
  for (int64_t d : {111, 128, 160, 192, 224, 256}) check_width("auto", d);
}

TEST_CASE("06 gpu widths: gpu_v2 at d = 32 and 96 at every block shape, and padded d = 8, 80 (_det: bf16)") {
  for (const char* k : {"gpu_v2", "gpu_v2_det"}) {
    for (int64_t d : {32, 96})
      for (const fa06::BwdShape& sh : fa06::bwd_shapes(d)) check_width(k, d, 0, sh);
    for (int64_t d : {8, 80}) check_width(k, d);
  }
}

TEST_CASE("06 gpu widths: gpu_v3 at d = 32, 96, 192 and 256, and padded d = 16, 150, 200 (_det: bf16)") {
  for (const char* k : {"gpu_v3", "gpu_v3_det"})
    for (int64_t d : {32, 96, 192, 256, 16, 150, 200}) check_width(k, d);
}

TEST_CASE("06 gpu widths: gpu_v4 at d = 96, 192 and 256 (at 192, 256: two warpgroups sharing 64 keys), and padded d = 72, 80, 150, 200, 224 (_det: bf16)") {
  if (!v4_runs_here()) return;
  for (const char* k : {"gpu_v4", "gpu_v4_det"})
    for (int64_t d : {96, 192, 256, 72, 80, 150, 200, 224}) {
      CHECK(fa06::backward_plan(k, fa::make_problem(1, 1, 1, 8, 8, d, false), fa::DType::bf16).runs == k);
      check_width(k, d);
    }
}

// One small problem per width and variant, for compute-sanitizer (memcheck, racecheck, synccheck):
// GQA, ragged N_q != N_k across the 64-key blocks and the 64-row steps, causal and a window with a
// softcap, two key blocks per kv head so that dQ's additions from two blocks meet.
TEST_CASE("06 gpu widths: gpu_v4 at d = 96, 192 and 256 on one small problem each (for compute-sanitizer)") {
  if (!v4_runs_here()) return;
  for (const char* k : {"gpu_v4", "gpu_v4_det"})
    for (int64_t d : {96, 192, 256})
      for (int variant = 0; variant < 2; ++variant) {
        fa::AttnProblem p = fa::make_problem(1, 4, 2, 100, 130, d, variant == 0);
        if (variant == 1) p.window_left = 40, p.window_right = 10, p.softcap = 20.f;
        const fa::Case c{std::string(k) + " small", p, variant == 1 ? fa::Fill::Logits30 : fa::Fill::HighDims};
        INFO(k << " d = " << d << " variant " << variant);
        CHECK(fa06::backward_plan(k, p, fa::DType::bf16).runs == k);
        fa::check_backward_case(stage_06_gpu_backward(k, fa::DType::bf16), c, false, stage_06_gpu_forward(fa::DType::bf16),
                                v2_storage(fa::DType::bf16));
      }
}

// On an H200 the plan for sm_80 runs what an A100 would: gpu_v3 with one buffer of Q_i and dO_i
// from d = 128 on (two do not fit its 163 KiB), auto's A100 choices (gpu_v2 at d = 128).
TEST_CASE("06 gpu widths: the sm_80 plan (gpu_v3 in one stage at d >= 128, auto's choices) at d = 100, 128, 192, 256") {
  for (int64_t d : {128, 192, 256}) CHECK(fa06::backward_plan("gpu_v3", fa::make_problem(1, 1, 1, 8, 8, d, false), fa::DType::bf16, {}, 80).stages == 1);
  const std::vector<std::vector<int64_t>> sizes = {{1, 1}, {65, 65}, {200, 63}, {127, 129}};
  for (const char* k : {"gpu_v3", "gpu_v3_det", "auto", "gpu_v4"})
    for (int64_t d : {100, 128, 192, 256}) check_width(k, d, 80, {}, sizes);
}

TEST_CASE("06 gpu widths: scale 0.3, MQA (8 heads, 1 kv head), B = 3 at padded d = 40, 80, 160 and native 192, 256") {
  for (const char* k : {"auto", "gpu_v2", "gpu_v3", "gpu_v4"})
    for (int64_t d : {40, 80, 160, 192, 256})
      for (bool causal : {false, true}) {
        fa::AttnProblem p = fa::make_problem(3, 8, 1, 100, 150, d, causal);
        p.scale = 0.3f;
        const fa::Case c{std::string(k) + " scale/MQA/batch", p, fa::Fill::Normal};
        INFO(k << " d = " << d << " runs " << fa06::backward_plan(k, p, fa::DType::bf16).runs);
        fa::check_backward_case(stage_06_gpu_backward(k, fa::DType::bf16), c, false, stage_06_gpu_forward(fa::DType::bf16),
                                v2_storage(fa::DType::bf16));
      }
}

TEST_CASE("06 gpu widths: _det variants bit-identical over 10 runs at padded d = 40, 80 and d = 160, 256 (64 keys a block)") {
  for (const char* k : {"gpu_v2_det", "gpu_v3_det", "gpu_v4_det"})
    for (const fa::AttnProblem& p : {fa::make_problem(2, 4, 1, 301, 257, 40, true), fa::make_problem(1, 4, 2, 200, 333, 80, false),
                                     fa::make_problem(1, 4, 2, 300, 400, 160, true), fa::make_problem(1, 2, 2, 333, 200, 256, false)}) {
      const fa::DType t = fa::DType::bf16;
      const fa06::BwdPlan pl = fa06::backward_plan(k, p, t);
      INFO(k << " " << p.describe() << " runs " << pl.runs << " at d = " << pl.d_kernel);
      CHECK(pl.runs.substr(pl.runs.size() - 4) == "_det");
      fa::Inputs in = fa::random_inputs(p, 3);
      fa::add_grad_output(in, "", 4);
      const fa::ForwardRun fwd = fa::run_forward(stage_06_gpu_forward(t), in);
      const fa::BackwardFn f = stage_06_gpu_backward(k, t);
      const fa::BackwardRun a = fa::run_backward(f, in, fwd);
      for (int rep = 1; rep < 10; ++rep) {
        const fa::BackwardRun b = fa::run_backward(f, in, fwd);
        CHECK(fa::same_bits(a.dQ, b.dQ));
        CHECK(fa::same_bits(a.dK, b.dK));
        CHECK(fa::same_bits(a.dV, b.dV));
      }
    }
}

TEST_CASE("06 gpu widths: extra GPU memory of a padded run is the plan's: D, dQacc at the native width, the copies") {
  const fa::DType t = fa::DType::fp16;
  for (int64_t d : {40, 80, 160, 256})
    for (const char* k : {"auto", "gpu_v2", "gpu_v3_det", "gpu_v4_det"}) {
      const fa::AttnProblem p = fa::make_problem(2, 4, 2, 300, 500, d, true);
      fa::Inputs in = fa::random_inputs(p, 2);
      fa::add_grad_output(in, "", 4);
      const fa::ForwardRun fwd = fa::run_forward(stage_06_gpu_forward(t), in);
      const fa06::BwdPlan pl = fa06::backward_plan(k, p, t);
      INFO(k << " d = " << d << " runs " << pl.runs << " at d = " << pl.d_kernel);
      fa::ExtraDeviceMemory mem;
      fa::run_backward(stage_06_gpu_backward(k, t), in, fwd);
      CHECK(mem.peak_bytes() == pl.workspace_bytes);
      const int64_t D = fa06::native_width(d), q_rows = 2 * 4 * 300, kv_rows = 2 * 2 * 500;
      const int64_t turns = pl.runs.substr(pl.runs.size() - 4) == "_det" ? 4 * (2 * 4 * ((300 + 63) / 64) + 1) : 0;
      const int64_t pad = d == D ? 0 : 2 * (2 * q_rows + 4 * kv_rows) * D;
      CHECK(mem.peak_bytes() == 4 * q_rows + 4 * q_rows * D + turns + pad);
    }
}

// ---- The variants (issue 34, docs/math.md section 8): a sliding window and a softcap -------------
//
// The O and LSE the backward consumes come from stage 01's forward on the CPU (it takes both), with
// O rounded to the dtype as a GPU forward stores it (so the battery's baseline sees the O the
// backward receives): the backward is judged alone, whatever stage 05's GPU forward does with the
// variants. One test feeds it that forward (auto), as the program does. Each test says which.

namespace {
// Stage 01's forward (float32, on the CPU) with O stored in dtype t, as a GPU forward stores it.
fa::ForwardFn cpu01_forward(fa::DType t) {
  return [t](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
    fa::baseline_forward(p, Q, K, V, O, LSE);
    for (int64_t e = 0; e < p.q_elems(); ++e) O[e] = fa::round_to(t, O[e]);
  };
}
bool is_det(const std::string& k) { return k.size() > 4 && k.substr(k.size() - 4) == "_det"; }

// `version` and its _det variant on the variant backward battery, fp16 and bf16 (_det: bf16). The
// battery's cases are at d = 16 .. 64 (gpu_v4 falls back there: to gpu_v2, auto's choice), so they
// also run at d = 128, where all three run themselves (real-model inputs keep their own d).
void check_variant_battery(const std::string& version) {
  if (version == "gpu_v4" && !v4_runs_here()) return;
  for (const std::string& k : {version, version + "_det"})
    for (fa::DType t : kHalfTypes) {
      if (is_det(k) && t == fa::DType::fp16) continue;
      INFO(k << " " << std::string(fa::dtype_name(t)));
      fa::check_variant_backward_battery(stage_06_gpu_backward(k, t), false, cpu01_forward(t), v2_storage(t));
      for (fa::Case c : fa::variant_backward_battery()) {
        if (c.fill == fa::Fill::RealL0 || c.fill == fa::Fill::RealL5) continue;
        c.p.d = 128;
        c.name += " at d = 128";
        CHECK(fa06::backward_plan(k, c.p, t).runs == k);
        fa::check_backward_case(stage_06_gpu_backward(k, t), c, false, cpu01_forward(t), v2_storage(t));
      }
    }
}

// Ragged shapes whose band edges cross the kernels' blocks (64 query rows a step, 64 or 128 keys a
// block; gpu_v1: 64 or 32 both): N not a multiple of a block, N_q != N_k both ways (rows that see
// no key with N_q > N_k), GQA, windows narrower than a block, wider, asymmetric, one-sided, with
// causal; a softcap on some. At d = 64 and 128 (gpu_v4: 128), gpu_v2 at each of its block shapes.
struct Window {
  int64_t left, right;
  bool causal;
  float softcap;
};
const int64_t kVariantSizes[][2] = {{300, 1000}, {1000, 300}, {127, 129}, {200, 63}, {65, 65}};
const Window kWindows[] = {{7, 0, true, 0.f},    {100, 37, false, 0.f}, {0, 130, false, 20.f},
                           {-1, 70, false, 0.f}, {200, -1, true, 50.f}, {64, 64, false, 5.f}};

void check_variant_ragged(const std::string& kernel, fa::DType t, std::vector<int64_t> dims = {64, 128}) {
  const bool v1 = kernel == "gpu_v1";
  int cases = 0;  // a dims list whose every width is skipped would check nothing: counted below
  for (int64_t d : dims) {
    if (is_v4(kernel) && d < 96) continue;  // gpu_v4 runs 96 and up (at 64: gpu_v2, tested as itself)
    std::vector<fa06::BwdShape> shapes = {{}};
    if (kernel.rfind("gpu_v2", 0) == 0) shapes = fa06::bwd_shapes(d);
    for (const fa06::BwdShape& sh : shapes)
      for (auto& nn : kVariantSizes)
        for (const Window& w : kWindows) {
          fa::AttnProblem p = fa::make_problem(2, 4, 2, nn[0], nn[1], d, w.causal);
          p.window_left = w.left, p.window_right = w.right, p.softcap = w.softcap;
          const fa::Case c{kernel + " variant shape", p, w.softcap > 0.f ? fa::Fill::Logits30 : fa::Fill::HighDims};
          const fa06::BwdPlan pl = fa06::backward_plan(kernel, p, t, sh);
          INFO(kernel << " runs " << pl.runs << ", Bc " << pl.Bc << ", " << pl.keys_per_warp << " keys a warp, "
                      << std::string(fa::dtype_name(t)));
          CHECK(pl.runs == kernel);
          fa::check_backward_case(stage_06_gpu_backward(kernel, t, sh), c, false, cpu01_forward(t),
                                  v1 ? fa::Storage{t, false} : v2_storage(t));
          ++cases;
        }
  }
  CHECK(cases > 0);
}

// `version` and its _det variant on the ragged shapes, fp16 and bf16 (_det: bf16).
void check_variant_ragged_tc(const std::string& version) {
  if (version == "gpu_v4" && !v4_runs_here()) return;
  for (const std::string& k : {version, version + "_det"})
    for (fa::DType t : kHalfTypes)
      if (!(is_det(k) && t == fa::DType::fp16)) check_variant_ragged(k, t);
}
// gpu_v4 and gpu_v4_det at one of its other widths (96: bwd_v4_wgmma.cuh; 192, 256: bwd_v4_wide.cuh).
void check_variant_ragged_wide(int64_t d) {
  if (!v4_runs_here()) return;
  for (const std::string k : {"gpu_v4", "gpu_v4_det"})
    for (fa::DType t : kHalfTypes)
      if (!(is_det(k) && t == fa::DType::fp16)) check_variant_ragged(k, t, {d});
}
// One kernel alone (gpu_v2's every block shape makes the pair too long for one process).
void check_variant_ragged_one(const std::string& k) {
  for (fa::DType t : kHalfTypes)
    if (!(is_det(k) && t == fa::DType::fp16)) check_variant_ragged(k, t);
}
}  // namespace

TEST_CASE("06 gpu variants: gpu_v1 variant backward battery (windows, softcaps) in fp32, fp16, bf16, O and LSE from stage 01's forward (CPU)") {
  for (fa::DType t : {fa::DType::fp32, fa::DType::fp16, fa::DType::bf16}) {
    INFO("gpu_v1 " << std::string(fa::dtype_name(t)));
    // gpu_v1 multiplies P in float32: only the inputs, O and the gradients are stored in t.
    fa::check_variant_backward_battery(stage_06_gpu_backward("gpu_v1", t), false, cpu01_forward(t), fa::Storage{t, false});
  }
}

TEST_CASE("06 gpu variants: gpu_v2, gpu_v2_det variant backward battery, fp16 and bf16, also at d = 128, O and LSE from stage 01's forward (CPU)") {
  check_variant_battery("gpu_v2");
}
TEST_CASE("06 gpu variants: gpu_v3, gpu_v3_det variant backward battery, fp16 and bf16, also at d = 128, O and LSE from stage 01's forward (CPU)") {
  check_variant_battery("gpu_v3");
}
TEST_CASE("06 gpu variants: gpu_v4, gpu_v4_det variant backward battery, fp16 and bf16, also at d = 128, O and LSE from stage 01's forward (CPU)") {
  check_variant_battery("gpu_v4");
}

TEST_CASE("06 gpu variants: gpu_v1 ragged, band edges across the blocks, GQA, N_q != N_k, fp32 and bf16, O and LSE from stage 01's forward (CPU)") {
  for (fa::DType t : {fa::DType::fp32, fa::DType::bf16}) check_variant_ragged("gpu_v1", t);
}
TEST_CASE("06 gpu variants: gpu_v2 ragged, band edges across the blocks, every block shape, O and LSE from stage 01's forward (CPU)") {
  check_variant_ragged_one("gpu_v2");
}
TEST_CASE("06 gpu variants: gpu_v2_det ragged, band edges across the blocks, every block shape, O and LSE from stage 01's forward (CPU)") {
  check_variant_ragged_one("gpu_v2_det");
}
TEST_CASE("06 gpu variants: gpu_v3, gpu_v3_det ragged, band edges across the blocks, O and LSE from stage 01's forward (CPU)") {
  check_variant_ragged_tc("gpu_v3");
}
TEST_CASE("06 gpu variants: gpu_v4, gpu_v4_det ragged, band edges across the blocks, O and LSE from stage 01's forward (CPU)") {
  check_variant_ragged_tc("gpu_v4");
}

TEST_CASE("06 gpu variants: gpu_v4, gpu_v4_det at d = 96 ragged, band edges across the blocks, O and LSE from stage 01's forward (CPU)") {
  check_variant_ragged_wide(96);
}

TEST_CASE("06 gpu variants: gpu_v4, gpu_v4_det at d = 192 ragged, band edges across the blocks, O and LSE from stage 01's forward (CPU)") {
  check_variant_ragged_wide(192);
}

TEST_CASE("06 gpu variants: gpu_v4, gpu_v4_det at d = 256 ragged, band edges across the blocks, O and LSE from stage 01's forward (CPU)") {
  check_variant_ragged_wide(256);
}

// As the program runs it (--device gpu): the forward on the GPU too, stage 05's auto for a problem
// with a variant (v13 on Hopper; v1 in fp32), and the backward's auto.
TEST_CASE("06 gpu variants: auto variant backward battery in fp32, fp16, bf16, O and LSE from stage 05's forward on the GPU (auto)") {
  for (fa::DType t : {fa::DType::fp32, fa::DType::fp16, fa::DType::bf16}) {
    INFO("auto " << std::string(fa::dtype_name(t)));
    fa::check_variant_backward_battery(stage_06_gpu_backward("auto", t), false, stage_06_gpu_forward(t),
                                       t == fa::DType::fp32 ? fa::Storage{} : v2_storage(t));
  }
}

// The deterministic variants add dQ_i in key-block order from the first key block that sees query
// block i (with a window, not block 0: a wrong first turn would never come, and the kernel hang).
TEST_CASE("06 gpu variants: gpu_v1 and the _det variants bit-identical over 10 runs with a window and a softcap") {
  for (const char* k : {"gpu_v1", "gpu_v2_det", "gpu_v3_det", "gpu_v4_det"})
    for (int64_t d : {64, 128}) {
      if (is_v4(k) && (d != 128 || !v4_runs_here())) continue;
      fa::AttnProblem p = fa::make_problem(2, 4, 2, 700, 1333, d, true);
      p.window_left = 300, p.softcap = 30.f;
      const fa::DType t = std::string(k) == "gpu_v1" ? fa::DType::fp32 : fa::DType::bf16;
      INFO(k << " " << p.describe() << " window 300,0 softcap 30");
      CHECK(fa06::backward_plan(k, p, t).runs == k);
      fa::Inputs in = fa::random_inputs(p, 3);
      fa::add_grad_output(in, "", 4);
      const fa::ForwardRun fwd = fa::run_forward(cpu01_forward(t), in);
      const fa::BackwardFn f = stage_06_gpu_backward(k, t);
      const fa::BackwardRun a = fa::run_backward(f, in, fwd);
      for (int rep = 1; rep < 10; ++rep) {
        const fa::BackwardRun b = fa::run_backward(f, in, fwd);
        CHECK(fa::same_bits(a.dQ, b.dQ));
        CHECK(fa::same_bits(a.dK, b.dK));
        CHECK(fa::same_bits(a.dV, b.dV));
      }
    }
}

// Packed variable-length batches (issue 34): gpu_v3 reads the whole batch in one launch, each key
// block its sequence's offsets (kernels/bwd_v3_split.cuh). Checked against gpu_v3 run once per
// sequence on contiguous [1, H, N, d] copies, which the batteries above check against float64:
// both do the same arithmetic in the same order inside a key block, so dK and dV must be the same
// bits. dQ is added across key blocks by float32 atomics in whatever order the blocks finish: a
// different order of its T = ceil(N_k / Bc) partial sums moves it by at most (T - 1) 2^-24 S, with
// S >= sum_j |scale dS_ij K_jc| (S = scale 2d max|dO| max|V| max|K|: |dS_ij| <= P_ij (|dP_ij| +
// |D_i|), each a length-d dot product), and rounding to 16 bits adds one unit in the last place.
namespace {
double ulp16(fa::DType t, double x) {  // the spacing of fp16 / bf16 numbers at |x|
  int e = 0;
  std::frexp(std::max(std::abs(x), 1e-30), &e);  // |x| = m 2^e, m in [0.5, 1)
  return t == fa::DType::bf16 ? std::ldexp(1.0, e - 1 - 7) : std::ldexp(1.0, std::max(e - 1, -14) - 10);
}
}  // namespace

TEST_CASE("06 gpu_v3: a packed batch in one launch gives the per-sequence gradients (dK, dV bit for bit, dQ to rounding)") {
  const auto offsets = [](const std::vector<int32_t>& lens) {
    std::vector<int32_t> cu{0};
    for (int32_t n : lens) cu.push_back(cu.back() + n);
    return cu;
  };
  // Sequences across several 64-row steps and 64/128-key blocks; one without queries, one without
  // keys, one of a single token; N_q(b) != N_k(b) both ways.
  const fa::VarlenHost v{offsets({700, 1, 0, 300, 129, 5, 64}), offsets({700, 1, 5, 300, 1000, 0, 64})};
  for (int64_t d : {32, 64, 96, 128, 192, 256, 80})
    for (int variant = 0; variant < 3; ++variant)
      for (fa::DType t : kHalfTypes) {
        if (t == fa::DType::fp16 && d != 128 && d != 80) continue;
        fa::AttnProblem tmpl = fa::make_problem(1, 4, 2, 1, 1, d, variant != 0);
        if (variant == 2) tmpl.window_left = 150, tmpl.softcap = 20.f;
        fa::Inputs in = fa::random_varlen_inputs(tmpl, v, uint64_t(1000 * d + 10 * variant + int(t)));
        fa::add_grad_output(in, "", uint64_t(d + variant));
        const fa::AttnProblem& p = in.p;
        INFO("d " << d << " variant " << variant << " " << std::string(fa::dtype_name(t)));
        for (fa::Tensor* x : {&in.Q, &in.K, &in.V, &in.dO}) fa::round_tensor(*x, t);
        // O and LSE: the float64 forward's (any O and LSE serve: both runs read the same ones).
        fa::TensorD O64, L64;
        fa::reference_varlen_forward(p, v, in.Q, in.K, in.V, O64, L64);
        fa::Tensor O = fa::convert<float>(O64), LSE = fa::convert<float>(L64);
        fa::round_tensor(O, t);
        const int64_t eb = fa::dtype_bytes(t);
        const auto upload = [&](const fa::Tensor& x) {
          std::vector<uint8_t> h(size_t(eb * x.numel()));
          fa::encode(t, x.ptr(), x.numel(), h.data());
          fa::DeviceBuffer<uint8_t> g(int64_t(h.size()), fa::Mem::Io);
          FA_CUDA_CHECK(cudaMemcpy(g.get(), h.data(), h.size(), cudaMemcpyHostToDevice));
          return g;
        };
        const auto download = [&](const fa::DeviceBuffer<uint8_t>& g, fa::Tensor& x) {
          std::vector<uint8_t> h(size_t(g.bytes()));
          FA_CUDA_CHECK(cudaMemcpy(h.data(), g.get(), h.size(), cudaMemcpyDeviceToHost));
          fa::decode(t, h.data(), x.numel(), x.ptr());
        };
        const auto upload_f32 = [](const std::vector<float>& x) {
          fa::DeviceBuffer<float> g(int64_t(x.size()), fa::Mem::Io);
          FA_CUDA_CHECK(cudaMemcpy(g.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice));
          return g;
        };
        // One launch on the packed batch, gradients poisoned first.
        fa::Tensor dQ(in.Q.shape), dK(in.K.shape), dV(in.V.shape);
        {
          auto gQ = upload(in.Q), gK = upload(in.K), gV = upload(in.V), gO = upload(O), gdO = upload(in.dO);
          auto gL = upload_f32(LSE.data);
          fa::DeviceBuffer<uint8_t> gdQ(eb * dQ.numel(), fa::Mem::Io), gdK(eb * dK.numel(), fa::Mem::Io),
              gdV(eb * dV.numel(), fa::Mem::Io);
          for (auto* g : {&gdQ, &gdK, &gdV}) FA_CUDA_CHECK(cudaMemset(g->get(), 0xFF, size_t(g->bytes())));
          fa::DeviceBuffer<int32_t> cq(int64_t(v.cu_q.size()), fa::Mem::Io), ck(int64_t(v.cu_k.size()), fa::Mem::Io);
          FA_CUDA_CHECK(cudaMemcpy(cq.get(), v.cu_q.data(), v.cu_q.size() * 4, cudaMemcpyHostToDevice));
          FA_CUDA_CHECK(cudaMemcpy(ck.get(), v.cu_k.data(), v.cu_k.size() * 4, cudaMemcpyHostToDevice));
          fa06::backward_varlen("gpu_v3", p, t, gQ.get(), gK.get(), gV.get(), gO.get(), gdO.get(), gL.get(), gdQ.get(),
                                gdK.get(), gdV.get(), {cq.get(), ck.get(), v.total_q(), v.total_k()}, nullptr);
          FA_CUDA_CHECK(cudaDeviceSynchronize());
          download(gdQ, dQ), download(gdK, dK), download(gdV, dV);
        }
        // gpu_v3 once per sequence on [1, H, N, d] copies; zeros where a sequence has no key or no query.
        fa::Tensor rQ(in.Q.shape), rK(in.K.shape), rV(in.V.shape);
        for (int64_t b = 0; b < v.batch(); ++b) {
          const int64_t t0 = v.cu_q[size_t(b)], n = v.n_q(b), u0 = v.cu_k[size_t(b)], m = v.n_k(b);
          if (n == 0 || m == 0) continue;
          fa::AttnProblem s = p;
          s.B = 1, s.N_q = n, s.N_k = m, s.token_major = false, s.lse_head_stride = 0;
          std::vector<float> ls(size_t(p.H * n));
          for (int64_t h = 0; h < p.H; ++h)
            for (int64_t i = 0; i < n; ++i) ls[size_t(h * n + i)] = LSE[h * v.total_q() + t0 + i];
          auto gQ = upload(fa::gather_rows(in.Q, p.H, p.d, t0, n)), gK = upload(fa::gather_rows(in.K, p.H_kv, p.d, u0, m)),
               gV = upload(fa::gather_rows(in.V, p.H_kv, p.d, u0, m)), gO = upload(fa::gather_rows(O, p.H, p.d, t0, n)),
               gdO = upload(fa::gather_rows(in.dO, p.H, p.d, t0, n));
          auto gL = upload_f32(ls);
          fa::DeviceBuffer<uint8_t> gdQ(eb * s.q_elems(), fa::Mem::Io), gdK(eb * s.kv_elems(), fa::Mem::Io),
              gdV(eb * s.kv_elems(), fa::Mem::Io);
          fa06::backward("gpu_v3", s, t, gQ.get(), gK.get(), gV.get(), gO.get(), gdO.get(), gL.get(), gdQ.get(), gdK.get(),
                         gdV.get(), nullptr);
          FA_CUDA_CHECK(cudaDeviceSynchronize());
          fa::Tensor sq({1, p.H, n, p.d}), sk({1, p.H_kv, m, p.d}), sv({1, p.H_kv, m, p.d});
          download(gdQ, sq), download(gdK, sk), download(gdV, sv);
          fa::scatter_rows(sq, p.H, p.d, t0, n, rQ);
          fa::scatter_rows(sk, p.H_kv, p.d, u0, m, rK);
          fa::scatter_rows(sv, p.H_kv, p.d, u0, m, rV);
        }
        CHECK(fa::same_bits(dK, rK));
        CHECK(fa::same_bits(dV, rV));
        const auto amax = [](const fa::Tensor& x) {
          double a = 0;
          for (float y : x.data) a = std::max(a, double(std::abs(y)));
          return a;
        };
        const double S = p.resolved_scale() * 2.0 * double(p.d) * amax(in.dO) * amax(in.V) * amax(in.K);
        const int64_t T = (p.N_k + 127) / 128;
        const double reorder = double(T - 1) * std::ldexp(1.0, -24) * S;
        int64_t bad = 0;
        for (int64_t e = 0; e < dQ.numel(); ++e) {
          const double a = dQ[e], r = rQ[e];
          if (!(std::abs(a - r) <= ulp16(t, std::max(std::abs(a), std::abs(r))) + reorder)) ++bad;
        }
        CHECK(bad == 0);
      }
}
