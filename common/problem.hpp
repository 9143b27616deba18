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

  // Does query row i see key row j? Bottom-right aligned causal mask (see top of file).
  FA_HOST_DEVICE bool visible(int64_t i, int64_t j) const { return !causal || j <= i + N_k - N_q; }
  // Number of leading keys query row i sees (keys 0 .. last_key(i)-1); 0 for a fully masked row.
  FA_HOST_DEVICE int64_t keys_seen(int64_t i) const {
    if (!causal) return N_k;
    const int64_t n = i + N_k - N_q + 1;
    return n < 0 ? 0 : (n > N_k ? N_k : n);
  }

  // FLOPs by the FlashAttention convention: forward 4 * B * H * N_q * N_k * d (two GEMMs of
  // 2*N_q*N_k*d each), halved for causal; backward is 2.5x the forward (5 GEMMs instead of 2).
  double forward_flops() const {
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
// every size >= 1, H % H_kv == 0, scale finite and > 0 when set, and the element counts
// B*H*N_q*d, B*H_kv*N_k*d and B*H*N_q*N_k at most 2^40 (so no size arithmetic can overflow).
void validate(const AttnProblem& p);

}  // namespace fa
