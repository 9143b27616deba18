// The float64 reference: attention written as plainly as possible, in double precision, from the
// definitions alone. Every stage is judged against it. It shares no code with the stages: it
// builds the causal mask and the sliding window from the documented rule itself (query i sees key
// j iff j <= i + N_k - N_q, and i + N_k - N_q - left <= j <= i + N_k - N_q + right), applies the
// softcap c tanh(S / c) itself, and maps query head h to kv head h / (H / H_kv) itself.
// Packed variable-length batches: reference_varlen_forward() and reference_varlen_backward() in
// varlen.hpp run this file's reference on each sequence gathered into [1, H, N, d].
#pragma once
#include <cstdint>
#include <vector>

#include "dtype.hpp"
#include "problem.hpp"
#include "tensor.hpp"

namespace fa {

// Forward: S = scale * Q K^T (softcapped if p.softcap > 0; masked entries excluded), P = softmax(S) row-wise, O = P V,
// LSE = log(sum_j exp(S_ij)) (natural log). Rows that see no key: O = 0, LSE = -inf.
// Shapes: Q [B,H,N_q,d], K/V [B,H_kv,N_k,d] (float32 inputs, widened to double);
// O [B,H,N_q,d] and LSE [B,H,N_q] are resized by the call.
void reference_forward(const AttnProblem& p, const Tensor& Q, const Tensor& K, const Tensor& V,
                       TensorD& O, TensorD& LSE);
// The same in double inputs (used by finite-difference checks).
void reference_forward(const AttnProblem& p, const TensorD& Q, const TensorD& K, const TensorD& V,
                       TensorD& O, TensorD& LSE);
// The same for the query rows `rows` of every (b, h) only, indexed in the whole problem (its
// causal mask, its offsets), for problems too large for the whole N_q x N_k reference: the tests
// of lengths past 2^15 and offsets past 2^31 check sampled rows. O [B,H,R,d] and LSE [B,H,R],
// R = rows.size(): index r holds query row rows[r]. Throws std::invalid_argument for a row outside
// 0 .. N_q - 1.
void reference_forward_rows(const AttnProblem& p, const Tensor& Q, const Tensor& K, const Tensor& V,
                            const std::vector<int64_t>& rows, TensorD& O, TensorD& LSE);

// Standard attention computed exactly (float64) but with values STORED in a 16-bit type where a
// GPU kernel stores them: each normalised weight P_ij rounded to P_dtype before it multiplies V
// (tensor-core and cuBLAS kernels multiply P in 16 bits; fp32 means not rounded), and O rounded to
// O_dtype at the end. Its error against reference_forward() is the part of a kernel's error that
// storage alone causes, whatever the arithmetic (the low-precision baseline of conformance.hpp).
// LSE is not stored in 16 bits by any kernel, so it is the reference's. Shapes as above.
void reference_forward_stored(const AttnProblem& p, const Tensor& Q, const Tensor& K,
                              const Tensor& V, DType P_dtype, DType O_dtype, TensorD& O,
                              TensorD& LSE);
// The same for an FP8 kernel (stage 05's v15; conformance.hpp): each weight stored as an e4m3
// multiple of 1/256 of the row's largest, P_ij = e4m3(256 e^(S_ij - m_i)) / (256 l_i), l_i summed
// from the unrounded weights, and O rounded to bf16. (v15 rounds against the running max of the
// blocks so far, not the row's final one: a different rounding of the same precision, 2^-4.)
void reference_forward_stored_fp8(const AttnProblem& p, const Tensor& Q, const Tensor& K, const Tensor& V,
                                  TensorD& O, TensorD& LSE);

// Backward of O = softmax(scale Q K^T) V for the upstream gradient dO (shape of O), in float64:
// dV = P^T dO, dP = dO V^T, D_i = sum_c dO_ic O_ic, dS = P * (dP - D), dQ = scale dS K,
// dK = scale dS^T Q (Dao et al. 2022, Appendix B.2, eqs. for the standard backward); with a
// softcap, dS is multiplied by 1 - tanh^2(scale q.k / c) first (docs/math.md, section 8).
// GQA: dK and dV of a kv head sum the contributions of every query head that reads it.
// dQ [B,H,N_q,d], dK/dV [B,H_kv,N_k,d] are resized by the call.
// lse_in_float32: P is recomputed as exp(S - LSE) from LSE rounded to float32, as a backward that
// takes the forward's float32 LSE (stages 06 and later) does; the difference from the exact
// gradients is the error that storing LSE in float32 causes by itself (conformance.hpp).
// stored (16-bit GPU backwards, conformance.hpp): values rounded where such a kernel stores them,
// arithmetic still float64 (its error against the exact gradients is what storage alone causes):
// D from the O the kernel receives, rounded to dtype; with P_in_dtype, P rounded to dtype before
// it multiplies dO and dS before it multiplies K and Q (tensor cores); the gradients rounded to
// dtype at the end.
struct BackwardStorage {
  DType dtype = DType::fp32;
  bool P_in_dtype = false;
  const Tensor* O = nullptr;  // [B,H,N_q,d]; nullptr: the reference's own O
  // [B,H,N_q] float32: the LSE the backward is fed (its own forward's), P = exp(S - LSE) from it
  // exactly; nullptr: the reference's LSE (rounded to float32 with lse_in_float32).
  const Tensor* LSE = nullptr;
};
void reference_backward(const AttnProblem& p, const TensorD& Q, const TensorD& K,
                        const TensorD& V, const TensorD& dO, TensorD& dQ, TensorD& dK,
                        TensorD& dV, bool lse_in_float32 = false, const BackwardStorage& stored = {});

}  // namespace fa
