// libfa05.so: the C ABI of fa05.h over the runner (runner.hpp). Exceptions stop here: every
// failure becomes a status code and a message for fa05_last_error().
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <new>
#include <string>
#include <tuple>

#include "check.hpp"
#include "device_buffer.hpp"
#include "fa05.h"
#include "runner.hpp"
#include "runner_fp8.hpp"

namespace {

thread_local std::string g_error;

// The message, as one line of at most 300 characters (a caller's string may hold anything).
int fail(int status, const std::string& msg) {
  g_error = fa::one_line(msg, 300);
  return status;
}

// A usable GPU (one exists, compute capability >= 8.0), or FA05_CUDA_ERROR with the reason.
int check_gpu() {
  int n = 0, dev = 0, major = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    cudaGetLastError();
    return fail(FA05_CUDA_ERROR, std::string("GPU: expected a CUDA GPU, found none (") +
                                     (err != cudaSuccess ? cudaGetErrorName(err) : "no device") + ")");
  }
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 8)
    return fail(FA05_CUDA_ERROR, "GPU: expected compute capability 8.0 or newer, found an older or unreadable device");
  return FA05_OK;
}

// Each pointer must be device (or managed) memory: a host pointer would fault inside a kernel,
// a sticky error that breaks the caller's CUDA context for good. names[i] names ptrs[i].
template <size_t N>
int check_device_pointers(const void* const (&ptrs)[N], const char* const (&names)[N]) {
  for (size_t i = 0; i < N; ++i) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, ptrs[i]) != cudaSuccess) {
      cudaGetLastError();
      return fail(FA05_INVALID_ARGUMENT, std::string(names[i]) + ": expected a device pointer, found one CUDA does not know");
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
      return fail(FA05_INVALID_ARGUMENT, std::string(names[i]) + ": expected a device pointer, found host memory");
  }
  return FA05_OK;
}
int check_device_pointers(const void* const (&ptrs)[5]) { return check_device_pointers(ptrs, {"Q", "K", "V", "O", "LSE"}); }
int check_device_pointers(const void* const (&ptrs)[7]) {
  return check_device_pointers(ptrs, {"Q", "K", "V", "O", "LSE", "cu_seqlens_q", "cu_seqlens_k"});
}

// The problem, checked as the CLI checks it (fa::validate) plus the C-only cases.
int make_problem(const char* kernel, int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k,
                 int64_t d, int dtype, int causal, float scale, fa::AttnProblem& p, fa::DType& t) {
  if (!kernel) return fail(FA05_INVALID_ARGUMENT, "kernel: expected a name, found NULL");
  if (dtype < FA05_FP32 || dtype > FA05_BF16)
    return fail(FA05_INVALID_ARGUMENT, "dtype: expected 0 (fp32), 1 (fp16) or 2 (bf16), found " + std::to_string(dtype));
  if (!(std::isfinite(scale) && scale >= 0.f) || std::signbit(scale))
    return fail(FA05_INVALID_ARGUMENT, "scale: expected a finite number > 0 (or 0 for 1/sqrt(d)), found " + std::to_string(scale));
  p.B = B, p.H = H, p.H_kv = H_kv, p.N_q = N_q, p.N_k = N_k, p.d = d;
  p.causal = causal != 0;
  p.scale = scale;
  t = static_cast<fa::DType>(dtype);
  return FA05_OK;
}

// Runs f, mapping each exception to its status.
template <class F>
int guarded(F f) {
  try {
    f();
    return FA05_OK;
  } catch (const fa05::Unsupported& e) {
    return fail(FA05_UNSUPPORTED, e.what());
  } catch (const fa::InputError& e) {
    return fail(FA05_INVALID_ARGUMENT, e.what());
  } catch (const fa::CudaError& e) {
    if (e.code == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so the caller's next CUDA call is unaffected
      return fail(FA05_OUT_OF_MEMORY, e.what());
    }
    return fail(FA05_CUDA_ERROR, e.what());
  } catch (const std::bad_alloc&) {
    return fail(FA05_OUT_OF_MEMORY, "host memory exhausted");
  } catch (const std::exception& e) {
    return fail(FA05_CUDA_ERROR, e.what());
  }
}

}  // namespace

extern "C" {

namespace {
// fa05_forward and fa05_forward_variant once the problem is made.
int forward_problem(const char* kernel, const void* Q, const void* K, const void* V, void* O, float* LSE,
                    const fa::AttnProblem& p, fa::DType t, void* stream) {
  if (!Q || !K || !V || !O || !LSE)
    return fail(FA05_INVALID_ARGUMENT, "Q, K, V, O, LSE: expected device pointers, found NULL");
  // What needs no GPU first (the problem, the pointers' alignment), then the GPU and the memory.
  fa05::Plan pl;
  if (int s = guarded([&] {
        pl = fa05::plan(kernel, p, t);
        fa05::check_alignment(pl, t, Q, K, V, O, LSE);
      }))
    return s;
  if (int s = check_gpu()) return s;
  if (int s = check_device_pointers({Q, K, V, O, LSE})) return s;
  return guarded([&] {
    fa05::forward(kernel, p, t, Q, K, V, O, LSE, fa05::Config{}, static_cast<cudaStream_t>(stream));
  });
}
}  // namespace

int fa05_forward(const char* kernel, const void* Q, const void* K, const void* V, void* O, float* LSE,
                 int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int dtype,
                 int causal, float scale, void* stream) {
  g_error.clear();
  fa::AttnProblem p;
  fa::DType t;
  if (int s = make_problem(kernel, B, H, H_kv, N_q, N_k, d, dtype, causal, scale, p, t)) return s;
  return forward_problem(kernel, Q, K, V, O, LSE, p, t, stream);
}

int fa05_forward_variant(const char* kernel, const void* Q, const void* K, const void* V, void* O, float* LSE,
                         int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int dtype,
                         int causal, float scale, int64_t window_left, int64_t window_right, float softcap,
                         void* stream) {
  g_error.clear();
  fa::AttnProblem p;
  fa::DType t;
  if (int s = make_problem(kernel, B, H, H_kv, N_q, N_k, d, dtype, causal, scale, p, t)) return s;
  p.window_left = window_left, p.window_right = window_right, p.softcap = softcap;
  if (int s = guarded([&] { fa::validate(p); })) return s;  // a side below -1, a softcap < 0 or not finite
  return forward_problem(kernel, Q, K, V, O, LSE, p, t, stream);
}

int fa05_forward_fp8(const void* Q, const void* K, const void* V, void* O, float* LSE, int64_t B, int64_t H,
                     int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int causal, float scale, void* stream) {
  g_error.clear();
  fa::AttnProblem p;
  fa::DType t;
  if (int s = make_problem("v15", B, H, H_kv, N_q, N_k, d, FA05_BF16, causal, scale, p, t)) return s;
  if (!Q || !K || !V || !O || !LSE) return fail(FA05_INVALID_ARGUMENT, "Q, K, V, O, LSE: expected device pointers, found NULL");
  if (int s = guarded([&] { fa05::plan_fp8(p); })) return s;
  if (int s = check_gpu()) return s;
  if (int s = check_device_pointers({Q, K, V, O, LSE})) return s;
  return guarded([&] { fa05::forward_fp8(p, Q, K, V, O, LSE, fa05::Config{}, static_cast<cudaStream_t>(stream)); });
}

int fa05_forward_fp8_e4m3(const void* Q, const void* K, const void* V, const float* scale_q, const float* scale_k,
                          const float* scale_v, void* O, float* LSE, int64_t B, int64_t H, int64_t H_kv, int64_t N_q,
                          int64_t N_k, int64_t d, int causal, float scale, void* stream) {
  g_error.clear();
  fa::AttnProblem p;
  fa::DType t;
  if (int s = make_problem("v15", B, H, H_kv, N_q, N_k, d, FA05_BF16, causal, scale, p, t)) return s;
  if (!Q || !K || !V || !O || !LSE || !scale_q || !scale_k || !scale_v)
    return fail(FA05_INVALID_ARGUMENT, "Q, K, V, their scales, O, LSE: expected device pointers, found NULL");
  if (int s = guarded([&] { fa05::plan_fp8(p); })) return s;
  if (int s = check_gpu()) return s;
  if (int s = check_device_pointers({Q, K, V, O, LSE, scale_q, scale_k, scale_v},
                                    {"Q", "K", "V", "O", "LSE", "scale_q", "scale_k", "scale_v"}))
    return s;
  return guarded([&] {
    fa05::forward_fp8_e4m3(p, {Q, K, V, scale_q, scale_k, scale_v}, O, LSE, fa05::Config{}, static_cast<cudaStream_t>(stream));
  });
}

int fa05_forward_kvcache(const char* kernel, const void* Q, const void* K, const void* V, void* O,
                         float* LSE, int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k,
                         int64_t d, int dtype, int causal, float scale, const int32_t* cache_lens,
                         const int32_t* block_table, int64_t page_size, int64_t pages_per_seq,
                         int64_t num_pages, void* stream) {
  g_error.clear();
  fa::AttnProblem p;
  fa::DType t;
  if (int s = make_problem(kernel, B, H, H_kv, N_q, N_k, d, dtype, causal, scale, p, t)) return s;
  if (!Q || !K || !V || !O || !LSE)
    return fail(FA05_INVALID_ARGUMENT, "Q, K, V, O, LSE: expected device pointers, found NULL");
  const fa05::KvCache cache{cache_lens, block_table, block_table ? page_size : 0, pages_per_seq, num_pages};
  fa05::Plan pl;
  if (int s = guarded([&] {
        pl = fa05::plan(kernel, p, t, fa05::Config{}, cache);
        fa05::check_alignment(pl, t, Q, K, V, O, LSE);
      }))
    return s;
  if (int s = check_gpu()) return s;
  if (int s = check_device_pointers({Q, K, V, O, LSE})) return s;
  for (const void* ptr : {static_cast<const void*>(cache_lens), static_cast<const void*>(block_table)})
    if (ptr) {
      cudaPointerAttributes a{};
      if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess || (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
        cudaGetLastError();
        return fail(FA05_INVALID_ARGUMENT, std::string(ptr == cache_lens ? "cache_lens" : "block_table") +
                                               ": expected a device pointer, found host or unknown memory");
      }
    }
  return guarded([&] {
    fa05::forward(kernel, p, t, Q, K, V, O, LSE, cache, fa05::Config{}, static_cast<cudaStream_t>(stream));
  });
}

int fa05_forward_varlen(const char* kernel, const void* Q, const void* K, const void* V, void* O, float* LSE,
                        const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, int64_t B, int64_t total_q,
                        int64_t total_k, int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t H, int64_t H_kv,
                        int64_t d, int dtype, int causal, float scale, int64_t window_left, int64_t window_right,
                        float softcap, void* stream) {
  g_error.clear();
  for (const auto& [name, total, longest] : {std::tuple{"q", total_q, max_seqlen_q}, std::tuple{"k", total_k, max_seqlen_k}}) {
    if (total < 1)
      return fail(FA05_INVALID_ARGUMENT, std::string("total_") + name + ": expected at least one token, found " + std::to_string(total));
    if (longest < 1 || longest > total)
      return fail(FA05_INVALID_ARGUMENT, std::string("max_seqlen_") + name + ": expected 1 ... total_" + name + " = " +
                                             std::to_string(total) + ", found " + std::to_string(longest));
  }
  // The padded problem the batch avoids (fa::varlen_problem()): B sequences of the longest lengths;
  // checked as its longest sequence (plan()).
  fa::AttnProblem p;
  fa::DType t;
  if (int s = make_problem(kernel, B, H, H_kv, max_seqlen_q, max_seqlen_k, d, dtype, causal, scale, p, t)) return s;
  p.window_left = window_left, p.window_right = window_right, p.softcap = softcap;
  p.token_major = true, p.lse_head_stride = total_q;
  if (int s = guarded([&] {
        fa::AttnProblem one = p;
        one.B = 1, one.lse_head_stride = 0;
        if (B < 1) throw fa::InputError("B", "at least one sequence", std::to_string(B));
        fa::validate(one);
      }))
    return s;
  if (!Q || !K || !V || !O || !LSE)
    return fail(FA05_INVALID_ARGUMENT, "Q, K, V, O, LSE: expected device pointers, found NULL");
  if (!cu_seqlens_q || !cu_seqlens_k)
    return fail(FA05_INVALID_ARGUMENT, "cu_seqlens_q, cu_seqlens_k: expected device pointers, found NULL");
  const fa05::Varlen packed{cu_seqlens_q, cu_seqlens_k, total_q, total_k};
  fa05::Plan pl;
  if (int s = guarded([&] {
        pl = fa05::plan(kernel, p, t, fa05::Config{}, fa05::KvCache{}, packed);
        fa05::check_alignment(pl, t, Q, K, V, O, LSE);
      }))
    return s;
  if (int s = check_gpu()) return s;
  if (int s = check_device_pointers({Q, K, V, O, LSE, cu_seqlens_q, cu_seqlens_k})) return s;
  return guarded([&] {
    fa05::forward_varlen(kernel, p, t, Q, K, V, O, LSE, packed, fa05::Config{}, static_cast<cudaStream_t>(stream));
  });
}

int fa05_workspace_bytes(const char* kernel, int64_t B, int64_t H, int64_t H_kv, int64_t N_q,
                         int64_t N_k, int64_t d, int dtype, int causal, int64_t* bytes) {
  g_error.clear();
  fa::AttnProblem p;
  fa::DType t;
  if (int s = make_problem(kernel, B, H, H_kv, N_q, N_k, d, dtype, causal, 0.f, p, t)) return s;
  if (!bytes) return fail(FA05_INVALID_ARGUMENT, "bytes: expected a pointer, found NULL");
  // "v15" names the FP8 path: fa05_forward_fp8's workspace (e4m3 copies, scales, V^T, counter)
  if (std::string(kernel) == "v15") return guarded([&] { *bytes = fa05::fp8_workspace_bytes(p); });
  return guarded([&] { *bytes = fa05::plan(kernel, p, t).workspace_bytes; });
}

const char* fa05_runs(const char* kernel, int64_t d, int dtype) {
  g_error.clear();
  fa::AttnProblem p;
  fa::DType t;
  // A prefill-shaped problem (auto's choice may come to depend on N_q: decode, v14).
  if (make_problem(kernel, 1, 1, 1, 1024, 1024, d, dtype, 0, 0.f, p, t) != FA05_OK) return nullptr;
  const char* runs = nullptr;
  guarded([&] {
    const std::string name = fa05::plan(kernel, p, t).runs;
    for (const fa05::KernelInfo& k : fa05::kernels())
      if (k.name == name) runs = k.name.c_str();  // the list's own storage: valid for the process
  });
  return runs;
}

int fa05_release_cached_memory(void) {
  g_error.clear();
  if (int s = check_gpu()) return s;
  return guarded([] { fa::trim_course_pool(); });
}

int fa05_kernel_count(void) { return int(fa05::kernels().size()); }

const char* fa05_kernel_name(int i) {
  return i >= 0 && i < fa05_kernel_count() ? fa05::kernels()[size_t(i)].name.c_str() : nullptr;
}

const char* fa05_kernel_idea(int i) {
  return i >= 0 && i < fa05_kernel_count() ? fa05::kernels()[size_t(i)].idea.c_str() : nullptr;
}

const char* fa05_last_error(void) { return g_error.c_str(); }

}  // extern "C"
