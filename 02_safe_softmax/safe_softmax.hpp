// Stage 02: the same attention as stage 01, with the row max subtracted before exp.
//
//   S = scale * Q K^T                  step 1: writes S (N_q x N_k, stored)
//   m = rowmax(S)                      pass 1: reads S
//   P = exp(S - m), l = rowsum(P)      pass 2: reads S again, writes P (N_q x N_k, stored)
//   P = P / l                          pass 3: reads P and writes it back (S is not read again)
//   O = P V                            step 3: reads P
//
// This is the "safe softmax" of Milakov & Gimelshein 2018, eq. (2) / Algorithm 2. Softmax does
// not change when a constant is subtracted from every entry of a row (README: two-line proof), so
// subtracting m changes nothing in exact arithmetic, but now every exponent is <= 0: exp never
// overflows, and the largest term is exactly exp(0) = 1, so l >= 1 never underflows to 0 either.
// LSE = log(sum_j exp(S_ij)) = m + log(l), again without forming exp(S_ij) itself.
// What it does NOT fix: S and P are still materialised (2 * B * H * N_q * N_k elements), and
// each row goes through memory many times: S written once and read twice (passes 1 and 2), P
// written twice (passes 2 and 3) and read twice (pass 3 and O = P V). Stage 01 reads S once
// fewer. Stage 03 keeps none of it.
//
// Shapes and layout (common/problem.hpp): Q, O [B,H,N_q,d]; K, V [B,H_kv,N_k,d]; LSE [B,H,N_q].
// T is the element type (float in the programs; double in tests). Nothing is thrown; sizes are
// validated by the caller.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "problem.hpp"

namespace safe_softmax {

// Softmax of one vector, y = softmax(x), n >= 1, at least one x_j finite (Milakov & Gimelshein
// 2018, Algorithm 2). Three passes: x is loaded 3 times and y stored once, 4 memory accesses per
// element (stage 03's online normaliser needs 3). In and Out are pointers, or pointer-like
// types whose operator[] loads and stores (the tests count memory accesses through one).
template <class T, class In = const T*, class Out = T*>
void softmax(In x, Out y, int64_t n) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) {  // pass 1: m = max_j x_j
    const T xj = x[j];
    m = std::max(m, xj);
  }
  T l = 0;
  for (int64_t j = 0; j < n; ++j) {  // pass 2: l = sum_j exp(x_j - m)
    const T xj = x[j];
    l += std::exp(xj - m);
  }
  for (int64_t j = 0; j < n; ++j) {  // pass 3: y_j = exp(x_j - m) / l
    const T xj = x[j];
    y[j] = std::exp(xj - m) / l;
  }
}

// Steps 1-2 of the forward: fill S and P, both laid out [B, H, N_q, N_k], and
// LSE = m + log(l) = log(rowsum(exp(S))).
// A masked entry gets S = -inf and P = exp(-inf - m) = 0. A row that sees no key at all
// (causal with N_q > N_k) has m = -inf: it gets P = 0 and LSE = -inf instead of exp(-inf + inf).
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
        // exercise safe_row begins
        // Step 2, pass 1 (reads S): the row max m_i = max_j S_ij (Milakov & Gimelshein eq. (2)).
        T m = neg_inf;
        for (int64_t j = 0; j < p.N_k; ++j) m = std::max(m, s[j]);
        if (p.keys_seen(i) == 0) {  // nothing to attend to: O_i = 0, LSE_i = -inf, never NaN
          for (int64_t j = 0; j < p.N_k; ++j) pr[j] = 0;
          LSE[p.lse_offset(b, h, i)] = neg_inf;
          continue;
        }
        // Pass 2 (reads S, writes P): P_ij = exp(S_ij - m_i), l_i = sum_j P_ij. Every exponent
        // is <= 0, so no term exceeds 1 and the term at the max is exactly 1: l_i is in [1, N_k],
        // finite whatever the logits.
        T l = 0;
        for (int64_t j = 0; j < p.N_k; ++j) {
          pr[j] = std::exp(s[j] - m);
          l += pr[j];
        }
        // Pass 3 (reads and writes P, not S): P_ij = exp(S_ij - m_i) / l_i, the same value as
        // exp(S_ij) / sum_j exp(S_ij).
        for (int64_t j = 0; j < p.N_k; ++j) pr[j] /= l;
        LSE[p.lse_offset(b, h, i)] = m + std::log(l);
        // exercise safe_row ends
      }
    }
}

// Forward: O = P V with P from attention_probs(). Writes O [B,H,N_q,d] and LSE [B,H,N_q].
// Extra memory: S and P, 2 * B * H * N_q * N_k * sizeof(T) bytes (as in stage 01).
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
        for (int64_t c = 0; c < p.d; ++c) o[c] = 0;
        for (int64_t j = 0; j < p.N_k; ++j) {
          const T* v = V + p.kv_offset(b, h, j);
          for (int64_t c = 0; c < p.d; ++c) o[c] += pr[j] * v[c];
        }
      }
}

}  // namespace safe_softmax
