// Packed variable-length batches ("varlen", issue 34): several sequences of different lengths
// concatenated along the token axis, described by cumulative offsets, as FlashAttention's
// flash_attn_varlen_func takes them. Training with packed sequences and serving a batch of prompts
// without padding both use it: no FLOP and no byte is spent on padding.
//
// Semantics (docs/math.md, section 8; docs/reference.md, "Packed variable-length batches"):
//   - cu_q and cu_k (int32, B + 1 entries each): cu[0] = 0, non-decreasing, cu[B] = the token
//     count. Sequence b has the queries cu_q[b] .. cu_q[b+1] - 1 and the keys cu_k[b] ..
//     cu_k[b+1] - 1: N_q(b) = cu_q[b+1] - cu_q[b] and N_k(b) = cu_k[b+1] - cu_k[b], either may be 0.
//   - Layout, token-major (FlashAttention's): Q and O [total_q, H, d], K and V [total_k, H_kv, d],
//     dO, dQ like Q, dK, dV like K; LSE [H, total_q] (FlashAttention's varlen LSE: one row of
//     tokens per head, so that LSE[h] of a head is contiguous as in the course's [B, H, N_q]).
//   - Each sequence is attended independently, as a problem of its own: B = 1, N_q(b) queries,
//     N_k(b) keys, and the problem's causal mask (bottom-right aligned to N_k(b) - N_q(b)),
//     window, softcap, scale and GQA. A query sees no key of another sequence.
//   - A row that sees no key (N_k(b) = 0, or the mask) gives O = 0 and LSE = -inf; dQ = 0 there.
//     Keys no query sees (N_q(b) = 0, or the mask) get dK = dV = 0.
//
// The design: no stage gets a new algorithm and nothing is copied into a padded [B, H, N, d].
// A sequence of a packed batch IS a B = 1 problem whose rows lie H d elements apart (AttnProblem's
// token_major) and whose LSE rows lie total_q apart (lse_head_stride), on pointers offset to its
// first token. varlen_forward() / varlen_backward() call a stage's own ForwardFn / BackwardFn once
// per sequence on those offset pointers, so each stage runs its own loops, blocks and masks per
// sequence; the stages changed only where they stepped rows by d instead of asking the problem
// (q_row_stride(), kv_row_stride()). The price: one call (and, in stage 04, one parallel region)
// per sequence, measured in docs/lab/04_tiled_cpu.md, "Varlen".
#pragma once
#include <cstdint>
#include <vector>

#include "problem.hpp"
#include "stage.hpp"
#include "tensor.hpp"

namespace fa {

// A packed batch as a GPU call takes it (stage 05's forward_varlen, stage 06's backward_varlen):
// the offsets as device arrays, and the token counts. cu_q == nullptr: not a packed batch.
struct VarlenDevice {
  const int32_t* cu_q = nullptr;  // [B + 1]: sequence b has tokens cu_q[b] ... cu_q[b + 1] - 1
  const int32_t* cu_k = nullptr;  // [B + 1]: its keys cu_k[b] ... cu_k[b + 1] - 1
  int64_t total_q = 0, total_k = 0;  // tokens of Q (and O) and of K (and V)
  bool any() const { return cu_q != nullptr; }
};

struct VarlenHost {
  std::vector<int32_t> cu_q, cu_k;  // [B + 1] each; both empty: not a packed batch
  bool any() const { return !cu_q.empty(); }
  int64_t batch() const { return int64_t(cu_q.size()) - 1; }
  int64_t total_q() const { return cu_q.back(); }
  int64_t total_k() const { return cu_k.back(); }
  int64_t n_q(int64_t b) const { return int64_t(cu_q[size_t(b) + 1]) - cu_q[size_t(b)]; }
  int64_t n_k(int64_t b) const { return int64_t(cu_k[size_t(b) + 1]) - cu_k[size_t(b)]; }
};

// Checks one offsets array alone (`flag` names it in the error, e.g. "--cu-seqlens-q F"): at
// least 2 entries (B >= 1), cu[0] = 0, non-decreasing. Throws InputError naming the flag, what
// was expected and the first offending entry.
void validate_cu_seqlens(const std::vector<int32_t>& cu, const std::string& flag);

// Checks a packed batch: each array as validate_cu_seqlens(), both of B + 1 entries, at least one
// query and one key in all (total_q, total_k >= 1). Throws InputError naming --cu-seqlens-q or
// --cu-seqlens-k.
void validate_varlen(const VarlenHost& v);

// The packed batch a C caller describes (fa04_forward_varlen, fa06_backward_cpu_varlen): B + 1
// offsets each, copied from the host arrays cu_q and cu_k, checked as validate_varlen(), and their
// last entries held to the tensors' token counts (cu_q[B] = total_q, cu_k[B] = total_k). Throws
// InputError naming --cu-seqlens-q or --cu-seqlens-k (B < 1: --cu-seqlens-q). The arrays must
// hold B + 1 entries each; null pointers are the caller's to refuse.
VarlenHost varlen_from_arrays(const int32_t* cu_q, const int32_t* cu_k, int64_t B, int64_t total_q, int64_t total_k);

// The problem of sequence b (0 <= b < B): p's heads, head dim, masks, scale and softcap, B = 1,
// N_q(b) queries, N_k(b) keys, token-major rows and LSE rows total_q apart. Its pointers are Q
// + cu_q[b] H d, K and V + cu_k[b] H_kv d, O like Q, LSE + cu_q[b] (varlen_forward() offsets
// them). Needs N_q(b), N_k(b) >= 1 to be a valid problem (validate()).
AttnProblem sequence_problem(const AttnProblem& p, const VarlenHost& v, int64_t b);

// validate() for a packed batch described by p = varlen_problem(): the heads, head dim, scale and
// variants as validate() checks them, the size limits per sequence (each sequence is the problem a
// stage runs, not the padded batch: B N_max^2 may pass 2^40 where no sequence's work does) and
// the packed tensors' totals. Throws InputError naming --cu-seqlens-q/-k for a size.
void validate_varlen_problem(const AttnProblem& p, const VarlenHost& v);

// The batch as the harness describes it (Inputs::p): p's heads, head dim, masks, scale, softcap;
// B = the number of sequences, N_q and N_k the longest sequence's: the padded [B, H, N_q, d]
// problem a packed batch avoids (its describe() and its sizes bound the batch's).
AttnProblem varlen_problem(const AttnProblem& p, const VarlenHost& v);

// Any forward run on a packed batch, sequence by sequence on offset pointers (see the top of the
// file): f(sequence_problem(p, v, b), Q + cu_q[b] H d, ...). A sequence with no query is skipped;
// one with no key gets O = 0 and LSE = -inf without calling f (a problem has N_k >= 1).
// Q [total_q, H, d], K, V [total_k, H_kv, d]; writes O [total_q, H, d] and LSE [H, total_q].
void varlen_forward(const ForwardFn& f, const AttnProblem& p, const VarlenHost& v, const float* Q,
                    const float* K, const float* V, float* O, float* LSE);

// The same for a backward: f on each sequence's offset pointers (O, dO, dQ like Q; dK, dV like K;
// LSE [H, total_q]). No query: dK = dV = 0 on its keys; no key: dQ = 0 on its queries.
void varlen_backward(const BackwardFn& f, const AttnProblem& p, const VarlenHost& v, const float* Q,
                     const float* K, const float* V, const float* O, const float* dO, const float* LSE,
                     float* dQ, float* dK, float* dV);

// Sequence b of a packed tensor X [total, heads, d] (tokens t0 .. t0 + n - 1) as the course's
// contiguous [1, heads, n, d]: what the float64 reference and tests read. And back: scatter_rows
// writes such a [1, heads, n, d] tensor into X's rows t0 .. t0 + n - 1.
template <class T>
TensorT<T> gather_rows(const TensorT<T>& X, int64_t heads, int64_t d, int64_t t0, int64_t n) {
  TensorT<T> Y({1, heads, n, d});
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d; ++c) Y[(h * n + i) * d + c] = X[((t0 + i) * heads + h) * d + c];
  return Y;
}
template <class T>
void scatter_rows(const TensorT<T>& Y, int64_t heads, int64_t d, int64_t t0, int64_t n, TensorT<T>& X) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d; ++c) X[((t0 + i) * heads + h) * d + c] = Y[(h * n + i) * d + c];
}

// The float64 reference on a packed batch, built per sequence from the definitions: sequence b's
// rows gathered into [1, H, N_q(b), d] (K, V into [1, H_kv, N_k(b), d]), reference_forward() on
// the plain problem with B = 1, N_q(b), N_k(b), and the results put back. N_k(b) = 0: O = 0 and
// LSE = -inf. Q [total_q, H, d], K, V [total_k, H_kv, d]; O [total_q, H, d] and LSE [H, total_q]
// are resized by the call. Throws InputError as validate_varlen().
void reference_varlen_forward(const AttnProblem& p, const VarlenHost& v, const Tensor& Q, const Tensor& K,
                              const Tensor& V, TensorD& O, TensorD& LSE);
// The same with reference_forward_stored() per sequence: P rounded to P_dtype before it
// multiplies V, O rounded to O_dtype (what storage in a 16-bit kernel causes by itself).
void reference_varlen_forward_stored(const AttnProblem& p, const VarlenHost& v, const Tensor& Q, const Tensor& K,
                                     const Tensor& V, DType P_dtype, DType O_dtype, TensorD& O, TensorD& LSE);

// The float64 reference backward (reference_backward()) the same way, sequence by sequence; dQ,
// dK, dV [total, heads, d] resized. lse_in_float32 as reference_backward(); O and LSE_f32, when
// given (the forward whose outputs a backward is fed: O [total_q, H, d], LSE [H, total_q]), are
// passed to each sequence as BackwardStorage{fp32, false, O, LSE} (reference.hpp).
void reference_varlen_backward(const AttnProblem& p, const VarlenHost& v, const TensorD& Q, const TensorD& K,
                               const TensorD& V, const TensorD& dO, TensorD& dQ, TensorD& dK, TensorD& dV,
                               bool lse_in_float32 = false, const Tensor* O = nullptr, const Tensor* LSE_f32 = nullptr);

// FLOPs of a forward on the batch by the FlashAttention convention (problem.hpp): each sequence's
// own N_q(b) x N_k(b), with its mask; the padded problem's would count B N_q N_k.
double varlen_forward_flops(const AttnProblem& p, const VarlenHost& v);

// X [total, heads, d] padded to the course's [B, heads, N, d] (N >= every sequence's length), zeros
// past each sequence's end: the copy varlen avoids, for the benchmark that measures what it costs.
// cu is cu_q or cu_k.
Tensor pad_packed(const Tensor& X, const std::vector<int32_t>& cu, int64_t heads, int64_t d, int64_t N);

}  // namespace fa
