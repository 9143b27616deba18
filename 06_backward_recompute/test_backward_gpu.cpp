// Stage 06's GPU tests (skipped, exit code 77, on a machine without a GPU):
//   - the backward battery for gpu_v1, fed by stage 05 v1's O and LSE (the GPU forward), against
//     the float64 reference backward and stage 01's materialised backward
//   - ragged sizes around the 32- and 64-row blocks, N_q != N_k, causal, GQA, d = 1 .. 256
//   - bit-identical gradients run after run (20 runs: no atomics, a fixed order)
//   - the extra GPU memory is D, one float per query row
// No timing here.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "conformance.hpp"
#include "devstats.hpp"
#include "stage_06_gpu.hpp"

TEST_CASE("06 gpu_v1: backward battery, O and LSE from stage 05 v1 on the GPU") {
  fa::check_backward_battery(stage_06_gpu_backward(), false, stage_05_forward("v1", fa::DType::fp32));
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
