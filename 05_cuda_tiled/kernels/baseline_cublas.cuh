// The materialised baseline: standard attention as a CUDA user would write it with a library,
// the GPU version of stage 01/02 (and of stage 04's BLAS baseline).
//
//   1. S = scale * Q K^T        cuBLAS, one batched GEMM, S in float32 in HBM   (N_q x N_k per head)
//   2. P = softmax(S), LSE      one kernel below: safe softmax per row, causal mask, P to HBM
//   3. O = P V                  cuBLAS, one batched GEMM
//
// S and P go through HBM: B*H*N_q*N_k floats of S (and as many 16-bit values of P in fp16/bf16)
// of extra GPU memory, O(N^2), against v1's none, and three passes over that N^2 data. That is
// exactly the cost FlashAttention removes; the benchmark measures it.
//
// Precision: the GEMMs accumulate in float32 (CUBLAS_COMPUTE_32F, no TF32); S is stored in
// float32; P is stored in the dtype for the second GEMM (its operands must share one type), so in
// fp16/bf16 this kernel multiplies P in 16 bits, like the tensor-core kernels.
//
// GQA without copying K or V: the G = H / H_kv query heads that share a kv head are contiguous in
// Q, so their rows form one (G*N_q) x d matrix, and one GEMM per (batch, kv head) serves them
// all: a strided batch of B*H_kv GEMMs.
#pragma once
#include <cublas_v2.h>

#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"

namespace fa05::baseline {

constexpr int kThreads = 256;  // softmax: one thread block per row of S

// Reduce v over the thread block with op, whose identity is `id` (every thread gets the result).
// `buf` holds 32 floats.
template <class Op>
__device__ float block_reduce(float v, float id, float* buf, Op op) {
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // buf may still be read by a previous reduction
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  v = lane < kThreads / 32 ? buf[lane] : id;
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Row `row` = (b*H + h)*N_q + i of S [B,H,N_q,N_k] (float32, already scaled): P = softmax of
// the keys query i sees (causal, bottom-right), 0 elsewhere; LSE[row] = m + log(l). A row that
// sees no key gets P = 0 (so O = 0) and LSE = -inf. P may alias S when T = float (each element is
// read, then written, by the same thread, after both reductions).
template <class T>
__global__ void __launch_bounds__(kThreads)
softmax_rows(const float* S, T* P, float* LSE, const fa::AttnProblem p) {
  __shared__ float buf[32];
  const int64_t row = blockIdx.x;
  const int64_t seen = p.keys_seen(row % p.N_q);
  const float* s = S + row * p.N_k;
  T* out = P + row * p.N_k;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < seen; j += kThreads) m = fmaxf(m, s[j]);
  m = block_reduce(m, -INFINITY, buf, [](float a, float b) { return fmaxf(a, b); });
  float l = 0.f;
  for (int64_t j = threadIdx.x; j < seen; j += kThreads) l += expf(s[j] - m);
  l = block_reduce(l, 0.f, buf, [](float a, float b) { return a + b; });
  const float inv = seen > 0 ? 1.f / l : 0.f;
  for (int64_t j = threadIdx.x; j < p.N_k; j += kThreads)
    out[j] = store<T>(j < seen ? expf(s[j] - m) * inv : 0.f);
  if (threadIdx.x == 0) LSE[row] = seen > 0 ? m + logf(l) : -INFINITY;
}

}  // namespace fa05::baseline
