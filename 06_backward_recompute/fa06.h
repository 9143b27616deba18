/* Stage 06 as a C library (libfa06.so), for callers outside C++: python/fa_course loads it with
 * ctypes and calls it from PyTorch's autograd, and tools/compare_torch.py times its GPU backward
 * beside SDPA's backward in one process.
 *
 * Every function returns a status and never exits, aborts or prints; after a non-zero status
 * fa06_last_error() says what went wrong, in one line (the thread's last error; it names the
 * stage program's flag for a value, e.g. "--head-dim" for d). Outputs are untouched by a call
 * that fails its checks.
 *
 * Layout for both halves: Q, O, dO, dQ [B, H, N_q, d]; K, V, dK, dV [B, H_kv, N_k, d], row-major,
 * contiguous; query head h reads kv head h / (H / H_kv). LSE [B, H, N_q], float32, natural log
 * (-inf for a row that sees no key), as the forward (fa04_forward, fa05_forward) returned it.
 * causal: non-zero for the bottom-right aligned mask (query i sees key j iff j <= i + N_k - N_q;
 * the same as PyTorch's is_causal only when N_q == N_k). scale: > 0, or 0 for 1/sqrt(d).
 */
#ifndef FA06_H
#define FA06_H
#include <stdint.h>

#ifndef FA06_API
#define FA06_API /* the library's build marks these as its only exported symbols */
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum fa06_dtype { FA06_FP32 = 0, FA06_FP16 = 1, FA06_BF16 = 2 };

enum fa06_status {
  FA06_OK = 0,
  FA06_INVALID_ARGUMENT = 1, /* a null pointer, a size < 1, H % H_kv != 0, a bad dtype, scale,
                                block or thread count, an unknown kernel, d above a kernel's limit */
  FA06_UNSUPPORTED = 2,      /* a valid call this build cannot run (the GPU half without CUDA; a
                                window or softcap the GPU kernel does not take) */
  FA06_CUDA_ERROR = 3,       /* CUDA failed (no GPU, a launch or runtime error) */
  FA06_OUT_OF_MEMORY = 4     /* host memory (CPU) or the kernel's workspace (GPU) did not fit */
};

/* ---- CPU (backward_tiled.hpp), float32, host pointers ---------------------------------------- */

/* dQ, dK, dV of a loss L given dO = dL/dO, from Q, K, V, O and LSE, on `threads` OpenMP threads
 * (0: all). Br, Bc: block rows, or 0 for the stage's default (64 for d <= 64, else 128). The
 * result is bit-identical for any thread count. Returns when dQ, dK, dV are written. */
FA06_API int fa06_backward_cpu(const float* Q, const float* K, const float* V, const float* O,
                               const float* dO, const float* LSE, float* dQ, float* dK, float* dV,
                               int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d,
                               int causal, float scale, int64_t Br, int64_t Bc, int threads);

/* As fa06_backward_cpu, with a sliding window and a softcap (issue 34; docs/math.md section 8), as
 * the forward that gave O and LSE had them (fa04_forward_variant, fa05_forward_variant):
 *   window_left, window_right: keys (rows), query i sees key j iff
 *       i + N_k - N_q - window_left <= j <= i + N_k - N_q + window_right
 *     (-1: that side unbounded; with causal the right side is 0). -1, -1 is no window.
 *   softcap: c > 0, the scores were c tanh(s / c) of the scaled ones s (dS is multiplied by the
 *     slope 1 - tanh^2); 0 for none.
 * Rows that see no key get dQ = 0; keys no row sees get dK = dV = 0. A side below -1 (names
 * "--window") or a softcap < 0 or not finite (names "--softcap"): FA06_INVALID_ARGUMENT. */
FA06_API int fa06_backward_cpu_variant(const float* Q, const float* K, const float* V, const float* O,
                                       const float* dO, const float* LSE, float* dQ, float* dK, float* dV,
                                       int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d,
                                       int causal, float scale, int64_t Br, int64_t Bc, int threads,
                                       int64_t window_left, int64_t window_right, float softcap);

/* As fa06_backward_cpu_variant, on a packed variable-length batch (issue 34; common/varlen.hpp,
 * docs/math.md section 8), the backward of fa04_forward_varlen: each sequence's gradients as a
 * problem of its own (B = 1, N_q(b) queries, N_k(b) keys, its mask aligned to N_k(b) - N_q(b)).
 *   cu_seqlens_q, cu_seqlens_k: host int32 [B + 1] each, as fa04_forward_varlen's (cu[0] = 0,
 *       non-decreasing, cu_seqlens_q[B] = total_q, cu_seqlens_k[B] = total_k; lengths may be 0).
 *   Q, O, dO, dQ : [total_q, H, d], token-major, contiguous, float32
 *   K, V, dK, dV : [total_k, H_kv, d]; query head h reads kv head h / (H / H_kv)
 *   LSE          : [H, total_q], float32, natural log, as the forward returned it
 *   causal, scale, Br, Bc, threads, window_left, window_right, softcap: as
 *       fa06_backward_cpu_variant, for every sequence, as the forward had them.
 * A sequence with no key gets dQ = 0 on its queries; one with no query dK = dV = 0 on its keys;
 * rows and keys the mask leaves alone likewise. Runs stage 06 once per sequence.
 * Errors (FA06_INVALID_ARGUMENT, outputs untouched, the message naming the argument): a NULL
 * pointer; B < 1; an offsets array whose cu[0] != 0, that decreases, or whose last entry is not
 * total_q (names "--cu-seqlens-q") or total_k ("--cu-seqlens-k"); no query or no key in all; a
 * sequence of more than 2^40 scores; what fa06_backward_cpu_variant refuses. */
FA06_API int fa06_backward_cpu_varlen(const float* Q, const float* K, const float* V, const float* O,
                                      const float* dO, const float* LSE, float* dQ, float* dK, float* dV,
                                      const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, int64_t B,
                                      int64_t total_q, int64_t total_k, int64_t H, int64_t H_kv, int64_t d,
                                      int causal, float scale, int64_t Br, int64_t Bc, int threads,
                                      int64_t window_left, int64_t window_right, float softcap);

/* ---- GPU (runner_bwd.hpp), device pointers ---------------------------------------------------- */

/* The same gradients with GPU kernel `kernel` ("gpu_v1", "gpu_v2", ... fa06_kernel_name; "auto"
 * for the fastest measured for this GPU, d and dtype, which fa06_runs names) on `stream` (a
 * cudaStream_t; NULL: the default stream). Any d up to 256 runs on the tensor cores in fp16/bf16
 * (fa06_runs_width: the native width it is zero-padded to).
 * Q ... dV in `dtype` (enum fa06_dtype), LSE float32; device memory, 16-byte aligned (as
 * cudaMalloc's and PyTorch's allocations are). Returns when the work is queued, not done. The
 * workspace (fa06_workspace_bytes) is taken from and given back to a stream-ordered pool. */
FA06_API int fa06_backward(const char* kernel, const void* Q, const void* K, const void* V, const void* O,
                           const void* dO, const float* LSE, void* dQ, void* dK, void* dV, int64_t B,
                           int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int dtype,
                           int causal, float scale, void* stream);

/* As fa06_backward, with a window and a softcap (arguments as fa06_backward_cpu_variant's), on
 * the kernels whose plan takes them. A bad value: FA06_INVALID_ARGUMENT naming "--window" or
 * "--softcap", as are the refusals fa06_backward makes (kernel, dtype, d, pointers). A valid window
 * or softcap the kernel's plan does not take: FA06_UNSUPPORTED with the plan's line (the CPU
 * backward takes both). Checked before any kernel runs.
 * Without CUDA in the build: FA06_UNSUPPORTED. */
FA06_API int fa06_backward_variant(const char* kernel, const void* Q, const void* K, const void* V,
                                   const void* O, const void* dO, const float* LSE, void* dQ, void* dK,
                                   void* dV, int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k,
                                   int64_t d, int dtype, int causal, float scale, int64_t window_left,
                                   int64_t window_right, float softcap, void* stream);

/* A packed variable-length batch (issue 34; common/varlen.hpp) in one launch of gpu_v3 (kernel
 * "gpu_v3" or "auto"; fp16/bf16): each key block reads its sequence's offsets
 * (kernels/bwd_v3_split.cuh). Layout as fa05_forward_varlen's: Q, O, dO, dQ [total_q, H, d]; K, V,
 * dK, dV [total_k, H_kv, d]; LSE [H, total_q] float32; cu_seqlens_q, cu_seqlens_k device [B + 1]
 * int32 (not read on the host: validate them where they are made; the kernel clamps them to the
 * totals); max_seqlen_q/k the longest sequence's. Window and softcap as fa06_backward_variant's.
 * Keys no query sees get dK = dV = 0, rows that see no key dQ = 0. Another kernel, fp32 or a _det
 * variant: FA06_INVALID_ARGUMENT naming "--cu-seqlens-q". Without CUDA in the build: FA06_UNSUPPORTED. */
FA06_API int fa06_backward_varlen(const char* kernel, const void* Q, const void* K, const void* V,
                                  const void* O, const void* dO, const float* LSE, void* dQ, void* dK,
                                  void* dV, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k,
                                  int64_t B, int64_t total_q, int64_t total_k, int64_t max_seqlen_q,
                                  int64_t max_seqlen_k, int64_t H, int64_t H_kv, int64_t d, int dtype,
                                  int causal, float scale, int64_t window_left, int64_t window_right,
                                  float softcap, void* stream);

/* Bytes of GPU workspace fa06_backward takes for this problem (D, and dQ's float32 accumulator
 * for the tensor-core kernels, and the zero-padded copies of Q, K, V, dO, dK, dV where d is not a
 * native width: fa06_runs_width), written to *bytes. Needs no GPU. */
FA06_API int fa06_workspace_bytes(const char* kernel, int64_t B, int64_t H, int64_t H_kv, int64_t N_q,
                                  int64_t N_k, int64_t d, int dtype, int causal, int64_t* bytes);

/* The kernel that really runs when `kernel` is asked for this head dim and dtype on the current
 * GPU (or, without one, a Hopper): `kernel` itself, a fallback (e.g. "gpu_v1" in fp32, "gpu_v3"
 * for "gpu_v2" above d = 128), or for "auto" the fastest measured. NULL (and fa06_last_error())
 * for an unknown kernel, a bad d or dtype, or a build without CUDA. */
FA06_API const char* fa06_runs(const char* kernel, int64_t d, int dtype);

/* The head dim that kernel runs at: d itself (gpu_v1), or the native width the tensor-core
 * kernels are compiled for (32, 64, 96, 128, 192, 256) that d is zero-padded to (d = 80 runs at
 * 96). -1 (and fa06_last_error()) where fa06_runs gives NULL. */
FA06_API int64_t fa06_runs_width(const char* kernel, int64_t d, int dtype);

/* Why: auto's reason, a fallback's, the padding ("" if nothing to say), in one line; valid until
 * this thread's next call of it. NULL (and fa06_last_error()) where fa06_runs gives NULL. */
FA06_API const char* fa06_runs_note(const char* kernel, int64_t d, int dtype);

/* The GPU kernels, in course order: i from 0 to fa06_kernel_count() - 1 (0 without CUDA). */
FA06_API int fa06_kernel_count(void);
FA06_API const char* fa06_kernel_name(int i);

/* 1 if this build has the GPU half, else 0. */
FA06_API int fa06_has_gpu(void);

/* The message of this thread's last non-OK status ("" if none). Valid until the next call. */
FA06_API const char* fa06_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
