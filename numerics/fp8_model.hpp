// The FP8 storage model (issue 35; docs/numerics.md, "FP8: what storing in e4m3 costs, before any
// kernel"): attention computed exactly (float64) from Q, K, V and P stored the way an FP8 kernel
// stores them, so that its error against the float64 reference is the error storage causes by
// itself. FlashAttention-3 (Shah et al. 2024, Sec. 3.3 and Table 3) measures its FP8 kernel
// against such choices; this model reproduces the choices, not the kernel's arithmetic, and is the
// baseline a course FP8 kernel's battery tolerance is to be derived from (as
// reference_forward_stored is for fp16/bf16).
//
// What is stored, per Storage8:
//   fp16, bf16      Q, K, V rounded to the type; P rounded to it before P V (a 16-bit kernel's
//                   storage: the course's tensor-core kernels)
//   e4m3 tensor     Q, K, V as e4m3(x / s) s with one scale s = amax / 448 per tensor
//   e4m3 block      the same with one scale per block: Q per (b, h, Br query rows), K and V per
//                   (b, kv head, Bc key rows), FlashAttention-3's granularity
//   + incoherent    Q and K of each head multiplied by H_d diag(signs) first (common/fp8.hpp), the
//                   same signs for both; V as it is
//   P (e4m3 kinds)  P_ij = exp(S_ij - m_i) in [0, 1] stored as e4m3(P_ij p_scale) / p_scale;
//                   p_scale = 2^8 puts the largest P (1) at 256, so weights down to about 2^-18
//                   keep a subnormal or better instead of flushing below 2^-10 (p_scale 1)
// The row sum l_i is taken from the unrounded P (a kernel sums P in float32 before converting it).
// Causal, GQA and the window follow AttnProblem::key_range, as everywhere.
#pragma once
#include <cstdint>
#include <string>

#include "problem.hpp"
#include "tensor.hpp"

namespace numx {

struct Storage8 {
  enum class Kind { fp16, bf16, e4m3_tensor, e4m3_block } kind = Kind::e4m3_block;
  bool incoherent = false;  // Hadamard with random signs on Q and K (needs d a power of two)
  int64_t Br = 64, Bc = 128;  // e4m3_block: rows per scale block of Q, and of K and V
  double p_scale = 256;       // e4m3 kinds: P stored as e4m3(P p_scale) / p_scale
  uint64_t seed = 1;          // the signs of the incoherent transform
  std::string name() const;   // "fp16", "e4m3 block + incoherent", ...
};

// O [B,H,N_q,d] of attention (exact arithmetic) on Q [B,H,N_q,d], K, V [B,H_kv,N_k,d] (head-major)
// stored as s says; rows that see no key give O = 0. Throws fa::InputError for: an incoherent
// transform at a d that is not a power of two; a softcap or a token-major (packed) problem (not
// modelled); Br or Bc below 1; p_scale not in (0, 448] (P = 1 must stay finite and unsaturated); a
// non-finite input; with fp16 storage an input beyond fp16's largest finite value (65504).
fa::TensorD storage8_forward(const fa::AttnProblem& p, const fa::TensorD& Q, const fa::TensorD& K,
                             const fa::TensorD& V, const Storage8& s);

// One tensor x (heads x rows x d, row-major) stored as s says, in place: fp16/bf16 rounded; e4m3
// with one scale amax / 448 per block of rows_per_block rows of one head (e4m3_block; a block
// never spans two heads) or one for the whole tensor (e4m3_tensor). storage8_forward's step.
void store8(fa::TensorD& x, int64_t heads, int64_t rows, int64_t d, const Storage8& s, int64_t rows_per_block);

// Root mean square of a - b over all elements (FlashAttention-3's "RMSE"; same shapes).
double rmse(const fa::TensorD& a, const fa::TensorD& b);

}  // namespace numx
