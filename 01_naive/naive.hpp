// Stage 01: attention exactly as the textbook writes it.
//
//   S = scale * Q K^T          (N_q x N_k, stored)
//   P = exp(S) / rowsum(exp(S)) (N_q x N_k, stored)  -- NO max subtraction, on purpose
//   O = P V
//
// This is Vaswani et al. 2017, eq. (1), evaluated literally. Two lessons live here:
//   1. Memory: S and P are materialised for every (batch, head): 2 * B * H * N_q * N_k elements.
//      At N = 8192 that is 512 MiB in float32 per head, before any backward.
//   2. Overflow: exp(s) overflows float32 once s > ~88.72 (ln(FLT_MAX)); the row sum becomes inf
//      and P = inf / inf = NaN. Stage 02 (safe softmax) fixes it by subtracting the row max.
//
// Shapes and layout (common/problem.hpp): Q, O [B,H,N_q,d]; K, V [B,H_kv,N_k,d]; LSE [B,H,N_q].
// T is the element type (float in the programs; double for the finite-difference check of the
// backward). Nothing is thrown; sizes are validated by the caller.
// The materialised backward is in naive_backward.hpp.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "problem.hpp"

namespace naive {

// Steps 1-2 of the forward, shared by forward() and backward() (naive_backward.hpp): fill S and P, both laid out
// [B, H, N_q, N_k], and LSE = log(rowsum(exp(S))).
// A masked entry gets S = -inf and P = exp(-inf) = 0. A row that sees no key at all
// (causal with N_q > N_k) gets P = 0 and LSE = -inf instead of 0 / 0.
template <class T>
void attention_probs(const fa::AttnProblem& p, const T* Q, const T* K, T* S, T* P, T* LSE) {
  const T scale = T(p.resolved_scale());
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      T* S_bh = S + (b * p.H + h) * p.N_q * p.N_k;
      T* P_bh = P + (b * p.H + h) * p.N_q * p.N_k;
      for (int64_t i = 0; i < p.N_q; ++i) {
        const T* q = Q + p.q_offset(b, h, i);
        T* s = S_bh + i * p.N_k;
        T* pr = P_bh + i * p.N_k;
        // Step 1: S_ij = scale * q_i . k_j for the keys row i may see (causal, window), -inf for
        // the others; with a softcap c, S_ij = c tanh(S_ij / c) (problem.hpp's capped()).
        for (int64_t j = 0; j < p.N_k; ++j) {
          if (!p.visible(i, j)) {
            s[j] = neg_inf;
            continue;
          }
          const T* k = K + p.kv_offset(b, h, j);
          T dot = 0;
          for (int64_t c = 0; c < p.d; ++c) dot += q[c] * k[c];
          s[j] = p.capped(scale * dot);
        }
        // Step 2: the textbook softmax P_ij = exp(S_ij) / l_i with l_i = sum_j exp(S_ij).
        // exp(S_ij) overflows to inf once S_ij > ~88.7 in float32: then l_i = inf and P = NaN.
        // exercise softmax_row begins
        T l = 0;
        for (int64_t j = 0; j < p.N_k; ++j) {
          pr[j] = std::exp(s[j]);
          l += pr[j];
        }
        if (p.keys_seen(i) == 0) {  // nothing to attend to: O_i = 0, LSE_i = -inf, never NaN
          for (int64_t j = 0; j < p.N_k; ++j) pr[j] = 0;
          LSE[p.lse_offset(b, h, i)] = neg_inf;
          continue;
        }
        for (int64_t j = 0; j < p.N_k; ++j) pr[j] /= l;
        LSE[p.lse_offset(b, h, i)] = std::log(l);
        // exercise softmax_row ends
      }
    }
}

// Forward: O = P V with P from attention_probs(). Writes O [B,H,N_q,d] and LSE [B,H,N_q].
// Extra memory: S and P, 2 * B * H * N_q * N_k * sizeof(T) bytes.
template <class T>
void forward(const fa::AttnProblem& p, const T* Q, const T* K, const T* V, T* O, T* LSE) {
  std::vector<T> S(static_cast<size_t>(p.B * p.H * p.N_q * p.N_k));
  std::vector<T> P(S.size());
  attention_probs(p, Q, K, S.data(), P.data(), LSE);
  // Step 3: O = P V, one output row at a time.
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i) {
        const T* pr = P.data() + ((b * p.H + h) * p.N_q + i) * p.N_k;
        T* o = O + p.q_offset(b, h, i);
        // exercise pv begins
        for (int64_t c = 0; c < p.d; ++c) o[c] = 0;
        for (int64_t j = 0; j < p.N_k; ++j) {
          const T* v = V + p.kv_offset(b, h, j);
          for (int64_t c = 0; c < p.d; ++c) o[c] += pr[j] * v[c];
        }
        // exercise pv ends
      }
}

}  // namespace naive
