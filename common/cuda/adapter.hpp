// The host adapter: turns a GPU forward that works on device pointers into the course's common
// ForwardFn (float32 tensors on the host, common/stage.hpp), and a GPU backward into a
// BackwardFn, so the conformance battery, the stage programs and the tour run every GPU kernel
// unchanged.
//
// One call of the ForwardFn it returns:
//   1. rounds Q, K, V to the dtype (round to nearest even, common/dtype.hpp) and uploads them;
//   2. runs the kernel once untimed (module loading, library handles: a warm-up);
//   3. fills O and LSE on the GPU with NaN bits, so an element the kernel never writes fails, and
//      runs the kernel again between two CUDA events (the GPU time goes to devstats::set_last_ms);
//   4. waits, checks for errors, downloads O (converted to float32) and LSE (float32).
// The device copies of Q, K, V, O, LSE are inputs and outputs (Mem::Io); whatever the kernel
// allocates itself through counted DeviceBuffers is the run's extra GPU memory.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "dtype.hpp"
#include "harness.hpp"
#include "kv_cache.hpp"
#include "stage.hpp"
#include "varlen.hpp"

namespace fa {

// A forward on the GPU. Device pointers: Q [B,H,N_q,d], K and V [B,H_kv,N_k,d], O [B,H,N_q,d],
// all in `dtype`; LSE [B,H,N_q] float32. Launches on `stream`; may return before the kernels end.
// Throws InputError for a problem it does not support, CudaError for a CUDA failure.
using DeviceForwardFn = std::function<void(const AttnProblem& p, DType dtype, const void* Q,
                                           const void* K, const void* V, void* O, float* LSE,
                                           cudaStream_t stream)>;

// A backward on the GPU. Device pointers: Q, O, dO, dQ [B,H,N_q,d]; K, V, dK, dV [B,H_kv,N_k,d],
// all in `dtype`; LSE [B,H,N_q] float32. Launches on `stream`; may return before the kernels end.
using DeviceBackwardFn = std::function<void(const AttnProblem& p, DType dtype, const void* Q, const void* K,
                                            const void* V, const void* O, const void* dO, const float* LSE,
                                            void* dQ, void* dK, void* dV, cudaStream_t stream)>;

// Bytes of GPU workspace f needs for a problem (to refuse, before allocating anything, a problem
// that does not fit in the GPU's free memory).
using WorkspaceFn = std::function<int64_t(const AttnProblem& p, DType dtype)>;

// Throws InputError(arg, ...) if a value of x rounds to infinity in dtype t (|x| >= 65520 in
// fp16; near FLT_MAX in bf16): on the GPU it would become inf, and O NaN. n elements.
void check_dtype_range(const float* x, int64_t n, DType t, const std::string& arg);
// The same for the Q, K, V of `in` (arguments --q, --k, --v).
void check_dtype_range(const Inputs& in, DType t);

// The ForwardFn for f in `dtype`. Its calls throw InputError when an input value is outside the
// dtype's range (check_dtype_range), when there is no usable GPU, or when inputs, outputs and
// workspace exceed the GPU's free memory (in that order); CudaError when CUDA fails.
ForwardFn gpu_forward(DeviceForwardFn f, DType dtype, WorkspaceFn workspace = {});

// A forward on a KV cache on the GPU (kv_cache.hpp): as DeviceForwardFn, but K and V are the
// cache (cache_elems() elements each), and lens ([B]) and table ([B, pages_per_seq]) are int32
// device copies of the cache's arrays (nullptr where it has none). c gives their sizes.
using DeviceCacheForwardFn = std::function<void(const AttnProblem& p, const KvCacheHost& c, DType dtype,
                                                const void* Q, const void* K, const void* V, void* O, float* LSE,
                                                const int32_t* lens, const int32_t* table, cudaStream_t stream)>;
using CacheWorkspaceFn = std::function<int64_t(const AttnProblem& p, const KvCacheHost& c, DType dtype)>;

// The CacheForwardFn for f in `dtype`: gpu_forward's steps, with the lengths and the table
// uploaded beside Q, K, V. Throws as gpu_forward.
CacheForwardFn gpu_forward_cache(DeviceCacheForwardFn f, DType dtype, CacheWorkspaceFn workspace = {});

// A forward on a packed batch on the GPU (varlen.hpp): as DeviceForwardFn, with Q, O [total_q, H,
// d], K, V [total_k, H_kv, d], LSE [H, total_q], and cu_q, cu_k int32 device copies of v's offsets
// ([B + 1] each). p is varlen_problem()'s.
using DeviceVarlenForwardFn = std::function<void(const AttnProblem& p, const VarlenHost& v, DType dtype,
                                                 const void* Q, const void* K, const void* V, void* O, float* LSE,
                                                 const int32_t* cu_q, const int32_t* cu_k, cudaStream_t stream)>;
using VarlenWorkspaceFn = std::function<int64_t(const AttnProblem& p, const VarlenHost& v, DType dtype)>;
// The VarlenForwardFn for f in `dtype`: gpu_forward's steps on the packed tensors, with the
// offsets uploaded beside Q, K, V. Throws as gpu_forward.
VarlenForwardFn gpu_forward_varlen(DeviceVarlenForwardFn f, DType dtype, VarlenWorkspaceFn workspace = {});
// The BackwardFn for f in `dtype`, the same way: Q, K, V, O, dO rounded to the dtype and uploaded
// (LSE as float32), a warm-up call, dQ, dK, dV poisoned with NaN, a timed call, the gradients
// downloaded as float32. Throws as gpu_forward (O and dO range-checked as --o-in and --do).
BackwardFn gpu_backward(DeviceBackwardFn f, DType dtype, WorkspaceFn workspace = {});
// A backward on a packed batch on the GPU (varlen.hpp): as DeviceBackwardFn on the packed tensors
// (Q, O, dO, dQ [total_q, H, d], K, V, dK, dV [total_k, H_kv, d], LSE [H, total_q]), with the
// offsets as int32 device arrays. gpu_backward_varlen: gpu_backward's steps, the offsets uploaded.
using DeviceVarlenBackwardFn = std::function<void(const AttnProblem& p, const VarlenHost& v, DType dtype, const void* Q,
                                                  const void* K, const void* V, const void* O, const void* dO,
                                                  const float* LSE, void* dQ, void* dK, void* dV, const int32_t* cu_q,
                                                  const int32_t* cu_k, cudaStream_t stream)>;
VarlenBackwardFn gpu_backward_varlen(DeviceVarlenBackwardFn f, DType dtype, VarlenWorkspaceFn workspace = {});

}  // namespace fa
