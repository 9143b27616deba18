/* Stage 04 as a C library (libfa04.so), for callers outside C++: tools/compare_torch_cpu.py loads
 * it with ctypes and passes PyTorch CPU tensors' data pointers, so stage 04 and PyTorch's
 * scaled_dot_product_attention run in one process, on the same data, timed alternately.
 *
 * Every function returns a status and never exits, aborts or prints; after a non-zero status
 * fa04_last_error() says what went wrong, in one line (it names the stage program's flag for a
 * value, e.g. "--head-dim" for d).
 */
#ifndef FA04_H
#define FA04_H
#include <stdint.h>

#ifndef FA04_API
#define FA04_API /* the library's build marks these as its only exported symbols */
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum fa04_status {
  FA04_OK = 0,
  FA04_INVALID_ARGUMENT = 1, /* a null pointer, a size < 1, H % H_kv != 0, a bad scale or block,
                                threads outside 0..256, bad offsets of a packed batch */
  FA04_OUT_OF_MEMORY = 2     /* the per-thread block buffers would not fit in 90% of the memory */
};

/* Forward attention with stage 04 (tiled.hpp), float32, on `threads` OpenMP threads (0: all;
 * never more than there are query blocks). Scores past float32's range (|scale q.k| > 3.4e38)
 * overflow to inf and give NaN rows, as in any float32 attention; the stage program warns about
 * such inputs, this function does not check them.
 *   Q, O : [B, H, N_q, d], row-major, contiguous, float32
 *   K, V : [B, H_kv, N_k, d]; query head h reads kv head h / (H / H_kv)
 *   LSE  : [B, H, N_q], natural log (-inf for a row that sees no key)
 *   causal: non-zero for the bottom-right aligned mask (query i sees key j iff j <= i + N_k - N_q;
 *           the same as PyTorch's is_causal when N_q == N_k)
 *   scale : softmax scale > 0, or 0 for 1/sqrt(d)
 *   Br, Bc: block sizes (rows), or 0 for the stage's default (from M = the L2 size of one core)
 * Returns when O and LSE are written. Returns an fa04_status. */
FA04_API int fa04_forward(const float* Q, const float* K, const float* V, float* O, float* LSE,
                          int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d,
                          int causal, float scale, int64_t Br, int64_t Bc, int threads);

/* As fa04_forward, with a sliding window and a softcap (issue 34; docs/math.md section 8):
 *   window_left, window_right: keys (rows), query i sees key j iff
 *       i + N_k - N_q - window_left <= j <= i + N_k - N_q + window_right
 *     (-1: that side unbounded; with causal the right side is 0). -1, -1 is no window. A block
 *     that lies wholly outside the band is skipped: O(N_q (window_left + window_right + Br)) work.
 *   softcap: c > 0 replaces each scaled score s by c tanh(s / c) before the mask and the softmax
 *     (Gemma 2); 0 for none.
 * A row that sees no key gets O = 0 and LSE = -inf. A side below -1 (names "--window") or a
 * softcap < 0 or not finite (names "--softcap"): FA04_INVALID_ARGUMENT, outputs untouched.
 * Returns when O and LSE are written. Returns an fa04_status. */
FA04_API int fa04_forward_variant(const float* Q, const float* K, const float* V, float* O, float* LSE,
                                  int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d,
                                  int causal, float scale, int64_t Br, int64_t Bc, int threads,
                                  int64_t window_left, int64_t window_right, float softcap);

/* As fa04_forward_variant, on a packed variable-length batch (issue 34; common/varlen.hpp,
 * docs/math.md section 8; FlashAttention's flash_attn_varlen_func layout): B sequences of their
 * own lengths concatenated along the token axis, each attended as a problem of its own (B = 1,
 * N_q(b) queries, N_k(b) keys, the causal mask and window aligned to N_k(b) - N_q(b)); a query
 * never sees a key of another sequence.
 *   cu_seqlens_q, cu_seqlens_k: host int32 [B + 1] each, cumulative offsets: cu[0] = 0,
 *       non-decreasing, cu_seqlens_q[B] = total_q and cu_seqlens_k[B] = total_k. Sequence b has
 *       the query tokens cu_seqlens_q[b] .. cu_seqlens_q[b+1] - 1 and the key tokens
 *       cu_seqlens_k[b] .. cu_seqlens_k[b+1] - 1; either length may be 0.
 *   Q, O : [total_q, H, d], token-major (row t, head h at (t H + h) d), contiguous, float32
 *   K, V : [total_k, H_kv, d]; query head h reads kv head h / (H / H_kv)
 *   LSE  : [H, total_q], float32, natural log (head h's row is contiguous)
 *   causal, scale, Br, Bc, threads, window_left, window_right, softcap: as fa04_forward_variant,
 *       for every sequence; the blocks and threads are picked per sequence from Br, Bc, threads
 *       (0: stage 04's defaults for that sequence's lengths).
 * A sequence with no key gives its queries O = 0 and LSE = -inf, as does a row the mask leaves
 * without a key. Runs stage 04 once per sequence (one OpenMP region each).
 * Errors (FA04_INVALID_ARGUMENT, outputs untouched, the message naming the argument): a NULL
 * pointer; B < 1; an offsets array whose cu[0] != 0, that decreases, or whose last entry is not
 * total_q (names "--cu-seqlens-q") or total_k ("--cu-seqlens-k"); no query or no key in all; a
 * sequence of more than 2^40 scores; what fa04_forward_variant refuses (heads, head dim, scale,
 * blocks, threads, window, softcap). FA04_OUT_OF_MEMORY as fa04_forward, for any sequence.
 * Returns when O and LSE are written. Returns an fa04_status. */
FA04_API int fa04_forward_varlen(const float* Q, const float* K, const float* V, float* O, float* LSE,
                                 const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_k, int64_t B,
                                 int64_t total_q, int64_t total_k, int64_t H, int64_t H_kv, int64_t d,
                                 int causal, float scale, int64_t Br, int64_t Bc, int threads,
                                 int64_t window_left, int64_t window_right, float softcap);

/* The block sizes (rows) fa04_forward runs this problem with when given Br = Bc = 0 and
 * `threads` (tiled::blocks_for: the CPU default, smaller for short sequences and few tasks),
 * written to *Br and *Bc. Returns an fa04_status. */
FA04_API int fa04_blocks_for(int64_t B, int64_t H, int64_t N_q, int64_t N_k, int64_t d, int causal,
                             int threads, int64_t* Br, int64_t* Bc);

/* The machine's fp32 fused multiply-add peak in GFLOP/s on `threads` threads (1 to 256),
 * measured (best of `repeats` (1 to 100) runs of a register-only FMA loop of about 60 ms each
 * with one thread per core: fma_peak.hpp); < 0 on a bad argument. */
FA04_API double fa04_fma_peak_gflops(int threads, int repeats);

/* What this build targets: "AVX-512", "AVX2" or "SSE2", and floats per vector register. */
FA04_API const char* fa04_isa(void);
FA04_API int fa04_vector_floats(void);

/* The message of this thread's last non-OK status ("" if none). Valid until the next call. */
FA04_API const char* fa04_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
