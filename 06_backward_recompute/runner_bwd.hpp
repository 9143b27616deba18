// Stage 06's GPU entry point: the backward kernels behind one signature, like stage 05's
// runner.hpp for the forward.
//
//   fa06::backward("gpu_v1", p, DType::fp32, Q, K, V, O, dO, LSE, dQ, dK, dV, stream);  // device pointers
//
// Layout (common/problem.hpp): Q, O, dO, dQ [B,H,N_q,d]; K, V, dK, dV [B,H_kv,N_k,d] in the dtype;
// LSE [B,H,N_q] float32, natural log (-inf for a row that sees no key). Bottom-right causal, GQA,
// any N_q and N_k.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "dtype.hpp"
#include "errors.hpp"
#include "problem.hpp"

namespace fa06 {

// How the backward runs a problem. Pure host arithmetic: no GPU needed (tested in CI).
struct BwdPlan {
  int64_t Br = 0, Bc = 0;            // block sizes, rows
  int64_t threads = 0;               // threads per thread block
  int64_t blocks_dkdv = 0;           // thread blocks of pass 1 (B * H_kv * ceil(N_k / Bc))
  int64_t blocks_dq = 0;             // thread blocks of pass 2 (B * H * ceil(N_q / Br))
  int64_t smem_dkdv = 0, smem_dq = 0;  // shared memory per thread block of each pass, bytes
  int64_t workspace_bytes = 0;       // extra GPU memory: D, one float per query row
};

// Throws fa::InputError for an invalid problem (fa::validate), for a dtype other than fp32
// ("--dtype": gpu_v1 is the fp32 port), for d > 256 ("--head-dim") and for a grid past 2^31 - 1
// thread blocks. Blocks: 64 rows for d <= 64, else 32 (shared memory: at most 201 KiB at d = 256).
BwdPlan backward_plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype);

// Runs the backward on device pointers (layout above) on `stream`, without waiting for it:
// D = rowsum(dO * O), then pass 1 (dK, dV), then pass 2 (dQ); every element of dQ, dK, dV is
// written. Throws as backward_plan(), fa::CudaError when CUDA fails.
void backward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
              const void* K, const void* V, const void* O, const void* dO, const float* LSE, void* dQ,
              void* dK, void* dV, cudaStream_t stream);

}  // namespace fa06
