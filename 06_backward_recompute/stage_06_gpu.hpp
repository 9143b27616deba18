// Stage 06 on the GPU as the programs, the tests and the tour see it (common/stage.hpp): a stage
// 05 forward (it returns O and LSE) and a GPU backward of runner_bwd.hpp, both behind the host
// adapter (common/cuda/adapter.hpp: upload, run, poison, download).
#pragma once
#include "adapter.hpp"
#include "gpu.hpp"
#include "runner_bwd.hpp"
#include "stage.hpp"
#include "stage_05.hpp"

// The kernel name the plan is asked for: `asked` (fa06::backward_kernels() or "auto"), or "auto"
// for "" (the fastest measured for the problem's head dim and dtype on this GPU,
// fa06::default_backward_kernel; the plan's note says which and why).
inline std::string resolve_backward_kernel(const std::string& asked) {
  return asked.empty() ? "auto" : asked;
}

// The BackwardFn of the GPU backward `asked` (as resolve_backward_kernel) in `dtype`, gpu_v2 at
// `shape` (default: the head dim's), planned for compute capability `sm` (0: this GPU; the tests
// pass 80 to run an A100's choices here). A problem it cannot run is refused (fa06::backward_plan
// throws InputError) before anything touches the GPU.
inline fa::BackwardFn stage_06_gpu_backward(const std::string& asked = "gpu_v1", fa::DType t = fa::DType::fp32,
                                            fa06::BwdShape shape = {}, int sm = 0) {
  const std::string k = resolve_backward_kernel(asked);
  fa::BackwardFn on_gpu = fa::gpu_backward(
      [k, shape, sm](const fa::AttnProblem& p, fa::DType dt, const void* Q, const void* K, const void* V,
                     const void* O, const void* dO, const float* LSE, void* dQ, void* dK, void* dV,
                     cudaStream_t stream) { fa06::backward(k, p, dt, Q, K, V, O, dO, LSE, dQ, dK, dV, stream, shape, sm); },
      t,
      [k, shape, sm](const fa::AttnProblem& p, fa::DType dt) {
        return fa06::backward_plan(k, p, dt, shape, sm).workspace_bytes;
      });
  return [=](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
             const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    fa06::backward_plan(k, p, t, shape, sm);
    on_gpu(p, Q, K, V, O, dO, LSE, dQ, dK, dV);
  };
}

// The same on a packed batch (--cu-seqlens-q/-k): gpu_v3 in one launch (`asked` "auto" or
// "gpu_v3"; backward_plan() refuses the others). The offsets are validated on the host here, where
// they are made (backward_varlen() never reads them on the host).
inline fa::VarlenBackwardFn stage_06_gpu_varlen_backward(const std::string& asked, fa::DType t) {
  const std::string k = resolve_backward_kernel(asked);
  fa::VarlenBackwardFn on_gpu = fa::gpu_backward_varlen(
      [k](const fa::AttnProblem& p, const fa::VarlenHost& v, fa::DType dt, const void* Q, const void* K, const void* V,
          const void* O, const void* dO, const float* LSE, void* dQ, void* dK, void* dV, const int32_t* cu_q,
          const int32_t* cu_k, cudaStream_t stream) {
        fa06::backward_varlen(k, p, dt, Q, K, V, O, dO, LSE, dQ, dK, dV, varlen_view(v, cu_q, cu_k), stream);
      },
      t,
      [k](const fa::AttnProblem& p, const fa::VarlenHost& v, fa::DType dt) {
        return fa06::backward_plan(k, p, dt, {}, 0, varlen_view(v)).workspace_bytes;
      });
  return [=](const fa::AttnProblem& p, const fa::VarlenHost& v, const float* Q, const float* K, const float* V,
             const float* O, const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    fa::validate_varlen(v);
    fa::validate_varlen_problem(p, v);
    fa06::backward_plan(k, p, t, {}, 0, varlen_view(v));
    on_gpu(p, v, Q, K, V, O, dO, LSE, dQ, dK, dV);
  };
}

// The forward that feeds a GPU backward in `dtype`: stage 05's v1 in fp32, its fastest
// tensor-core version (v7, which runs v5 off sm_90) in fp16/bf16 (v1 at the head dims they do
// not run). With a sliding window or a softcap (issue 34), which v7 refuses: stage 05's auto,
// which picks a kernel that takes them (v13 on Hopper, v1 elsewhere; fa05::plan's note says).
inline fa::ForwardFn stage_06_gpu_forward(fa::DType t) {
  const fa::ForwardFn plain = stage_05_forward(t == fa::DType::fp32 ? "v1" : "v7", t);
  const fa::ForwardFn variant = t == fa::DType::fp32 ? plain : stage_05_forward("auto", t);
  return [plain, variant](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
    (p.has_window() || p.softcap > 0.f ? variant : plain)(p, Q, K, V, O, LSE);
  };
}

// The whole stage on the GPU: forward by stage_06_gpu_forward, backward by `kernel` ("" or
// "auto": the fastest measured for the head dim, fa06::default_backward_kernel).
inline fa::Stage stage_06_gpu(const std::string& kernel = "gpu_v1", fa::DType t = fa::DType::fp32) {
  fa::Stage s;
  s.name = "06_backward_recompute";
  const std::string label = !kernel.empty() && kernel != "auto" ? kernel
                            : t == fa::DType::fp32              ? "gpu_v1"
                                                                : "auto: the fastest measured for the head dim";
  s.idea = "backward from O and LSE on the GPU (" + label + ", " + fa::dtype_name(t) +
           "): recompute P block by block, D = rowsum(dO*O)";
  s.forward = stage_06_gpu_forward(t);
  s.backward = stage_06_gpu_backward(kernel, t);
  return s;
}
