// Stage 03: online softmax. One pass over the keys per query row, nothing N_q x N_k stored.
//
//   for each key j (in any order):          m_new = max(m, S_ij)
//                                           l     = l * exp(m - m_new) + exp(S_ij - m_new)
//                                           o     = o * exp(m - m_new) + exp(S_ij - m_new) V_j
//                                           m     = m_new
//   at the end:                             O_i = o / l,   LSE_i = m + log(l)
//
// Two ideas, one after the other:
//   1. The online normaliser (Milakov & Gimelshein 2018, Algorithm 3): the row max m and the sum
//      l = sum_j exp(S_ij - m) are found in ONE pass. When a larger score arrives, everything
//      summed so far was scaled by exp(-m_old); multiplying by exp(m_old - m_new) re-bases it on
//      exp(-m_new). softmax() below is that algorithm on a plain vector.
//   2. Online attention: carry the unnormalised output o = sum_j exp(S_ij - m) V_j along with
//      (m, l), rescaled by the same factor (Dao et al. 2022, Algorithm 1 lines 10-12, here with
//      one key per block), and divide by l once at the end (Dao 2023, FlashAttention-2, 3.1.1).
//      S and P are never stored: the extra memory is one state (m, l, o): d + 2 numbers.
// A state over some keys can be merged with the state over other keys (merge()): the partial
// results of key blocks combine without recomputing anything. Stages 04-06 are built on it.
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

#include "bug_zoo.hpp"
#include "problem.hpp"

namespace online_softmax {

// exp(x - m) for x <= m, where m is a running max. While every score seen is -inf (leading masked
// keys, a fully masked row, an empty state), m = -inf and x - m = -inf - (-inf) = NaN. Such an x
// is -inf itself and must weigh exp(-inf) = 0, so subtract 0 instead of -inf.
template <class T>
T exp_minus(T x, T m) {
  FA_ZOO(NAN_ON_MASKED_ROW, return std::exp(x - m));  // zoo: no guard, -inf - -inf = NaN
  return std::exp(x - (m == -std::numeric_limits<T>::infinity() ? T(0) : m));
}

// Softmax of one vector, y = softmax(x), n >= 1, at least one x_j finite (Milakov & Gimelshein
// 2018, Algorithm 3). Two passes: x is loaded twice and y stored once, 3 memory accesses per
// element against 4 for stage 02's three-pass safe softmax. In and Out are pointers, or
// pointer-like types whose operator[] loads and stores (the tests count memory accesses through one).
template <class T, class In = const T*, class Out = T*>
void softmax(In x, Out y, int64_t n) {
  T m = -std::numeric_limits<T>::infinity(), l = 0;
  for (int64_t j = 0; j < n; ++j) {  // pass 1: m and l together
    const T xj = x[j];
    const T m_new = std::max(m, xj);
    l = l * exp_minus(m, m_new) + exp_minus(xj, m_new);  // re-base l from exp(-m) to exp(-m_new)
    m = m_new;
  }
  for (int64_t j = 0; j < n; ++j) {  // pass 2: y_j = exp(x_j - m) / l
    const T xj = x[j];
    y[j] = exp_minus(xj, m) / l;
  }
}

// The running state of one query row over a set of keys J (Milakov & Gimelshein's (m, d) pair
// with the output carried along; their d is the running sum, our l, not the head dimension d):
template <class T>
struct State {
  T m = -std::numeric_limits<T>::infinity();  // max_{j in J} S_ij (-inf for no key)
  T l = 0;                                    // sum_{j in J} exp(S_ij - m)
  std::vector<T> o;                           // sum_{j in J} exp(S_ij - m) V_j, d elements
};

// The state over no key: the identity of merge().
template <class T>
State<T> empty_state(int64_t d) {
  return {-std::numeric_limits<T>::infinity(), T(0), std::vector<T>(static_cast<size_t>(d), T(0))};
}

// Adds one key (score s, value row v) to the state. The factor that re-bases what is already
// summed is exp(m_old - m_new): exactly 1 when s does not raise the max.
template <class T>
void add_key(State<T>& st, T s, const T* v) {
  // exercise add_key begins
  const T m_new = std::max(st.m, s);
  T alpha = exp_minus(st.m, m_new);        // rescales the old l and o
  FA_ZOO(RESCALE_BY_NEW_KEY, alpha = exp_minus(st.m, s));  // zoo: rescaled against the new key
  const T beta = exp_minus(s, m_new);      // weight of the new key, P_ij * l
  st.l = st.l * alpha + beta;
  for (size_t c = 0; c < st.o.size(); ++c) st.o[c] = st.o[c] * alpha + beta * v[c];
  st.m = m_new;
  // exercise add_key ends
}

// The state over A u B from the states over two disjoint key sets A and B (Milakov & Gimelshein
// Section 3.1's operator on (m, d) = (m, l) pairs; Dao et al. 2022 Section 3.1, softmax of a concatenation):
//   m = max(m_a, m_b),  l = l_a exp(m_a - m) + l_b exp(m_b - m),  o = o_a exp(m_a - m) + o_b exp(m_b - m).
// Associative and commutative (up to rounding); merging with empty_state() changes nothing.
template <class T>
State<T> merge(const State<T>& a, const State<T>& b) {
  State<T> r;
  r.o.resize(a.o.size());
  // exercise merge begins
  r.m = std::max(a.m, b.m);
  const T alpha = exp_minus(a.m, r.m), beta = exp_minus(b.m, r.m);
  r.l = a.l * alpha + b.l * beta;
  for (size_t c = 0; c < r.o.size(); ++c) r.o[c] = a.o[c] * alpha + b.o[c] * beta;
  // exercise merge ends
  return r;
}

// The state of query row i of (batch b, head h) over the keys j0 <= j < j1.
template <class T>
State<T> partial(const fa::AttnProblem& p, const T* Q, const T* K, const T* V, int64_t b, int64_t h,
                 int64_t i, int64_t j0, int64_t j1) {
  const T scale = T(p.resolved_scale());
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T* q = Q + p.q_offset(b, h, i);
  State<T> st = empty_state<T>(p.d);
  for (int64_t j = j0; j < j1; ++j) {
    // Step 1: S_ij = scale * q_i . k_j (softcapped if asked: c tanh(S_ij / c)), or -inf if row i
    // may not see key j (causal, window). Used, then dropped.
    T s = neg_inf;
    if (p.visible(i, j)) {
      const T* k = K + p.kv_offset(b, h, j);
      T dot = 0;
      for (int64_t c = 0; c < p.d; ++c) dot += q[c] * k[c];
      s = p.capped(scale * dot);
    }
    // Step 2: fold it into (m, l, o) (Milakov & Gimelshein Alg. 3 line 5, with o alongside).
    add_key(st, s, V + p.kv_offset(b, h, j));
  }
  return st;
}

// O_i = o / l, divided once at the end, and LSE_i = m + log(l) = log(sum_j exp(S_ij)).
// A state that saw no visible key (l = 0) gives O_i = 0 and LSE_i = -inf, never 0 / 0.
template <class T>
void finish(const State<T>& st, T* o, T* lse) {
  if (st.l == 0) {
    for (size_t c = 0; c < st.o.size(); ++c) o[c] = 0;
    *lse = -std::numeric_limits<T>::infinity();
    return;
  }
  for (size_t c = 0; c < st.o.size(); ++c) o[c] = st.o[c] / st.l;
  *lse = st.m + std::log(st.l);
}

// Forward: one pass over the keys per query row. Writes O [B,H,N_q,d] and LSE [B,H,N_q].
// Extra memory: one State, d + 2 elements, whatever N_q and N_k (stages 01-02: 2 B H N_q N_k).
template <class T>
void forward(const fa::AttnProblem& p, const T* Q, const T* K, const T* V, T* O, T* LSE) {
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i) {
        const State<T> st = partial(p, Q, K, V, b, h, i, 0, p.N_k);
        finish(st, O + p.q_offset(b, h, i), LSE + p.lse_offset(b, h, i));
      }
}

}  // namespace online_softmax
