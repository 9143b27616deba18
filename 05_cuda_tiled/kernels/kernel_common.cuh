// The little every kernel version shares: reading an element of Q, K, V as float32 and writing an
// element of O in its storage type; and the softcap, the one score transform a kernel may apply.
//
//   T              load(x)                     store<T>(x)
//   float          x                           x
//   __half         __half2float (exact)        __float2half_rn (round to nearest even)
//   __nv_bfloat16  __bfloat162float (exact)    __float2bfloat16_rn (round to nearest even)
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "bug_zoo.hpp"  // FA_ZOO: the GPU entries of the bug zoo (docs/bug_zoo.md)

namespace fa05 {

__device__ __forceinline__ float load(float x) { return x; }
__device__ __forceinline__ float load(__half x) { return __half2float(x); }
__device__ __forceinline__ float load(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T store(float x);
template <>
__device__ __forceinline__ float store<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half store<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// A packed variable-length batch as a kernel reads it (common/varlen.hpp; stage 05's v13 and stage
// 06's gpu_v3): device arrays of B + 1 offsets, and the token counts that bound them. cu_q ==
// nullptr: not a packed batch (Q [B, H, N_q, d] ...). Kernels clamp each offset to 0 ... total.
struct Packed {
  const int32_t* cu_q;  // [B + 1]: sequence b has tokens cu_q[b] ... cu_q[b + 1] - 1 of Q and O
  const int32_t* cu_k;  // [B + 1]: ... and cu_k[b] ... cu_k[b + 1] - 1 of K and V
  int total_q, total_k;
};

// Sequence b's first token and length from offsets cu (clamped: a bad array reads and writes
// nothing outside the tensors): first = cu[b] in 0 ... total, n = cu[b + 1] - first, at most
// longest (the grid's).
__device__ __forceinline__ void packed_span(const int32_t* cu, int64_t b, int total, int longest, int& first, int& n) {
  first = min(max(cu[b], 0), total);
  n = min(min(max(cu[b + 1], first), total) - first, longest);
}

// The softcap (docs/math.md (8.2), Gemma 2): a scaled score x becomes c tanh(x / c), before the
// mask and the softmax. tanh(y) = 1 - 2 / (e^{2y} + 1), from exp2f (the SFU's ex2, 2 ulp) and one
// fast division: about 1e-7 c absolute. The SFU's own tanh.approx.f32 is one instruction, but its
// relative error of 2^-11 would move a logit by up to 0.02 at c = 50, and its P by 2 %: more than
// bf16's rounding of P (0.4 %), so the battery's rule would (rightly) fail it. The exponent is
// clamped at 64 (tanh = 1 in float32 long before), so e + 1 stays finite for the division.
__device__ __forceinline__ float softcap(float x, float c) {
  const float e = exp2f(fminf(x * (2.f * 1.4426950408889634f / c), 64.f));  // e^{2x/c}
  return c - __fdividef(2.f * c, e + 1.f);
}

}  // namespace fa05
