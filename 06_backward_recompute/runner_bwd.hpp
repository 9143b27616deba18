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
// The kernels (backward_kernels() lists them; "auto" picks one, default_backward_kernel):
//   gpu_v1      kernels/bwd_v1_smem.cuh: the CPU backward's two passes in shared memory, fp32
//               arithmetic; any dtype, any d <= 256 as it is; deterministic (no atomics)
//   gpu_v2      kernels/bwd_v2_mma.cuh: FA2 Algorithm 2 on the tensor cores, fp16/bf16, compiled
//               for d = 32, 64, 96 and 128 (above: gpu_v3 runs; fp32: gpu_v1); dQ by fp32
//               atomic additions
//   gpu_v2_det  the same kernel with dQ added in key-block order: bit-identical run after run
//   gpu_v3      kernels/bwd_v3_split.cuh: gpu_v2 with P^T and dS^T through shared memory, so the
//               products before and after them split the work among warps differently; d = 32,
//               64, 96, 128 (128 keys a block), 192 and 256 (64 keys a block)
//   gpu_v3_det  the same with dQ in key-block order
//   gpu_v4      kernels/bwd_v4_wgmma.cuh: gpu_v3's step on Hopper's wgmma, two warpgroups of 64
//               keys, operands read from shared memory by the tensor cores; bf16/fp16 at d = 96
//               and 128 on sm_90a; at d = 192 and 256 kernels/bwd_v4_wide.cuh, the two warpgroups
//               sharing 64 keys and splitting the head dims (other d: auto's choice of
//               gpu_v2/gpu_v3; other GPUs or builds: gpu_v3)
//   gpu_v4_det  the same with dQ in key-block order
//
// Head dims (issue 37): the tensor-core kernels are compiled for the native widths 32, 64, 96,
// 128, 192 and 256 only. Any other d runs the next native width D with zero-padded columns:
// Q, K, V, dO are copied into workspace buffers of D columns (the extra ones zero), the kernel
// runs at D with the real d's scale, and dQ, dK, dV come back without the extra columns. Zero
// columns change no score q . k, and LSE and D = rowsum(dO * O) are those of the real d; the
// extra gradient columns are thrown away. The plan says so (BwdPlan::d_kernel, note, pad_bytes).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dtype.hpp"
#include "errors.hpp"
#include "problem.hpp"
#include "varlen.hpp"

namespace fa06 {

// The GPU backward kernels, in course order ("auto" is not one of them: it names one).
const std::vector<std::string>& backward_kernels();

// The head dims the tensor-core kernels are compiled for, ascending: 32, 64, 96, 128, 192, 256.
const std::vector<int64_t>& native_widths();
// The native width a tensor-core kernel runs head dim d at: the smallest one >= d (1 <= d <= 256;
// throws fa::InputError "--head-dim" above 256).
int64_t native_width(int64_t d);

// Bytes of shared memory a thread block may opt in to on a GPU of compute capability sm (major *
// 10 + minor): 227 KiB on sm_90 and sm_100, 163 KiB on sm_80 and sm_87, 99 KiB on the others;
// 0: the current device's (none: 227 KiB, an H200 assumed).
int64_t smem_optin_bytes(int sm = 0);

// The fastest backward for head dim d and dtype, from the H200 measurements of
// bench_06_backward_gpu (2026-12-01; docs/lab/06_backward_recompute.md) where there are any:
//   fp32                 gpu_v1 (the only float32 backward)
//   d <= 32 (width 32)   gpu_v2, 32 keys a warp   (a guess: d = 64's winner; never measured at 32)
//   d <= 64              gpu_v2, 32 keys a warp   (measured: 1.26-1.37x gpu_v3)
//   d <= 96              gpu_v4 on sm_90 with sm_90a code (measured: 1.15-1.25x gpu_v3, 2026-12-03),
//                        else gpu_v3 (a guess: d = 128's order; never measured at 96 off Hopper)
//   d <= 128             gpu_v4 on sm_90 with sm_90a code (measured: 1.12-1.22x gpu_v3), else
//                        gpu_v3 where its 173 KiB of shared memory fit (measured: 1.06-1.09x
//                        gpu_v2), else gpu_v2 (an A100's 163 KiB; a guess, nothing measured there)
//   d <= 256             gpu_v4 on sm_90 with sm_90a code (bwd_v4_wide.cuh; measured: 1.14-1.25x
//                        gpu_v3, 2026-12-03), else gpu_v3, 64 keys a block
// sm: compute capability (0 = the current device's, none: a Hopper assumed); smem_limit: bytes a
// block may opt in to (0: smem_optin_bytes(sm)).
std::string default_backward_kernel(int64_t d, fa::DType dtype, int64_t smem_limit = 0, int sm = 0);

// gpu_v2's block shape: Bc keys per thread block, keys_per_warp of them per warp (16 or 32: one or
// two mma row tiles), so Bc / keys_per_warp warps. 0 = the default for the head dim.
struct BwdShape {
  int64_t Bc = 0, keys_per_warp = 0;
};
// The shapes gpu_v2 is compiled for at the native width head dim d runs at (empty for d > 128,
// where gpu_v3 runs), and its default (the sweep's choice, BM_bwd_shape, at d = 64 and 128; the
// same by analogy at 32 and 96). 32 keys a warp only up to d = 64: at d = 96 its dK and dV take
// 192 registers a lane (ptxas: 484 bytes of spill stores), at d = 128 256.
std::vector<BwdShape> bwd_shapes(int64_t d);
BwdShape default_bwd_shape(int64_t d);

// How the backward runs a problem. Pure host arithmetic: no GPU needed (tested in CI).
struct BwdPlan {
  std::string runs;                  // the kernel that runs: the one asked for, auto's choice, or a
                                     // fallback (gpu_v1 in fp32; gpu_v3 for gpu_v2 above d = 128; for
                                     // gpu_v4 gpu_v2 or gpu_v3; with the same _det suffix)
  std::string note;                  // why: auto's reason, a fallback's, the padding ("" if none)
  int64_t d_kernel = 0;              // the head dim the kernels run at: d for gpu_v1, else
                                     // native_width(d); above d: zero-padded columns (pad_bytes)
  int64_t Br = 0, Bc = 0;            // block sizes, rows
  int64_t keys_per_warp = 0;         // keys each warp owns (gpu_v2, gpu_v3: 16 or 32; gpu_v4: 16 in its
                                     // warpgroup's 64); 0 for gpu_v1
  int64_t stages = 0;                // buffers of Q_i, dO_i (2: the next step's copied while one computes;
                                     // gpu_v3 at d >= 128 takes 1 where 2 do not fit the shared memory)
  int64_t threads = 0;               // threads per thread block (of the main kernels)
  int64_t blocks_dkdv = 0;           // thread blocks over key blocks (B * H_kv * ceil(N_k / Bc))
  int64_t blocks_dq = 0;             // gpu_v1's pass 2 (B * H * ceil(N_q / Br)); 0 for the others
  int64_t smem_dkdv = 0, smem_dq = 0;  // shared memory per thread block of each kernel, bytes
  // Extra GPU memory, bytes: D (one float per query row); gpu_v2, gpu_v3 and gpu_v4 add dQ's float32
  // accumulator (4 B H N_q d_kernel bytes), their _det variants one int per (b, h, query block) and
  // one more (the start counter) besides; a padded run adds pad_bytes.
  int64_t workspace_bytes = 0;
  // The padded copies, bytes (0 when d_kernel == d): Q, dO (B H N_q d_kernel each), K, V, dK, dV
  // (B H_kv N_k d_kernel each) in the dtype. dQ needs none: its conversion from the accumulator
  // drops the extra columns.
  int64_t pad_bytes = 0;
};

// Throws fa::InputError for an invalid problem (fa::validate), an unknown kernel ("--bwd-kernel";
// "auto" is known), d > 256 ("--head-dim"), a grid past 2^31 - 1 thread blocks, or a shape gpu_v2
// is not compiled for (argument "shape": bwd_shapes(d); gpu_v1, gpu_v3 and gpu_v4 take none).
// gpu_v1 blocks: 64 rows for d <= 64, else 32 (shared memory: at most 201 KiB at d = 256). sm: the
// GPU's compute capability (major * 10 + minor) for gpu_v4's choice (it needs 90 and a build for
// sm_90a; else gpu_v3 runs, and the note says why), gpu_v3's stages and auto's choice (its shared
// memory: smem_optin_bytes(sm)); 0: the current device's (none: a Hopper assumed).
BwdPlan backward_plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, BwdShape shape = {},
                     int sm = 0);
// The same for a packed variable-length batch (issue 34; common/varlen.hpp; only its totals and
// whether cu_q is set are read): p is varlen_problem()'s (B sequences, N_q and N_k the longest).
// gpu_v3 and auto (which runs gpu_v3) take one, in fp16/bf16; every other kernel, fp32 and the
// deterministic variants are refused ("--cu-seqlens-q").
BwdPlan backward_plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, BwdShape shape, int sm,
                      const fa::VarlenDevice& packed);

// Runs the backward on device pointers (layout above) on `stream`, without waiting for it:
// D = rowsum(dO * O), then the kernels of the plan (at a padded width: the copies around them);
// every element of dQ, dK, dV is written. sm: as backward_plan's, 0 for this GPU's own choices; the
// tests pass 80 on an H200 to run what an A100 would (gpu_v3 in one stage, auto's A100 choices).
// Throws as backward_plan(), fa::CudaError when CUDA fails.
void backward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
              const void* K, const void* V, const void* O, const void* dO, const float* LSE, void* dQ,
              void* dK, void* dV, cudaStream_t stream, BwdShape shape = {}, int sm = 0);
// A packed batch in one launch of gpu_v3 (each key block reads its sequence's offsets:
// kernels/bwd_v3_split.cuh): Q, O, dO, dQ [total_q, H, d], K, V, dK, dV [total_k, H_kv, d], LSE
// [H, total_q]; p as backward_plan()'s. Keys no query sees get dK = dV = 0, rows that see no key
// dQ = 0. The offsets are not read on the host (validate them where they are made); the kernel
// clamps them to the totals. Throws as backward_plan() with the batch.
void backward_varlen(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
                     const void* K, const void* V, const void* O, const void* dO, const float* LSE, void* dQ,
                     void* dK, void* dV, const fa::VarlenDevice& packed, cudaStream_t stream);

}  // namespace fa06
