// Stage 06's GPU entry point: the backward kernels behind one signature, like stage 05's
// runner.hpp for the forward.
//
//   fa06::backward("gpu_v2", p, DType::bf16, Q, K, V, O, dO, LSE, dQ, dK, dV, stream);  // device pointers
//
// Layout (common/problem.hpp): Q, O, dO, dQ [B,H,N_q,d]; K, V, dK, dV [B,H_kv,N_k,d] in the dtype;
// LSE [B,H,N_q] float32, natural log (-inf for a row that sees no key). Bottom-right causal, GQA,
// any N_q and N_k. Pointers 16-byte aligned, as cudaMalloc's are (the tensor-core kernels copy
// rows with 16-byte cp.async and add to dQ in 8-byte pairs).
//
// The kernels (backward_kernels() lists them):
//   gpu_v1      kernels/bwd_v1_smem.cuh: the CPU backward's two passes in shared memory, fp32
//               arithmetic; any dtype, d <= 256; deterministic (no atomics)
//   gpu_v2      kernels/bwd_v2_mma.cuh: FA2 Algorithm 2 on the tensor cores, fp16/bf16 at d = 64
//               and 128 (else it falls back to gpu_v1); dQ by fp32 atomic additions
//   gpu_v2_det  the same kernel with dQ added in key-block order: bit-identical run after run
//   gpu_v3      kernels/bwd_v3_split.cuh: gpu_v2 with P^T and dS^T through shared memory, so the
//               products before and after them split the work among warps differently
//   gpu_v3_det  the same with dQ in key-block order
//   gpu_v4      kernels/bwd_v4_wgmma.cuh: gpu_v3's step on Hopper's wgmma, two warpgroups of 64
//               keys, operands read from shared memory by the tensor cores; bf16/fp16 at d = 128
//               on sm_90a (d = 64: gpu_v2 runs; other GPUs or builds: gpu_v3)
//   gpu_v4_det  the same with dQ in key-block order
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtype.hpp"
#include "errors.hpp"
#include "problem.hpp"

namespace fa06 {

// The GPU backward kernels, in course order.
const std::vector<std::string>& backward_kernels();
// The fastest on the H200 for the head dim and dtype (bench_06_backward_gpu, 2026-12-01):
// gpu_v1 in fp32, gpu_v4 at d = 128, else gpu_v2 (its 32-keys-a-warp shape at d = 64). gpu_v4
// needs sm_90 (sm: compute capability, major * 10 + minor; 0 = the current device's, none:
// assumed able) and a build for sm_90a; elsewhere gpu_v3 at d = 128, which needs 173 KiB of
// shared memory: where a block may opt in to less (smem_limit, bytes; an A100 has 163 KiB), gpu_v2.
std::string default_backward_kernel(int64_t d, fa::DType dtype, int64_t smem_limit = 227 * 1024, int sm = 0);

// gpu_v2's block shape: Bc keys per thread block, keys_per_warp of them per warp (16 or 32: one or
// two mma row tiles), so Bc / keys_per_warp warps. 0 = the default for the head dim.
struct BwdShape {
  int64_t Bc = 0, keys_per_warp = 0;
};
// The shapes gpu_v2 is compiled for at head dim d (empty for other d), and its default (the
// sweep's choice, BM_bwd_shape). 32 keys a warp only at d = 64: at d = 128 its dK and dV alone
// would take 256 registers a lane.
std::vector<BwdShape> bwd_shapes(int64_t d);
BwdShape default_bwd_shape(int64_t d);

// How the backward runs a problem. Pure host arithmetic: no GPU needed (tested in CI).
struct BwdPlan {
  std::string runs;                  // the kernel that runs: the one asked for or a fallback (gpu_v1; for gpu_v4
                                     // gpu_v2 or gpu_v3, with the same _det suffix)
  std::string note;                  // why it fell back ("" if it did not)
  int64_t Br = 0, Bc = 0;            // block sizes, rows
  int64_t keys_per_warp = 0;         // keys each warp owns (gpu_v2, gpu_v3: 16 or 32; gpu_v4: 16 in its
                                     // warpgroup's 64); 0 for gpu_v1
  int64_t threads = 0;               // threads per thread block (of the main kernels)
  int64_t blocks_dkdv = 0;           // thread blocks over key blocks (B * H_kv * ceil(N_k / Bc))
  int64_t blocks_dq = 0;             // gpu_v1's pass 2 (B * H * ceil(N_q / Br)); 0 for the others
  int64_t smem_dkdv = 0, smem_dq = 0;  // shared memory per thread block of each kernel, bytes
  // Extra GPU memory, bytes: D (one float per query row); gpu_v2, gpu_v3 and gpu_v4 add dQ's float32
  // accumulator (4 B H N_q d bytes), their _det variants one int per (b, h, query block) and one
  // more (the start counter) besides.
  int64_t workspace_bytes = 0;
};

// Throws fa::InputError for an invalid problem (fa::validate), an unknown kernel ("--bwd-kernel"),
// d > 256 ("--head-dim"), a grid past 2^31 - 1 thread blocks, or a shape gpu_v2 is not compiled
// for (argument "shape": bwd_shapes(d); gpu_v1, gpu_v3 and gpu_v4 take none). gpu_v1 blocks: 64 rows for d <= 64,
// else 32 (shared memory: at most 201 KiB at d = 256). sm: the GPU's compute capability (major * 10 +
// minor) for gpu_v4's choice (it needs 90 and a build for sm_90a; else gpu_v3 runs, and the note says
// why); 0: the current device's (none: assumed to be able).
BwdPlan backward_plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, BwdShape shape = {},
                     int sm = 0);

// Runs the backward on device pointers (layout above) on `stream`, without waiting for it:
// D = rowsum(dO * O), then the kernels of the plan; every element of dQ, dK, dV is written.
// Throws as backward_plan(), fa::CudaError when CUDA fails.
void backward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
              const void* K, const void* V, const void* O, const void* dO, const float* LSE, void* dQ,
              void* dK, void* dV, cudaStream_t stream, BwdShape shape = {});

}  // namespace fa06
