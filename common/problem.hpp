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

  // The scale actually applied: S = scale * Q K^T.
  float resolved_scale() const { return scale != 0.f ? scale : 1.f / std::sqrt(float(d)); }

  // Element counts of the tensors above.
  int64_t q_elems() const { return B * H * N_q * d; }
  int64_t kv_elems() const { return B * H_kv * N_k * d; }
  int64_t lse_elems() const { return B * H * N_q; }

  // Key/value head read by query head h (GQA: H / H_kv query heads share one kv head).
  FA_HOST_DEVICE int64_t kv_head(int64_t h) const { return h / (H / H_kv); }

  // Offset (elements) of row i of Q or O for batch b, query head h.
  FA_HOST_DEVICE int64_t q_offset(int64_t b, int64_t h, int64_t i) const { return ((b * H + h) * N_q + i) * d; }
  // Offset (elements) of row j of K or V seen by query head h (the GQA mapping is applied here).
  FA_HOST_DEVICE int64_t kv_offset(int64_t b, int64_t h, int64_t j) const {
    return ((b * H_kv + kv_head(h)) * N_k + j) * d;
  }
  // Offset (elements) of LSE[b, h, i].
  FA_HOST_DEVICE int64_t lse_offset(int64_t b, int64_t h, int64_t i) const { return (b * H + h) * N_q + i; }

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
