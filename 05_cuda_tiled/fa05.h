/* Stage 05 as a C library (libfa05.so), for callers outside C++: tools/compare_torch.py loads it
 * with ctypes and passes PyTorch tensors' device pointers, so our kernels and PyTorch's SDPA
 * backends run in one process on the same data.
 *
 * Every function returns a status and never exits, aborts or prints; after a non-zero status
 * fa05_last_error() says what went wrong, in one line (the thread's last error; it names the
 * stage program's flag for a value, e.g. "--head-dim" for d).
 */
#ifndef FA05_H
#define FA05_H
#include <stdint.h>

#ifndef FA05_API
#define FA05_API /* the library's build marks these as its only exported symbols */
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum fa05_dtype { FA05_FP32 = 0, FA05_FP16 = 1, FA05_BF16 = 2 };

enum fa05_status {
  FA05_OK = 0,
  FA05_INVALID_ARGUMENT = 1, /* a null pointer, a size < 1, H % H_kv != 0, a bad dtype or scale */
  FA05_UNSUPPORTED = 2,      /* a valid problem this kernel cannot run (e.g. d above its limit) */
  FA05_CUDA_ERROR = 3,       /* CUDA or cuBLAS failed (no GPU, a launch or runtime error) */
  FA05_OUT_OF_MEMORY = 4     /* the kernel's workspace did not fit in GPU memory */
};

/* Forward attention with kernel `kernel` ("v1", "cublas", ...: fa05_kernel_name; or "auto", the
 * fastest measured for this GPU, dtype and d: fa05_runs names it) on `stream`
 * (a cudaStream_t; NULL for the default stream). Returns when the work is queued, not done.
 *   Q, O : device pointers, [B, H, N_q, d], row-major, in `dtype` (enum fa05_dtype)
 *   K, V : device pointers, [B, H_kv, N_k, d], in `dtype`; query head h reads kv head h / (H / H_kv)
 *   LSE  : device pointer, [B, H, N_q], float32, natural log (-inf for a row that sees no key)
 *   causal: non-zero for the bottom-right aligned mask (query i sees key j iff j <= i + N_k - N_q)
 *   scale : softmax scale > 0, or 0 for 1/sqrt(d)
 * Q, K, V, O must be device memory aligned to their element size, LSE to 4 bytes
 * (FA05_INVALID_ARGUMENT otherwise); the tensor-core versions also need Q, K, V, O 16-byte
 * aligned (FA05_UNSUPPORTED otherwise) where they read them in place, i.e. unless d needs padded
 * copies (d not one of the kernel's widths and, for v13, not a multiple of 8). Checked before any
 * kernel runs.
 * Returns an fa05_status. */
FA05_API int fa05_forward(const char* kernel, const void* Q, const void* K, const void* V, void* O, float* LSE,
                 int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int dtype,
                 int causal, float scale, void* stream);

/* As fa05_forward, with a sliding window and a softcap (issue 34; docs/math.md section 8):
 *   window_left, window_right: query i sees key j iff
 *       i + N_k - N_q - window_left <= j <= i + N_k - N_q + window_right
 *     (-1: that side unbounded; with causal the right side is 0). -1, -1 is no window.
 *   softcap: c > 0 replaces each scaled score s by c tanh(s / c) before the softmax (Gemma 2);
 *     0 for none.
 * Kernels "v1", "v13" and "v14" take them, and "auto" (which runs one of them); the others return
 * FA05_UNSUPPORTED. A side below -1 or a softcap < 0 or not finite: FA05_INVALID_ARGUMENT.
 * Returns an fa05_status. */
FA05_API int fa05_forward_variant(const char* kernel, const void* Q, const void* K, const void* V, void* O,
                         float* LSE, int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k,
                         int64_t d, int dtype, int causal, float scale, int64_t window_left,
                         int64_t window_right, float softcap, void* stream);
/* Decode on a KV cache (issue 33; common/kv_cache.hpp gives the semantics), kernel "v14" or
 * "auto" (which runs v14 here), fp16 or bf16. As fa05_forward, with N_k the cache's capacity per
 * sequence, and:
 *   cache_lens  : device pointer, [B] int32, keys of sequence b (0 ... N_k; the causal diagonal is
 *                 aligned to it); NULL: N_k each
 *   block_table : device pointer, [B, pages_per_seq] int32, the page that holds keys n P ... n P + P - 1
 *                 of sequence b; NULL: K, V contiguous [B, H_kv, N_k, d]. With a table K and V are
 *                 [num_pages, H_kv, page_size, d] and N_k must equal pages_per_seq * page_size
 *                 (page_size 16 ... 256; d a multiple of 8).
 * The arrays are not read on the host (no synchronisation): lengths outside 0 ... N_k are clamped
 * and a page outside 0 ... num_pages - 1 reads as zeros; validate them where they are made.
 * Returns an fa05_status. */
FA05_API int fa05_forward_kvcache(const char* kernel, const void* Q, const void* K, const void* V, void* O,
                         float* LSE, int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k,
                         int64_t d, int dtype, int causal, float scale, const int32_t* cache_lens,
                         const int32_t* block_table, int64_t page_size, int64_t pages_per_seq,
                         int64_t num_pages, void* stream);

/* A packed variable-length batch (issue 34; common/varlen.hpp gives the semantics, as
 * FlashAttention's varlen call takes one), in one launch of kernel "v13" or "auto" (which runs v13
 * here), fp16 or bf16, on an sm_90a GPU:
 *   Q, O : device pointers, [total_q, H, d] (token-major: the heads of one token adjacent)
 *   K, V : device pointers, [total_k, H_kv, d]
 *   LSE  : device pointer, [H, total_q], float32 (head h's row holds every token of the batch)
 *   cu_seqlens_q, cu_seqlens_k: device pointers, [B + 1] int32 each: sequence b has the queries
 *     cu_seqlens_q[b] ... cu_seqlens_q[b + 1] - 1 and the keys cu_seqlens_k[b] ... (0 = cu[0] <=
 *     cu[1] <= ... <= cu[B] = total); a sequence may have no query or no key
 *   max_seqlen_q, max_seqlen_k: the longest sequence's queries and keys (they size the grid)
 * Each sequence is attended alone, with the causal mask aligned to its own N_k - N_q, the window
 * and the softcap as fa05_forward_variant takes them. The offsets are not read on the host (no
 * synchronisation): validate them where they are made; the kernel clamps each offset to 0 ...
 * total and each length to the maximum, so bad offsets cannot reach outside the tensors (a row of a
 * sequence longer than max_seqlen_q is then not written).
 * Returns an fa05_status (FA05_UNSUPPORTED for another kernel, fp32, or a GPU without wgmma). */
FA05_API int fa05_forward_varlen(const char* kernel, const void* Q, const void* K, const void* V, void* O,
                        float* LSE, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, int64_t B,
                        int64_t total_q, int64_t total_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                        int64_t H, int64_t H_kv, int64_t d, int dtype, int causal, float scale,
                        int64_t window_left, int64_t window_right, float softcap, void* stream);

/* FP8 forward (issue 35; kernel v15, FlashAttention-3's FP8 design: docs/fp8.md), d = 128, on an
 * sm_90a GPU (FA05_UNSUPPORTED elsewhere, and for another d). Layout, causal and scale as
 * fa05_forward; O is bf16. fa05_forward_fp8 takes Q, K, V in bf16 and quantises them on the GPU
 * to e4m3 with one power-of-two scale per 64 query rows of a (batch, head) and per 128 keys of a
 * (batch, kv head) (the smallest 2^k with max |x| <= 448 2^k); fa05_forward_fp8_e4m3 takes them
 * already in e4m3 (torch.float8_e4m3fn), with those scales as float32 device arrays:
 *   scale_q [B H, ceil(N_q / 64)], scale_k and scale_v [B H_kv, ceil(N_k / 128)], slice-major
 * (element x of a block stands for x * its scale; any positive finite scale works, not only
 * powers of two). Both allocate workspace (V transposed; fa05_forward_fp8 also the e4m3 copies).
 * Q, K, V and O must be 16-byte aligned (FA05_UNSUPPORTED), LSE and the scales 4-byte aligned
 * (FA05_INVALID_ARGUMENT): checked before any launch, so nothing is written. A non-finite bf16 input
 * gives NaN in the rows it reaches. Returns an fa05_status. */
FA05_API int fa05_forward_fp8(const void* Q, const void* K, const void* V, void* O, float* LSE, int64_t B, int64_t H,
                     int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int causal, float scale, void* stream);
FA05_API int fa05_forward_fp8_e4m3(const void* Q, const void* K, const void* V, const float* scale_q,
                          const float* scale_k, const float* scale_v, void* O, float* LSE, int64_t B, int64_t H,
                          int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d, int causal, float scale, void* stream);
/* Bytes of GPU workspace fa05_forward allocates for this problem (0 for the FlashAttention
 * kernels but v10 ... v13, whose tile counter takes 4; O(N^2) for "cublas"; plus zero-padded copies
 * of Q, K, V, O where d needs them), written to *bytes. kernel "v15" gives fa05_forward_fp8's
 * workspace (the e4m3 copies, their scales, V transposed and the tile counter; d = 128 only).
 * Returns an fa05_status. */
FA05_API int fa05_workspace_bytes(const char* kernel, int64_t B, int64_t H, int64_t H_kv, int64_t N_q,
                         int64_t N_k, int64_t d, int dtype, int causal, int64_t* bytes);

/* The name of the kernel that really runs when `kernel` is asked for head dim d in `dtype`:
 * `kernel` itself, or "v1" where a tensor-core version does not cover d or dtype (v5 for a wgmma
 * version off sm_90, v13 for v12 past d = 128); for "auto", its choice for a prefill-shaped
 * problem (N_q = N_k = 1024). NULL (and
 * fa05_last_error()) for an unknown kernel or a bad d or dtype. */
FA05_API const char* fa05_runs(const char* kernel, int64_t d, int dtype);

/* Gives the memory the library keeps cached for reuse (the cuBLAS baseline's S and P: O(N^2))
 * on the current device back to the driver, e.g. for PyTorch's allocator. Returns an fa05_status. */
FA05_API int fa05_release_cached_memory(void);

/* The kernels, in course order: i from 0 to fa05_kernel_count() - 1. NULL past the end. */
FA05_API int fa05_kernel_count(void);
FA05_API const char* fa05_kernel_name(int i);
FA05_API const char* fa05_kernel_idea(int i);

/* The message of this thread's last non-OK status ("" if none). Valid until the next call. */
FA05_API const char* fa05_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
