// Stage 06 on the GPU as the programs, the tests and the tour see it (common/stage.hpp): stage
// 05's v1 forward (fp32, it returns O and LSE) and the GPU backward of runner_bwd.hpp, both behind
// the host adapter (common/cuda/adapter.hpp: upload, run, poison, download).
#pragma once
#include "adapter.hpp"
#include "runner_bwd.hpp"
#include "stage.hpp"
#include "stage_05.hpp"

// The BackwardFn of the GPU backward `kernel` ("gpu_v1") in fp32. A problem it cannot run is
// refused (fa06::backward_plan throws InputError) before anything touches the GPU.
inline fa::BackwardFn stage_06_gpu_backward(const std::string& kernel = "gpu_v1") {
  const fa::DType t = fa::DType::fp32;
  fa::BackwardFn on_gpu = fa::gpu_backward(
      [kernel](const fa::AttnProblem& p, fa::DType dt, const void* Q, const void* K, const void* V,
               const void* O, const void* dO, const float* LSE, void* dQ, void* dK, void* dV,
               cudaStream_t stream) { fa06::backward(kernel, p, dt, Q, K, V, O, dO, LSE, dQ, dK, dV, stream); },
      t, [kernel](const fa::AttnProblem& p, fa::DType dt) { return fa06::backward_plan(kernel, p, dt).workspace_bytes; });
  return [=](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
             const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    fa06::backward_plan(kernel, p, t);
    on_gpu(p, Q, K, V, O, dO, LSE, dQ, dK, dV);
  };
}

// The whole stage on the GPU: forward by stage 05 v1, backward by `kernel`, fp32.
inline fa::Stage stage_06_gpu(const std::string& kernel = "gpu_v1") {
  fa::Stage s;
  s.name = "06_backward_recompute";
  s.idea = "backward from O and LSE on the GPU (" + kernel + "): recompute P block by block, D = rowsum(dO*O)";
  s.forward = stage_05_forward("v1", fa::DType::fp32);
  s.backward = stage_06_gpu_backward(kernel);
  return s;
}
