// Stage 01's backward: the standard attention backward, with every N_q x N_k matrix stored.
//
// Shapes and layout (common/problem.hpp): Q, O, dO, dQ [B,H,N_q,d]; K, V, dK, dV [B,H_kv,N_k,d];
// LSE [B,H,N_q]. T is the element type (float in the programs; double for the finite-difference
// check in test_naive.cpp). Nothing is thrown; sizes are validated by the caller.
#pragma once
#include <cstdint>
#include <vector>

#include "naive.hpp"

namespace naive {

// Backward, materialised (Dao et al. 2022, Appendix B.2, the standard attention backward):
//   dV = P^T dO                 dP = dO V^T
//   D_i = rowsum(dO * O)_i      dS = P * (dP - D)          (softmax Jacobian, row by row)
//                               dS *= 1 - (S / c)^2        (softcap c: S = c tanh(x / c))
//   dQ = scale * dS K           dK = scale * dS^T Q
// P is recomputed with the same textbook softmax as forward() (so it overflows the same way);
// O is the forward output; LSE is accepted for the common signature but not needed here.
// With GQA several query heads read one kv head, so their dK and dV contributions add up.
// Writes dQ [B,H,N_q,d], dK and dV [B,H_kv,N_k,d]. Extra memory: S, P, dP and dS (4 N_q N_k
// elements per (b, h)) plus a scratch LSE.
template <class T>
void backward(const fa::AttnProblem& p, const T* Q, const T* K, const T* V, const T* O,
              const T* dO, const T* /*LSE*/, T* dQ, T* dK, T* dV) {
  const T scale = T(p.resolved_scale());
  const size_t NN = size_t(p.B * p.H * p.N_q * p.N_k);
  // The scratch LSE is indexed as LSE is (lse_offset(): a packed batch's rows are total_q apart).
  std::vector<T> S(NN), P(NN), dP(NN), dS(NN), lse(static_cast<size_t>(p.lse_span()));
  attention_probs(p, Q, K, S.data(), P.data(), lse.data());
  // dQ, dK, dV are q_elems() and kv_elems() consecutive elements in either layout (problem.hpp).
  for (int64_t e = 0; e < p.q_elems(); ++e) dQ[e] = 0;
  for (int64_t e = 0; e < p.kv_elems(); ++e) dK[e] = dV[e] = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i) {
        const size_t row = size_t(((b * p.H + h) * p.N_q + i) * p.N_k);
        const T* o = O + p.q_offset(b, h, i);
        const T* dout = dO + p.q_offset(b, h, i);
        T D = 0;  // D_i = dO_i . O_i
        for (int64_t c = 0; c < p.d; ++c) D += dout[c] * o[c];
        for (int64_t j = 0; j < p.N_k; ++j) {
          const T* v = V + p.kv_offset(b, h, j);
          T dp = 0;  // dP_ij = dO_i . V_j
          for (int64_t c = 0; c < p.d; ++c) dp += dout[c] * v[c];
          dP[row + j] = dp;
          // Through the softcap (if any): dS/dx = 1 - tanh^2, x = scale q_i . k_j (S holds the capped S).
          dS[row + j] = P[row + j] * (dp - D) * p.capped_slope(S[row + j]);
        }
        for (int64_t j = 0; j < p.N_k; ++j) {
          const T pij = P[row + j], dsij = dS[row + j];
          const T* k = K + p.kv_offset(b, h, j);
          const T* q = Q + p.q_offset(b, h, i);
          T* dk = dK + p.kv_offset(b, h, j);
          T* dv = dV + p.kv_offset(b, h, j);
          T* dq = dQ + p.q_offset(b, h, i);
          for (int64_t c = 0; c < p.d; ++c) {
            dv[c] += pij * dout[c];          // dV = P^T dO
            dq[c] += scale * dsij * k[c];    // dQ = scale dS K
            dk[c] += scale * dsij * q[c];    // dK = scale dS^T Q
          }
        }
      }
}

}  // namespace naive
