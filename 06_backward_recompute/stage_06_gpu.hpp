// Stage 06 on the GPU as the programs, the tests and the tour see it (common/stage.hpp): a stage
// 05 forward (it returns O and LSE) and a GPU backward of runner_bwd.hpp, both behind the host
// adapter (common/cuda/adapter.hpp: upload, run, poison, download).
#pragma once
#include "adapter.hpp"
#include "gpu.hpp"
#include "runner_bwd.hpp"
#include "stage.hpp"
#include "stage_05.hpp"

// The BackwardFn of the GPU backward `asked` (fa06::backward_kernels(); "" = the default for the
// problem's head dim) in `dtype`, gpu_v2 at `shape` (default: the head dim's). A problem it cannot run is refused (fa06::backward_plan throws InputError) before anything touches the GPU.
// The kernel `asked` names, or for "" the default for the problem's head dim on this GPU
// (fa06::default_backward_kernel with the device's shared-memory limit).
inline std::string resolve_backward_kernel(const std::string& asked, const fa::AttnProblem& p, fa::DType t) {
  if (!asked.empty()) return asked;
  const long long smem = fa::gpu_smem_optin_bytes();
  return smem > 0 ? fa06::default_backward_kernel(p.d, t, smem) : fa06::default_backward_kernel(p.d, t);
}

inline fa::BackwardFn stage_06_gpu_backward(const std::string& asked = "gpu_v1", fa::DType t = fa::DType::fp32,
                                            fa06::BwdShape shape = {}) {
  auto pick = [asked, t](const fa::AttnProblem& p) { return resolve_backward_kernel(asked, p, t); };
  fa::BackwardFn on_gpu = fa::gpu_backward(
      [pick, shape](const fa::AttnProblem& p, fa::DType dt, const void* Q, const void* K, const void* V,
                      const void* O, const void* dO, const float* LSE, void* dQ, void* dK, void* dV,
                      cudaStream_t stream) {
        fa06::backward(pick(p), p, dt, Q, K, V, O, dO, LSE, dQ, dK, dV, stream, shape);
      },
      t,
      [pick, shape](const fa::AttnProblem& p, fa::DType dt) {
        return fa06::backward_plan(pick(p), p, dt, shape).workspace_bytes;
      });
  return [=](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
             const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    fa06::backward_plan(pick(p), p, t, shape);
    on_gpu(p, Q, K, V, O, dO, LSE, dQ, dK, dV);
  };
}

// The forward that feeds a GPU backward in `dtype`: stage 05's v1 in fp32, its fastest
// tensor-core version (v7, which runs v5 off sm_90) in fp16/bf16 (v1 at the head dims they do
// not run).
inline fa::ForwardFn stage_06_gpu_forward(fa::DType t) { return stage_05_forward(t == fa::DType::fp32 ? "v1" : "v7", t); }

// The whole stage on the GPU: forward by stage_06_gpu_forward, backward by `kernel` ("" = the
// default for the head dim).
inline fa::Stage stage_06_gpu(const std::string& kernel = "gpu_v1", fa::DType t = fa::DType::fp32) {
  fa::Stage s;
  s.name = "06_backward_recompute";
  const std::string label = !kernel.empty()            ? kernel
                            : t == fa::DType::fp32 ? "gpu_v1"
                                                   : "gpu_v4 at d = 128 (gpu_v3 off sm_90), else gpu_v2";
  s.idea = "backward from O and LSE on the GPU (" + label + ", " + fa::dtype_name(t) +
           "): recompute P block by block, D = rowsum(dO*O)";
  s.forward = stage_06_gpu_forward(t);
  s.backward = stage_06_gpu_backward(kernel, t);
  return s;
}
