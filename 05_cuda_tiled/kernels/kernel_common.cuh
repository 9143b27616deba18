// The little every kernel version shares: reading an element of Q, K, V as float32 and writing an
// element of O in its storage type. Nothing attention-specific lives here.
//
//   T              load(x)                     store<T>(x)
//   float          x                           x
//   __half         __half2float (exact)        __float2half_rn (round to nearest even)
//   __nv_bfloat16  __bfloat162float (exact)    __float2bfloat16_rn (round to nearest even)
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

}  // namespace fa05
