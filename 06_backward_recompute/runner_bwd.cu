// Stage 06's GPU runner (runner_bwd.hpp): launch arithmetic once, in backward_plan(), and the
// three launches of the backward.
#include <algorithm>
#include <climits>
#include <string>

#include "check.hpp"
#include "device_buffer.hpp"
#include "kernels/bwd_v1_fp32.cuh"
#include "runner_bwd.hpp"

namespace fa06 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Shared memory above 48 KiB must be asked for, per kernel, and must fit this GPU (an A100 has
// 163 KiB per block: gpu_v1 at d > ~200 does not fit there).
template <class Kernel>
void set_smem(Kernel* kernel_fn, int64_t bytes) {
  int optin = 0;
  if (!fa::opt_in_smem(kernel_fn, bytes, &optin))
    throw fa::InputError("--head-dim", "blocks whose shared memory fits this GPU's " + std::to_string(optin) + " bytes",
                         std::to_string(bytes) + " bytes");
}

}  // namespace

BwdPlan backward_plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype) {
  if (kernel != "gpu_v1") throw fa::InputError("--kernel", "gpu_v1", "'" + kernel + "'");
  fa::validate(p);
  if (dtype != fa::DType::fp32)
    throw fa::InputError("--dtype", "fp32 (gpu_v1 is the fp32 port of the CPU backward)", fa::dtype_name(dtype));
  if (p.d > 256) throw fa::InputError("--head-dim", "at most 256 for the GPU backward", std::to_string(p.d));
  BwdPlan pl;
  const int64_t B = p.d <= 64 ? 64 : 32;
  pl.Br = std::min(B, p.N_q);
  pl.Bc = std::min(B, p.N_k);
  pl.threads = bwd_v1::kThreads;
  pl.blocks_dkdv = p.B * p.H_kv * ceil_div(p.N_k, pl.Bc);
  pl.blocks_dq = p.B * p.H * ceil_div(p.N_q, pl.Br);
  const int64_t blocks_d = ceil_div(p.lse_elems(), 8);  // row_dots_kernel: 8 rows per block
  if (std::max({pl.blocks_dkdv, pl.blocks_dq, blocks_d}) > INT_MAX)
    throw fa::InputError("--batch/--heads/--seq-q", "at most 2^31 - 1 thread blocks",
                         std::to_string(std::max({pl.blocks_dkdv, pl.blocks_dq, blocks_d})));
  const bwd_v1::Layout L{int(pl.Br), int(pl.Bc), int(p.d)};
  pl.smem_dkdv = 4 * int64_t(L.pass1_floats());
  pl.smem_dq = 4 * int64_t(L.pass2_floats());
  pl.workspace_bytes = 4 * p.lse_elems();
  return pl;
}

void backward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
              const void* K, const void* V, const void* O, const void* dO, const float* LSE, void* dQ,
              void* dK, void* dV, cudaStream_t stream) {
  const BwdPlan pl = backward_plan(kernel, p, dtype);
  const auto* q = static_cast<const float*>(Q);
  const auto* k = static_cast<const float*>(K);
  const auto* v = static_cast<const float*>(V);
  const auto* o = static_cast<const float*>(O);
  const auto* g = static_cast<const float*>(dO);
  const float scale = p.resolved_scale();
  const bwd_v1::Layout L{int(pl.Br), int(pl.Bc), int(p.d)};

  // D = rowsum(dO * O): one warp per row, 8 rows per thread block of 256.
  fa::DeviceBuffer<float> D(p.lse_elems(), fa::Mem::Extra, stream);
  bwd_v1::row_dots_kernel<<<unsigned(ceil_div(p.lse_elems(), 8)), 256, 0, stream>>>(o, g, D.get(), p.lse_elems(),
                                                                                   int(p.d));
  FA_CUDA_CHECK(cudaGetLastError());
  // Pass 1: dK, dV.
  set_smem(bwd_v1::dk_dv_kernel, pl.smem_dkdv);
  bwd_v1::dk_dv_kernel<<<unsigned(pl.blocks_dkdv), unsigned(pl.threads), size_t(pl.smem_dkdv), stream>>>(
      q, k, v, g, LSE, D.get(), static_cast<float*>(dK), static_cast<float*>(dV), p, scale, L,
      ceil_div(p.N_k, pl.Bc));
  FA_CUDA_CHECK(cudaGetLastError());
  // Pass 2: dQ.
  set_smem(bwd_v1::dq_kernel, pl.smem_dq);
  bwd_v1::dq_kernel<<<unsigned(pl.blocks_dq), unsigned(pl.threads), size_t(pl.smem_dq), stream>>>(
      q, k, v, g, LSE, D.get(), static_cast<float*>(dQ), p, scale, L, ceil_div(p.N_q, pl.Br));
  FA_CUDA_CHECK(cudaGetLastError());
  // D is freed (back to the stream-ordered pool) after the kernels that read it.
}

}  // namespace fa06
