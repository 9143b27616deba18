// libfa06.so: the C ABI of fa06.h over stage 06's backward, the CPU one (backward_tiled.hpp)
// always, the GPU one (runner_bwd.hpp) when the build has CUDA (FA06_GPU). Exceptions stop here:
// every failure becomes a status code and a message for fa06_last_error().
#include <cmath>
#include <new>
#include <sstream>
#include <string>
#include <tuple>

#include "backward_tiled.hpp"
#include "errors.hpp"
#include "fa06.h"
#include "problem.hpp"
#include "varlen.hpp"

#if FA06_GPU
#include <cuda_runtime.h>

#include "check.hpp"
#include "runner_bwd.hpp"
#endif

namespace {

thread_local std::string g_error;

// The message, as one line of at most 300 characters.
int fail(int status, const std::string& msg) {
  g_error = fa::one_line(msg, 300);
  return status;
}

// The scale as the CLI takes it: > 0, or 0 for 1/sqrt(d).
int check_scale(float scale) {
  if (!(std::isfinite(scale) && scale >= 0.f) || std::signbit(scale)) {
    std::ostringstream found;
    found << scale;
    return fail(FA06_INVALID_ARGUMENT, "--scale: expected a finite number > 0 (or 0 for 1/sqrt(d)), found " + found.str());
  }
  return FA06_OK;
}

fa::AttnProblem make(int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int causal, float scale,
                     int64_t window_left = -1, int64_t window_right = -1, float softcap = 0.f) {
  fa::AttnProblem p;
  p.B = B, p.H = H, p.H_kv = H_kv, p.N_q = N_q, p.N_k = N_k, p.d = d;
  p.causal = causal != 0;
  p.scale = scale;
  p.window_left = window_left, p.window_right = window_right, p.softcap = softcap;
  return p;
}

// The arguments every CPU backward checks before it looks at the problem: the pointers, the
// scale, the block sizes and the thread count.
int check_cpu_args(const float* Q, const float* K, const float* V, const float* O, const float* dO, const float* LSE,
                   float* dQ, float* dK, float* dV, float scale, int64_t Br, int64_t Bc, int threads) {
  if (!Q || !K || !V || !O || !dO || !LSE || !dQ || !dK || !dV)
    return fail(FA06_INVALID_ARGUMENT, "Q, K, V, O, dO, LSE, dQ, dK, dV: expected pointers, found NULL");
  if (int s = check_scale(scale)) return s;
  if (Br < 0 || Bc < 0)
    return fail(FA06_INVALID_ARGUMENT, "--block-q/--block-k: expected block sizes >= 0 (0: the default), found Br=" +
                                           std::to_string(Br) + " Bc=" + std::to_string(Bc));
  if (threads < 0 || threads > 256)
    return fail(FA06_INVALID_ARGUMENT, "--threads: expected 0 (all) to 256, found " + std::to_string(threads));
  return FA06_OK;
}

// fa06_backward_cpu and fa06_backward_cpu_variant once the problem is made.
int backward_cpu_problem(const float* Q, const float* K, const float* V, const float* O, const float* dO,
                         const float* LSE, float* dQ, float* dK, float* dV, const fa::AttnProblem& p, int64_t Br,
                         int64_t Bc, int threads) {
  if (int s = check_cpu_args(Q, K, V, O, dO, LSE, dQ, dK, dV, p.scale, Br, Bc, threads)) return s;
  try {
    fa::validate(p);  // sizes, H % H_kv, and a window side below -1 or a softcap < 0 or not finite
    bwd::Blocks blk;
    blk.Br = Br, blk.Bc = Bc, blk.threads = threads;
    bwd::backward<float>(p, Q, K, V, O, dO, LSE, dQ, dK, dV, blk);
    return FA06_OK;
  } catch (const fa::InputError& e) {
    return fail(FA06_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(FA06_OUT_OF_MEMORY, "host memory exhausted (D and the block buffers, O(threads * (Br + Bc) * d))");
  }
}

// fa06_backward_cpu_varlen: the same checks on the packed batch (common/varlen.hpp), then stage
// 06's CPU backward on each sequence's offset pointers (varlen_backward).
int backward_cpu_varlen(const float* Q, const float* K, const float* V, const float* O, const float* dO,
                        const float* LSE, float* dQ, float* dK, float* dV, const int32_t* cu_q, const int32_t* cu_k,
                        int64_t B, int64_t total_q, int64_t total_k, const fa::AttnProblem& p, int64_t Br, int64_t Bc,
                        int threads) {
  if (int s = check_cpu_args(Q, K, V, O, dO, LSE, dQ, dK, dV, p.scale, Br, Bc, threads)) return s;
  if (!cu_q || !cu_k) return fail(FA06_INVALID_ARGUMENT, "cu_seqlens_q, cu_seqlens_k: expected pointers, found NULL");
  try {
    const fa::VarlenHost v = fa::varlen_from_arrays(cu_q, cu_k, B, total_q, total_k);
    fa::validate_varlen_problem(p, v);  // heads, head dim, variants; each sequence's size
    bwd::Blocks blk;
    blk.Br = Br, blk.Bc = Bc, blk.threads = threads;
    fa::varlen_backward(
        [&](const fa::AttnProblem& q, const float* Qb, const float* Kb, const float* Vb, const float* Ob,
            const float* dOb, const float* Lb, float* dQb, float* dKb, float* dVb) {
          bwd::backward<float>(q, Qb, Kb, Vb, Ob, dOb, Lb, dQb, dKb, dVb, blk);
        },
        p, v, Q, K, V, O, dO, LSE, dQ, dK, dV);
    return FA06_OK;
  } catch (const fa::InputError& e) {
    return fail(FA06_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return fail(FA06_OUT_OF_MEMORY, "host memory exhausted (the offsets' copies, D and the block buffers, "
                                    "O(threads * (Br + Bc) * d))");
  }
}

#if FA06_GPU
int check_dtype(int dtype) {
  if (dtype < FA06_FP32 || dtype > FA06_BF16)
    return fail(FA06_INVALID_ARGUMENT, "dtype: expected 0 (fp32), 1 (fp16) or 2 (bf16), found " + std::to_string(dtype));
  return FA06_OK;
}

// The plan of `kernel` ("auto": the measured default for the head dim and dtype on the current
// GPU, fa06::default_backward_kernel, which the plan resolves) at head dim d: the kernel that runs,
// the width it runs at, and why (fa06_runs, fa06_runs_width, fa06_runs_note).
fa06::BwdPlan plan_for(const char* kernel, int64_t d, int dtype) {
  return fa06::backward_plan(kernel, make(1, 1, 1, 1, 1, d, 0, 0.f), static_cast<fa::DType>(dtype));
}

// A usable GPU (one exists, compute capability >= 8.0), or FA06_CUDA_ERROR with the reason.
int check_gpu() {
  int n = 0, dev = 0, major = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    cudaGetLastError();
    return fail(FA06_CUDA_ERROR, std::string("GPU: expected a CUDA GPU, found none (") +
                                     (err != cudaSuccess ? cudaGetErrorName(err) : "no device") + ")");
  }
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 8)
    return fail(FA06_CUDA_ERROR, "GPU: expected compute capability 8.0 or newer, found an older or unreadable device");
  return FA06_OK;
}

// Each pointer must be device (or managed) memory, 16-byte aligned: a host pointer would fault
// inside a kernel, a sticky error that breaks the caller's CUDA context for good.
int check_device_pointers(const void* const (&ptrs)[10]) {
  const char* names[10] = {"Q", "K", "V", "O", "dO", "LSE", "dQ", "dK", "dV", ""};
  for (int i = 0; i < 9; ++i) {
    if (!ptrs[i]) return fail(FA06_INVALID_ARGUMENT, std::string(names[i]) + ": expected a device pointer, found NULL");
    if (reinterpret_cast<uintptr_t>(ptrs[i]) % 16 != 0)
      return fail(FA06_INVALID_ARGUMENT, std::string(names[i]) + ": expected a 16-byte aligned pointer, found one that is not");
  }
  if (int s = check_gpu()) return s;
  for (int i = 0; i < 9; ++i) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, ptrs[i]) != cudaSuccess) {
      cudaGetLastError();
      return fail(FA06_INVALID_ARGUMENT, std::string(names[i]) + ": expected a device pointer, found one CUDA does not know");
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
      return fail(FA06_INVALID_ARGUMENT, std::string(names[i]) + ": expected a device pointer, found host memory");
  }
  return FA06_OK;
}

// Runs f, mapping each exception to its status.
template <class F>
int guarded(F f) {
  try {
    f();
    return FA06_OK;
  } catch (const fa::InputError& e) {
    return fail(FA06_INVALID_ARGUMENT, e.what());
  } catch (const fa::CudaError& e) {
    if (e.code == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so the caller's next CUDA call is unaffected
      return fail(FA06_OUT_OF_MEMORY, e.what());
    }
    return fail(FA06_CUDA_ERROR, e.what());
  } catch (const std::bad_alloc&) {
    return fail(FA06_OUT_OF_MEMORY, "host memory exhausted");
  } catch (const std::exception& e) {
    return fail(FA06_CUDA_ERROR, e.what());
  }
}
// fa06_backward and fa06_backward_variant once the plan has accepted the problem: the GPU and
// the pointers, then the kernels.
int backward_gpu_problem(const std::string& k, const fa::AttnProblem& p, fa::DType t, const void* Q, const void* K,
                         const void* V, const void* O, const void* dO, const float* LSE, void* dQ, void* dK, void* dV,
                         void* stream) {
  if (int s = check_device_pointers({Q, K, V, O, dO, LSE, dQ, dK, dV, nullptr})) return s;
  return guarded([&] { fa06::backward(k, p, t, Q, K, V, O, dO, LSE, dQ, dK, dV, static_cast<cudaStream_t>(stream)); });
}
#else
int no_gpu() { return fail(FA06_UNSUPPORTED, "GPU: expected a build with CUDA, found one without (libfa06.so has the CPU half only)"); }
#endif

}  // namespace

extern "C" {

int fa06_backward_cpu(const float* Q, const float* K, const float* V, const float* O, const float* dO,
                      const float* LSE, float* dQ, float* dK, float* dV, int64_t B, int64_t H, int64_t H_kv,
                      int64_t N_q, int64_t N_k, int64_t d, int causal, float scale, int64_t Br, int64_t Bc,
                      int threads) {
  g_error.clear();
  return backward_cpu_problem(Q, K, V, O, dO, LSE, dQ, dK, dV, make(B, H, H_kv, N_q, N_k, d, causal, scale), Br, Bc,
                              threads);
}

int fa06_backward_cpu_variant(const float* Q, const float* K, const float* V, const float* O, const float* dO,
                              const float* LSE, float* dQ, float* dK, float* dV, int64_t B, int64_t H, int64_t H_kv,
                              int64_t N_q, int64_t N_k, int64_t d, int causal, float scale, int64_t Br, int64_t Bc,
                              int threads, int64_t window_left, int64_t window_right, float softcap) {
  g_error.clear();
  return backward_cpu_problem(Q, K, V, O, dO, LSE, dQ, dK, dV,
                              make(B, H, H_kv, N_q, N_k, d, causal, scale, window_left, window_right, softcap), Br,
                              Bc, threads);
}

int fa06_backward_cpu_varlen(const float* Q, const float* K, const float* V, const float* O, const float* dO,
                             const float* LSE, float* dQ, float* dK, float* dV, const int32_t* cu_seqlens_q,
                             const int32_t* cu_seqlens_k, int64_t B, int64_t total_q, int64_t total_k, int64_t H,
                             int64_t H_kv, int64_t d, int causal, float scale, int64_t Br, int64_t Bc, int threads,
                             int64_t window_left, int64_t window_right, float softcap) {
  g_error.clear();
  // B, N_q, N_k of the problem are the sequences' (sequence_problem); 1 keeps make() whole.
  return backward_cpu_varlen(Q, K, V, O, dO, LSE, dQ, dK, dV, cu_seqlens_q, cu_seqlens_k, B, total_q, total_k,
                             make(1, H, H_kv, 1, 1, d, causal, scale, window_left, window_right, softcap), Br, Bc,
                             threads);
}

#if FA06_GPU
int fa06_backward(const char* kernel, const void* Q, const void* K, const void* V, const void* O, const void* dO,
                  const float* LSE, void* dQ, void* dK, void* dV, int64_t B, int64_t H, int64_t H_kv, int64_t N_q,
                  int64_t N_k, int64_t d, int dtype, int causal, float scale, void* stream) {
  g_error.clear();
  if (!kernel) return fail(FA06_INVALID_ARGUMENT, "--bwd-kernel: expected a name, found NULL");
  if (int s = check_dtype(dtype)) return s;
  if (int s = check_scale(scale)) return s;
  const fa::AttnProblem p = make(B, H, H_kv, N_q, N_k, d, causal, scale);
  const fa::DType t = static_cast<fa::DType>(dtype);
  std::string k;
  // What needs no GPU first (the problem, the kernel), then the GPU and the pointers.
  if (int s = guarded([&] {
        k = kernel;
        fa06::backward_plan(k, p, t, {}, 90);
      }))
    return s;
  return backward_gpu_problem(k, p, t, Q, K, V, O, dO, LSE, dQ, dK, dV, stream);
}

int fa06_backward_variant(const char* kernel, const void* Q, const void* K, const void* V, const void* O,
                          const void* dO, const float* LSE, void* dQ, void* dK, void* dV, int64_t B, int64_t H,
                          int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int dtype, int causal, float scale,
                          int64_t window_left, int64_t window_right, float softcap, void* stream) {
  g_error.clear();
  if (!kernel) return fail(FA06_INVALID_ARGUMENT, "--bwd-kernel: expected a name, found NULL");
  if (int s = check_dtype(dtype)) return s;
  if (int s = check_scale(scale)) return s;
  const fa::AttnProblem p = make(B, H, H_kv, N_q, N_k, d, causal, scale, window_left, window_right, softcap);
  const fa::DType t = static_cast<fa::DType>(dtype);
  const std::string k = kernel;
  // A bad window or softcap, and what fa06_backward refuses (the kernel, d), are invalid
  // arguments; a valid window or softcap the plan does not take is unsupported, with its line.
  if (int s = guarded([&] {
        fa::validate(p);
        fa06::backward_plan(k, make(B, H, H_kv, N_q, N_k, d, causal, scale), t, {}, 90);
      }))
    return s;
  try {
    fa06::backward_plan(k, p, t, {}, 90);
  } catch (const std::bad_alloc&) {
    return fail(FA06_OUT_OF_MEMORY, "host memory exhausted");
  } catch (const std::exception& e) {
    return fail(FA06_UNSUPPORTED, e.what());
  }
  return backward_gpu_problem(k, p, t, Q, K, V, O, dO, LSE, dQ, dK, dV, stream);
}

int fa06_backward_varlen(const char* kernel, const void* Q, const void* K, const void* V, const void* O,
                         const void* dO, const float* LSE, void* dQ, void* dK, void* dV, const int32_t* cu_seqlens_q,
                         const int32_t* cu_seqlens_k, int64_t B, int64_t total_q, int64_t total_k,
                         int64_t max_seqlen_q, int64_t max_seqlen_k, int64_t H, int64_t H_kv, int64_t d, int dtype,
                         int causal, float scale, int64_t window_left, int64_t window_right, float softcap,
                         void* stream) {
  g_error.clear();
  if (!kernel) return fail(FA06_INVALID_ARGUMENT, "--bwd-kernel: expected a name, found NULL");
  if (int s = check_dtype(dtype)) return s;
  if (int s = check_scale(scale)) return s;
  for (const auto& [name, total, longest] : {std::tuple{"q", total_q, max_seqlen_q}, std::tuple{"k", total_k, max_seqlen_k}}) {
    if (total < 1)
      return fail(FA06_INVALID_ARGUMENT, std::string("total_") + name + ": expected at least one token, found " + std::to_string(total));
    if (longest < 1 || longest > total)
      return fail(FA06_INVALID_ARGUMENT, std::string("max_seqlen_") + name + ": expected 1 ... total_" + name + " = " +
                                             std::to_string(total) + ", found " + std::to_string(longest));
  }
  if (B < 1) return fail(FA06_INVALID_ARGUMENT, "B: expected at least one sequence, found " + std::to_string(B));
  // The padded problem the batch avoids (fa::varlen_problem()): B sequences of the longest lengths.
  fa::AttnProblem p = make(B, H, H_kv, max_seqlen_q, max_seqlen_k, d, causal, scale, window_left, window_right, softcap);
  p.token_major = true, p.lse_head_stride = total_q;
  const fa::DType t = static_cast<fa::DType>(dtype);
  const std::string k = kernel;
  if (!cu_seqlens_q || !cu_seqlens_k)
    return fail(FA06_INVALID_ARGUMENT, "cu_seqlens_q, cu_seqlens_k: expected device pointers, found NULL");
  const fa::VarlenDevice packed{cu_seqlens_q, cu_seqlens_k, total_q, total_k};
  if (int s = guarded([&] { fa06::backward_plan(k, p, t, {}, 90, packed); })) return s;
  for (const void* ptr : {static_cast<const void*>(cu_seqlens_q), static_cast<const void*>(cu_seqlens_k)}) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess || (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)) {
      cudaGetLastError();
      return fail(FA06_INVALID_ARGUMENT, std::string(ptr == cu_seqlens_q ? "cu_seqlens_q" : "cu_seqlens_k") +
                                             ": expected a device pointer, found host or unknown memory");
    }
  }
  if (int s = check_device_pointers({Q, K, V, O, dO, LSE, dQ, dK, dV, nullptr})) return s;
  return guarded([&] {
    fa06::backward_varlen(k, p, t, Q, K, V, O, dO, LSE, dQ, dK, dV, packed, static_cast<cudaStream_t>(stream));
  });
}

int fa06_workspace_bytes(const char* kernel, int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k,
                         int64_t d, int dtype, int causal, int64_t* bytes) {
  g_error.clear();
  if (!kernel) return fail(FA06_INVALID_ARGUMENT, "--bwd-kernel: expected a name, found NULL");
  if (!bytes) return fail(FA06_INVALID_ARGUMENT, "bytes: expected a pointer, found NULL");
  if (int s = check_dtype(dtype)) return s;
  const fa::AttnProblem p = make(B, H, H_kv, N_q, N_k, d, causal, 0.f);
  return guarded([&] {
    *bytes = fa06::backward_plan(kernel, p, static_cast<fa::DType>(dtype)).workspace_bytes;
  });
}

const char* fa06_runs(const char* kernel, int64_t d, int dtype) {
  g_error.clear();
  if (!kernel) {
    fail(FA06_INVALID_ARGUMENT, "--bwd-kernel: expected a name, found NULL");
    return nullptr;
  }
  if (check_dtype(dtype) != FA06_OK) return nullptr;
  const char* runs = nullptr;
  guarded([&] {
    const std::string name = plan_for(kernel, d, dtype).runs;
    for (const std::string& n : fa06::backward_kernels())
      if (n == name) runs = n.c_str();  // the list's own storage: valid for the process
  });
  return runs;
}

int64_t fa06_runs_width(const char* kernel, int64_t d, int dtype) {
  g_error.clear();
  if (!kernel) {
    fail(FA06_INVALID_ARGUMENT, "--bwd-kernel: expected a name, found NULL");
    return -1;
  }
  if (check_dtype(dtype) != FA06_OK) return -1;
  int64_t width = -1;
  guarded([&] { width = plan_for(kernel, d, dtype).d_kernel; });
  return width;
}

const char* fa06_runs_note(const char* kernel, int64_t d, int dtype) {
  g_error.clear();
  if (!kernel) {
    fail(FA06_INVALID_ARGUMENT, "--bwd-kernel: expected a name, found NULL");
    return nullptr;
  }
  if (check_dtype(dtype) != FA06_OK) return nullptr;
  thread_local std::string note;
  const char* out = nullptr;
  guarded([&] {
    note = plan_for(kernel, d, dtype).note;
    out = note.c_str();
  });
  return out;
}

int fa06_kernel_count(void) { return int(fa06::backward_kernels().size()); }

const char* fa06_kernel_name(int i) {
  return i >= 0 && i < fa06_kernel_count() ? fa06::backward_kernels()[size_t(i)].c_str() : nullptr;
}

int fa06_has_gpu(void) { return 1; }
#else
int fa06_backward(const char*, const void*, const void*, const void*, const void*, const void*, const float*, void*,
                  void*, void*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, float, void*) {
  g_error.clear();
  return no_gpu();
}

int fa06_backward_variant(const char*, const void*, const void*, const void*, const void*, const void*, const float*,
                          void*, void*, void*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, float,
                          int64_t, int64_t, float, void*) {
  g_error.clear();
  return no_gpu();
}

int fa06_backward_varlen(const char*, const void*, const void*, const void*, const void*, const void*, const float*,
                         void*, void*, void*, const int32_t*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, int64_t, int, int, float, int64_t, int64_t, float, void*) {
  g_error.clear();
  return no_gpu();
}

int fa06_workspace_bytes(const char*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int64_t*) {
  g_error.clear();
  return no_gpu();
}

const char* fa06_runs(const char*, int64_t, int) {
  g_error.clear();
  no_gpu();
  return nullptr;
}

int64_t fa06_runs_width(const char*, int64_t, int) {
  g_error.clear();
  no_gpu();
  return -1;
}

const char* fa06_runs_note(const char*, int64_t, int) {
  g_error.clear();
  no_gpu();
  return nullptr;
}

int fa06_kernel_count(void) { return 0; }
const char* fa06_kernel_name(int) { return nullptr; }
int fa06_has_gpu(void) { return 0; }
#endif

const char* fa06_last_error(void) { return g_error.c_str(); }

}  // extern "C"
