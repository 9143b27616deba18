// The attention problem every stage solves, and the index arithmetic they all share.
//
// Layout (README.md, "Shared semantics"): every tensor is row-major and contiguous.
//   Q, O       : [B, H,    N_q, d]
//   K, V       : [B, H_kv, N_k, d]      (H % H_kv == 0: GQA/MQA; H_kv == H: plain multi-head)
//   LSE        : [B, H,    N_q]         (natural log, -inf for a row that sees no key)
//   dO, dQ like Q; dK, dV like K (the backward's inputs and outputs)
// Query head h reads key/value head h / (H / H_kv) (PyTorch's `enable_gqa` convention).
// causal is bottom-right aligned: query i sees key j iff j <= i + N_k - N_q
// (FlashAttention >= 2.1, PyTorch `causal_lower_right`). It equals PyTorch's `is_causal=True`
// (top-left, j <= i) only when N_q == N_k.
// Variants (docs/math.md, "Variants"): a sliding window (left, right) keeps, of those, the keys
// i + N_k - N_q - left <= j <= i + N_k - N_q + right (-1: that side unbounded; causal is right = 0
// and composes with it); a softcap c > 0 replaces each scaled score s by c tanh(s / c) before the
// softmax (Gemma 2). Either way a query row sees ONE contiguous range of keys (key_range() below).
// A packed variable-length batch (common/varlen.hpp) runs each of its sequences as a B = 1 problem
// on offset pointers into token-major tensors: token_major and lse_head_stride below say so, and
// every offset helper honours them, so a stage that indexes through them runs varlen unchanged.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

// The index helpers below are also called inside CUDA kernels (stage 05 takes an AttnProblem by
// value): under nvcc they are compiled for both the host and the device.
#if defined(__CUDACC__)
#define FA_HOST_DEVICE __host__ __device__
#else
#define FA_HOST_DEVICE
#endif

namespace fa {

struct AttnProblem {
  int64_t B = 1;     // batch
  int64_t H = 1;     // query heads
  int64_t H_kv = 1;  // key/value heads
  int64_t N_q = 1;   // query rows
  int64_t N_k = 1;   // key/value rows
  int64_t d = 64;    // head dimension
  bool causal = false;
  float scale = 0.f;  // softmax scale; 0 means "not set": use 1/sqrt(d) (see resolved_scale())
  int64_t window_left = -1;   // sliding window: keys at most `left` before row i's diagonal (-1: any)
  int64_t window_right = -1;  // ... and at most `right` after it (-1: any; causal is right = 0)
  float softcap = 0.f;        // c > 0: S = c tanh(S / c) on the scaled scores; 0 means none
  // The layout of the rows (common/varlen.hpp). false: the course's [B, H, N, d] above. true:
  // token-major, Q and O [B, N_q, H, d], K and V [B, N_k, H_kv, d] (FlashAttention's layout: the
  // heads of one token adjacent), so row i of a head is q_row_stride() = H d elements after row
  // i - 1, not d. A sequence of a packed batch is a B = 1 token-major problem on pointers offset
  // to its first token.
  bool token_major = false;
  // Elements between LSE[b, h, i] and LSE[b, h + 1, i]; 0: N_q (LSE [B, H, N_q], contiguous).
  // A packed batch's LSE is [H, total_q] (FlashAttention's varlen layout): total_q.
  int64_t lse_head_stride = 0;

  // The scale actually applied: S = scale * Q K^T.
  float resolved_scale() const { return scale != 0.f ? scale : 1.f / std::sqrt(float(d)); }

  // Element counts of the tensors above.
  int64_t q_elems() const { return B * H * N_q * d; }
  int64_t kv_elems() const { return B * H_kv * N_k * d; }
  int64_t lse_elems() const { return B * H * N_q; }

  // Key/value head read by query head h (GQA: H / H_kv query heads share one kv head).
  FA_HOST_DEVICE int64_t kv_head(int64_t h) const { return h / (H / H_kv); }

  // Offset (elements) of row i of Q or O for batch b, query head h.
  // The GPU kernels that read a packed batch (v13, gpu_v3) address its rows themselves: in device code
  // the offsets stay the contiguous formula alone, so the kernels compile exactly as measured.
  FA_HOST_DEVICE int64_t q_offset(int64_t b, int64_t h, int64_t i) const {
#if !defined(__CUDA_ARCH__)
    if (token_major) return ((b * N_q + i) * H + h) * d;
#endif
    return ((b * H + h) * N_q + i) * d;
  }
  // Offset (elements) of row j of K or V seen by query head h (the GQA mapping is applied here).
  FA_HOST_DEVICE int64_t kv_offset(int64_t b, int64_t h, int64_t j) const {
#if !defined(__CUDA_ARCH__)
    if (token_major) return ((b * N_k + j) * H_kv + kv_head(h)) * d;
#endif
    return ((b * H_kv + kv_head(h)) * N_k + j) * d;
  }
  // Offset (elements) of LSE[b, h, i].
  FA_HOST_DEVICE int64_t lse_offset(int64_t b, int64_t h, int64_t i) const {
#if !defined(__CUDA_ARCH__)
    if (lse_head_stride > 0) return (b * H + h) * lse_head_stride + i;
#endif
    return (b * H + h) * N_q + i;
  }
  // Elements from one row of Q or O (K or V) to the next of the same head: what a stage that
  // copies a block of consecutive rows steps by (d contiguous, H d or H_kv d token-major).
  int64_t q_row_stride() const { return token_major ? H * d : d; }
  int64_t kv_row_stride() const { return token_major ? H_kv * d : d; }
  // Elements an LSE buffer must span: lse_offset(B - 1, H - 1, N_q - 1) + 1 (lse_elems() when
  // contiguous). A stage's scratch LSE indexed by lse_offset() is this long.
  int64_t lse_span() const { return lse_offset(B - 1, H - 1, N_q - 1) + 1; }

  // The keys query row i sees: key_begin <= j < key_end, one contiguous range (empty when the two
  // are equal). This is the ONE place the mask is written; every stage asks it. With
  // diag = i + N_k - N_q, the key on row i's bottom-right diagonal:
  //   j >= diag - window_left                  (window_left >= 0)
  //   j <= diag + window_right, j <= diag       (window_right >= 0; causal: right = 0)
  // Both ends rise with i, so a block of query rows sees the keys from its first row's begin to
  // its last row's end: key blocks wholly outside are skipped, the ones the band's edges cross
  // are masked (stages 04 and 06).
  struct KeyRange {
    int64_t begin, end;
  };
  FA_HOST_DEVICE KeyRange key_range(int64_t i) const {
    const int64_t diag = i + N_k - N_q;
    // Keys past the diagonal row i may see (-1: any). Causal allows none, whatever the window's
    // right side (-1 or >= 0): min(right, 0) = 0.
    const int64_t right = causal ? 0 : window_right;
    // (A side wider than N_q + N_k bounds nothing: it is treated as -1, and cannot overflow.)
    const int64_t lo = window_left < 0 || window_left > N_q + N_k ? 0 : diag - window_left;
    const int64_t hi = right < 0 || right > N_q + N_k ? N_k : diag + right + 1;
    const auto clamp = [this](int64_t j) { return j < 0 ? int64_t(0) : (j > N_k ? N_k : j); };
    const int64_t b = clamp(lo), e = clamp(hi);
    return {b, e < b ? b : e};
  }
  FA_HOST_DEVICE int64_t key_begin(int64_t i) const { return key_range(i).begin; }
  FA_HOST_DEVICE int64_t key_end(int64_t i) const { return key_range(i).end; }
  // Does query row i see key row j?
  FA_HOST_DEVICE bool visible(int64_t i, int64_t j) const {
    const KeyRange r = key_range(i);
    return r.begin <= j && j < r.end;
  }
  // How many keys query row i sees; 0 for a fully masked row.
  FA_HOST_DEVICE int64_t keys_seen(int64_t i) const {
    const KeyRange r = key_range(i);
    return r.end - r.begin;
  }
  bool has_window() const { return window_left >= 0 || window_right >= 0; }

  // A scaled score after the softcap (Gemma 2, S = c tanh(S / c): |S| < c, so exp(S) cannot
  // overflow), and the slope of that map, d capped / d s = 1 - tanh^2(s / c), from the capped
  // value itself (tanh = capped / c): the backward's dS_raw = dS * slope. Identity, slope 1, without.
  template <class T>
  T capped(T s) const {
    return softcap > 0.f ? T(softcap) * std::tanh(s / T(softcap)) : s;
  }
  // A masked score (-inf) gets slope 0, not 1 - inf = -inf: its P is 0 and 0 * -inf would be NaN.
  template <class T>
  T capped_slope(T s_capped) const {
    if (!(softcap > 0.f)) return T(1);
    const T t = s_capped / T(softcap);
    return t * t >= T(1) ? T(0) : T(1) - t * t;
  }

  // FLOPs by the FlashAttention convention: forward 4 * B * H * N_q * N_k * d (two GEMMs of
  // 2*N_q*N_k*d each), halved for causal; backward is 2.5x the forward (5 GEMMs instead of 2).
  // With a window, the (query, key) pairs it keeps are counted exactly: 4 * B * H * d * pairs.
  double forward_flops() const {
    if (has_window()) {
      double pairs = 0;
      for (int64_t i = 0; i < N_q; ++i) pairs += double(keys_seen(i));
      return 4.0 * double(B) * H * d * pairs;
    }
    return 4.0 * double(B) * H * N_q * N_k * d * (causal ? 0.5 : 1.0);
  }
  double backward_flops() const { return 2.5 * forward_flops(); }

  std::string describe() const;  // "B=1 H=12 H_kv=12 N_q=256 N_k=256 d=32 causal=0 scale=0.1768"
};

// A problem from its sizes (scale unset: 1/sqrt(d)); tests build many.
inline AttnProblem make_problem(int64_t B, int64_t H, int64_t H_kv, int64_t N_q, int64_t N_k, int64_t d,
                                bool causal) {
  AttnProblem p;
  p.B = B, p.H = H, p.H_kv = H_kv, p.N_q = N_q, p.N_k = N_k, p.d = d, p.causal = causal;
  return p;
}

// Throws InputError (common/errors.hpp) naming the offending field if the problem is not valid:
// every size >= 1, H % H_kv == 0, scale finite and > 0 when set, window sides >= -1 (--window),
// softcap finite and >= 0 (0: none; --softcap), and the element counts
// B*H*N_q*d, B*H_kv*N_k*d and B*H*N_q*N_k at most 2^40 (so no size arithmetic can overflow).
void validate(const AttnProblem& p);

}  // namespace fa
