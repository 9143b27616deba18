// Stage 06: FlashAttention's backward on a CPU, from O and LSE only.
//
// Stage 01's backward stores four N_q x N_k matrices per head (S, P, dP, dS). FlashAttention's
// forward keeps only O and the log-sum-exp LSE_i = m_i + log(l_i) of each row, O(N d) in all.
// The one new idea here: RECOMPUTE P block by block from what the forward kept,
//   P_ij = exp(S_ij - LSE_i)                      (the softmax, exactly: no running max needed)
// and replace the only row-wide quantity of the softmax Jacobian by one number per row,
//   D_i = rowsum(dO_i * O_i) = rowsum(P_i * dP_i)  (Dao et al. 2022, App. B.2, eq. for dS)
// so every gradient term is a product of blocks (Dao 2023, FlashAttention-2, Algorithm 2):
//   dV_j += P_ij^T dO_i     dP_ij = dO_i V_j^T     dS_ij = P_ij * (dP_ij - D_i)
//   dK_j += scale dS_ij^T Q_i                       dQ_i += scale dS_ij K_j
// No N x N matrix is stored: the extra memory is the block buffers and D (one float per row).
//
// Loop order and determinism. FA2's Algorithm 2 puts the key/value blocks outside (line 5), so
// dK_j and dV_j stay on chip for a whole pass over the queries and are written once (line 18);
// but dQ_i then receives a contribution from every key block (line 15), which FA2's GPU kernel
// adds to HBM with atomic additions (Sec. 3.2): the order of those additions, and so the
// rounding, changes with the schedule. Here the work is
// split in two passes so that every output element is written by one task, in a fixed order:
//   pass 1  parallel over (batch, kv head, key block j): dK_j, dV_j, FA2's loop order (lines 5-19,
//           less line 15). GQA: the query heads that share kv head are looped over inside the task,
//           so their dK, dV contributions add in a fixed order too.
//   pass 2  parallel over (batch, head, query block i): dQ_i, stage 04's loop order (S and dP
//           recomputed a second time).
// The price: 7 block products instead of 5 (40% more arithmetic than FA2 with atomics); the
// reward: bit-identical gradients for any thread count (tested), no atomics, no locks.
//
// Pass 1 works on transposed blocks (S_ij^T = scale K_j Q_i^T, key rows by query columns), so
// that P^T and dS^T, which multiply dO_i and Q_i, come out of stage 04's micro-kernels row-major.
//
// Shapes (common/problem.hpp): Q, O, dO, dQ [B,H,N_q,d]; K, V, dK, dV [B,H_kv,N_k,d];
// LSE [B,H,N_q] (natural log, -inf for a row that sees no key). Or token-major, one sequence of a
// packed batch (common/varlen.hpp): rows are found with p's offsets and row strides, never by
// stepping d.
//
// Blocks: not stage 04's. FA1's rule (Bc = M/4d, Br = min(Bc, d)) sizes the forward's four tiles;
// pass 1 keeps six tiles of Bc rows (K_j, V_j, dK_j, dV_j: Bc x d; S^T, dS^T: Bc x Br), and one
// task per key block means a big Bc leaves threads idle. Measured (README, BM_bwd_blocks of
// bench_06_backward_recompute): square blocks of 64 rows for d <= 64 and 128 above are within
// the run-to-run spread of the fastest shape tried.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "bug_zoo.hpp"
#include "microkernel.hpp"
#include "problem.hpp"
#include "tiled.hpp"

namespace bwd {

using tiled::Blocks;

// The backward's default block sizes (see the top of the file).
inline Blocks default_blocks(int64_t d) {
  Blocks b;
  b.Br = b.Bc = d <= 64 ? 64 : 128;
  return b;
}

// D_i = rowsum(dO_i * O_i) for every row (FA2 Alg. 2 line 4), float32: D[r] for row r of O and dO
// taken as B H N_q rows of d, in memory order (both layouts hold exactly those rows: D of row i of
// head h is D[q_offset(b, h, i) / d], [B,H,N_q] when contiguous).
inline void row_dots(const fa::AttnProblem& p, const float* O, const float* dO, float* D, int threads) {
  FA_ZOO(D_FROM_DO_ONLY, O = dO);  // zoo: D = rowsum(dO * dO)
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < p.lse_elems(); ++r) {
    // exercise row_dots begins
    float s = 0.f;
    for (int64_t c = 0; c < p.d; ++c) s += dO[r * p.d + c] * O[r * p.d + c];
    D[r] = s;
    // exercise row_dots ends
  }
}

// The loss gradient through attention (see the top of the file). Writes dQ, dK, dV (poisoned
// values are overwritten everywhere). Throws std::bad_alloc if the block buffers do not fit.
template <class T>
void backward(const fa::AttnProblem& p, const T* Q, const T* K, const T* V, const T* O, const T* dO,
              const T* LSE, T* dQ, T* dK, T* dV, const Blocks& blk) {
  static_assert(std::is_same_v<T, float>, "stage 06 uses stage 04's float32 micro-kernels");
  using namespace tiled::mk;
  const Blocks def = default_blocks(p.d);
  const int64_t d = p.d, G = p.H / p.H_kv;
  const int64_t ldkv = p.kv_row_stride();  // from one K (V) row to the next in memory
  const int64_t Br = std::min(blk.Br > 0 ? blk.Br : def.Br, p.N_q);
  const int64_t Bc = std::min(blk.Bc > 0 ? blk.Bc : def.Bc, p.N_k);
  const int64_t Tr = (p.N_q + Br - 1) / Br, Tc = (p.N_k + Bc - 1) / Bc;
  const float scale = p.resolved_scale();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // Padded to whole vectors: Brp, Bcp rows, dpad dims ("d padded"; dP is the gradient of P).
  const int64_t Brp = round_up(Br, VW), Bcp = round_up(Bc, VW), dpad = round_up(d, VW);
  // A tiny problem on one thread unless threads were asked for (stage 04's blocks_for() says why).
  const int threads = blk.threads > 0 ? blk.threads : p.forward_flops() < double(1 << 20) ? 1 : omp_get_max_threads();
  // The keys query row i sees, key_begin(i) <= j < key_end(i): problem.hpp's key_range() (the
  // bottom-right causal mask and the sliding window), as in the forward.
  const auto key_begin = [&p](int64_t i) { return p.key_begin(i); };
  const auto key_end = [&p](int64_t i) {
    FA_ZOO(BWD_CAUSAL_TOP_LEFT, return p.causal ? std::clamp<int64_t>(i + 1, 0, p.N_k) : p.N_k);  // zoo: top-left causal in the backward only
    return p.key_end(i);
  };
  // The query rows that see some key of j0 .. j1-1: both ends of a row's key range rise with the
  // row, so these rows are one range too, first .. last-1, found by bisection.
  const auto queries_seeing = [&](int64_t j0, int64_t j1) {
    const auto lowest = [&](auto pred) {  // the lowest row i with pred(i), N_q if none
      int64_t lo = 0, hi = p.N_q;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (pred(mid)) hi = mid;
        else lo = mid + 1;
      }
      return lo;
    };
    return std::pair{lowest([&](int64_t i) { return key_end(i) > j0; }),
                     lowest([&](int64_t i) { return key_begin(i) >= j1; })};
  };
  const bool cap = p.softcap > 0.f;  // softcap: dS is multiplied by the slope 1 - tanh^2

  std::vector<float> D(static_cast<size_t>(p.lse_elems()));  // one float per query row
  row_dots(p, O, dO, D.data(), threads);

  // ---- pass 1: dK_j, dV_j, one task per (batch, kv head, key block) --------------------------
  // Each thread's "SRAM", allocated before the parallel region (an exception cannot leave it);
  // mk::Buffer starts each buffer on a 64-byte cache line, as in stage 04.
  struct Sram1 {
    Buffer Kj, Vj;    // (Bc, d)      this key block
    Buffer Qt, dOt;   // (d, Brp)     Q_i, dO_i transposed (B operands of S^T, dP^T)
    Buffer Qi, dOi;   // (Br, dpad)   Q_i, dO_i by rows (B operands of dK, dV)
    Buffer St, dSt;   // (Bc, Brp)    S^T then P^T; dP^T then dS^T
    Buffer dKj, dVj;  // (Bc, dpad)   the gradients being summed
    Buffer L, Di;     // (Brp)        LSE_i (+inf for a row that sees no key), D_i
    Buffer Tt;        // (Bc, Brp)    softcap only: the slope 1 - tanh^2 of each capped S^T
  };
  std::vector<Sram1> s1(static_cast<size_t>(threads));
  for (Sram1& t : s1)
    t = {Buffer(Bc * d), Buffer(Bc * d), Buffer(d * Brp), Buffer(d * Brp), Buffer(Br * dpad, 0.f),
         Buffer(Br * dpad, 0.f), Buffer(Bc * Brp), Buffer(Bc * Brp), Buffer(Bc * dpad),
         Buffer(Bc * dpad), Buffer(Brp), Buffer(Brp), Buffer(cap ? Bc * Brp : 0)};

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < p.B * p.H_kv * Tc; ++t) {
    auto& [Kj, Vj, Qt, dOt, Qi, dOi, St, dSt, dKj, dVj, L, Di, Tt] = s1[static_cast<size_t>(omp_get_thread_num())];
    const int64_t b = t / (p.H_kv * Tc), hk = t / Tc % p.H_kv, c0 = t % Tc * Bc;
    const int64_t bc = std::min(Bc, p.N_k - c0);
    // Load K_j, V_j into SRAM (FA2 Alg. 2 line 6); dK_j = dV_j = 0 on chip (line 7).
    const T* k = K + p.kv_offset(b, hk * G, c0);  // query head hk * G reads kv head hk
    const T* v = V + p.kv_offset(b, hk * G, c0);
    for (int64_t c = 0; c < bc; ++c) {
      std::copy(k + c * ldkv, k + c * ldkv + d, Kj.data() + c * d);
      std::copy(v + c * ldkv, v + c * ldkv + d, Vj.data() + c * d);
    }
    std::fill(dKj.begin(), dKj.end(), 0.f);
    std::fill(dVj.begin(), dVj.end(), 0.f);
    // Queries outside i_first .. i_last-1 see none of these keys (causal: those before the
    // diagonal reaches them; a window: also those it has passed); their blocks are skipped whole.
    const auto [i_first, i_last] = queries_seeing(c0, c0 + bc);

    for (int64_t h = hk * G; h < (hk + 1) * G; ++h)  // GQA: heads sharing hk
      for (int64_t r0 = i_first / Br * Br; r0 < i_last; r0 += Br) {  // line 8: the query blocks
        FA_ZOO(GQA_FIRST_HEAD_ONLY, if (h != hk * G) continue);  // zoo: the group's first head only
        const int64_t br = std::min(Br, p.N_q - r0), brp = round_up(br, VW);
        // Load Q_i, dO_i (rows, and transposed), LSE_i and D_i (line 9).
        for (int64_t r = 0; r < br; ++r) {
          const T* q = Q + p.q_offset(b, h, r0 + r);
          const T* g = dO + p.q_offset(b, h, r0 + r);
          std::copy(q, q + d, Qi.data() + r * dpad);
          std::copy(g, g + d, dOi.data() + r * dpad);
          for (int64_t x = 0; x < d; ++x) Qt[x * Brp + r] = q[x], dOt[x * Brp + r] = g[x];
          // A row that sees no key has LSE = -inf; +inf makes its P exactly 0 below.
          const float lse = LSE[p.lse_offset(b, h, r0 + r)];
          L[r] = lse == neg_inf ? -neg_inf : lse;
          Di[r] = D[p.q_offset(b, h, r0 + r) / d];  // D follows O's rows (row_dots)
        }
        // S_ij^T = scale K_j Q_i^T (line 10), bc x brp.
        gemm_qk(Kj.data(), bc, d, Qt.data(), Brp, brp, scale, St.data(), Brp);
        // Only a block an edge of the band crosses needs the mask: the block's last key is past
        // what its first query sees (the diagonal), or its first key before what its last query
        // sees (the window's left edge).
        const bool crosses = c0 + bc > key_end(r0) || key_begin(r0 + br - 1) > c0;
        for (int64_t c = 0; c < bc; ++c) {
          float* s = St.data() + c * Brp;
          if (cap)  // S = c tanh(S / c) (problem.hpp's capped()), then its slope for dS below
            for (int64_t r = 0; r < br; ++r) s[r] = p.capped(s[r]);
          if (crosses)
            for (int64_t r = 0; r < br; ++r)
              if (c0 + c < key_begin(r0 + r) || c0 + c >= key_end(r0 + r)) s[r] = neg_inf;
          if (cap)
            for (int64_t r = 0; r < br; ++r) Tt[c * Brp + r] = p.capped_slope(s[r]);  // 0 where masked
          // P_ij^T = exp(S_ij^T - LSE_i) (line 11): the softmax, recomputed.
          for (int64_t r = 0; r < brp; r += VW) store(s + r, exp_neg(load(s + r) - load(L.data() + r)));
        }
        // dV_j += P_ij^T dO_i (line 12).
        gemm_pv(St.data(), Brp, bc, br, dOi.data(), dpad, dpad, dVj.data(), dpad);
        // dP_ij^T = V_j dO_i^T (line 13), then dS_ij^T = P_ij^T * (dP_ij^T - D_i) (line 14).
        gemm_qk(Vj.data(), bc, d, dOt.data(), Brp, brp, 1.f, dSt.data(), Brp);
        // exercise ds_t begins
        for (int64_t c = 0; c < bc; ++c) {
          float* ds = dSt.data() + c * Brp;
          const float* pt = St.data() + c * Brp;
          for (int64_t r = 0; r < brp; r += VW) store(ds + r, load(pt + r) * (load(ds + r) - load(Di.data() + r)));
        }
        // exercise ds_t ends
        if (cap)  // through the softcap: dS^T *= 1 - tanh^2 (the first br columns are used)
          for (int64_t c = 0; c < bc; ++c)
            for (int64_t r = 0; r < br; ++r) dSt[c * Brp + r] *= Tt[c * Brp + r];
        // dK_j += dS_ij^T Q_i (line 16; the factor scale is applied once, at the write).
        gemm_pv(dSt.data(), Brp, bc, br, Qi.data(), dpad, dpad, dKj.data(), dpad);
      }
    // Write dK_j, dV_j to HBM, once (line 18).
    T* dk = dK + p.kv_offset(b, hk * G, c0);
    T* dv = dV + p.kv_offset(b, hk * G, c0);
    for (int64_t c = 0; c < bc; ++c)
      for (int64_t x = 0; x < d; ++x) {
        dk[c * ldkv + x] = scale * dKj[c * dpad + x];
        dv[c * ldkv + x] = dVj[c * dpad + x];
      }
  }

  s1.clear();  // pass 1's buffers go before pass 2's come
  s1.shrink_to_fit();

  // ---- pass 2: dQ_i, one task per (batch, head, query block) ---------------------------------
  struct Sram2 {
    Buffer Qi, dOi;   // (Br, d)      this query block
    Buffer Kt, Vt;    // (d, Bcp)     K_j, V_j transposed (B operands of S, dP)
    Buffer Kj;        // (Bc, dpad)   K_j by rows (B operand of dQ)
    Buffer S, dS;     // (Br, Bcp)    S; dP then dS
    Buffer dQi;       // (Br, dpad)   the gradient being summed
    Buffer Sl;        // (Bcp)        softcap only: one row's slopes 1 - tanh^2
  };
  std::vector<Sram2> s2(static_cast<size_t>(threads));
  for (Sram2& t : s2)
    t = {Buffer(Br * d), Buffer(Br * d), Buffer(d * Bcp), Buffer(d * Bcp), Buffer(Bc * dpad, 0.f),
         Buffer(Br * Bcp), Buffer(Br * Bcp), Buffer(Br * dpad), Buffer(cap ? Bcp : 0)};

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < p.B * p.H * Tr; ++t) {
    auto& [Qi, dOi, Kt, Vt, Kj, S, dS, dQi, Sl] = s2[static_cast<size_t>(omp_get_thread_num())];
    const int64_t b = t / (p.H * Tr), h = t / Tr % p.H, r0 = t % Tr * Br;
    const int64_t br = std::min(Br, p.N_q - r0);
    for (int64_t r = 0; r < br; ++r) {
      const int64_t qo = p.q_offset(b, h, r0 + r);
      std::copy(Q + qo, Q + qo + d, Qi.data() + r * d);
      std::copy(dO + qo, dO + qo + d, dOi.data() + r * d);
    }
    std::fill(dQi.begin(), dQi.end(), 0.f);
    // As in stage 04's forward: the keys some row of the block sees, and no others.
    const int64_t keys_from = p.key_begin(r0), keys_needed = p.key_end(r0 + br - 1);

    for (int64_t c0 = keys_from; c0 < keys_needed; c0 += Bc) {
      const int64_t bn = std::min(Bc, keys_needed - c0), bcp = round_up(bn, VW);
      // K_j, V_j transposed (the B operand of the S and dP products) and K_j by rows (for dQ).
      const T* k = K + p.kv_offset(b, h, c0);
      const T* v = V + p.kv_offset(b, h, c0);
      for (int64_t c = 0; c < bn; ++c) {
        std::copy(k + c * ldkv, k + c * ldkv + d, Kj.data() + c * dpad);
        for (int64_t x = 0; x < d; ++x) Kt[x * Bcp + c] = k[c * ldkv + x], Vt[x * Bcp + c] = v[c * ldkv + x];
      }
      gemm_qk(Qi.data(), br, d, Kt.data(), Bcp, bcp, scale, S.data(), Bcp);      // S_ij
      gemm_qk(dOi.data(), br, d, Vt.data(), Bcp, bcp, 1.f, dS.data(), Bcp);     // dP_ij
      const bool crosses = c0 + bn > p.key_end(r0) || p.key_begin(r0 + br - 1) > c0;
      for (int64_t r = 0; r < br; ++r) {
        float* s = S.data() + r * Bcp;
        float* ds = dS.data() + r * Bcp;
        // Row r sees columns lo .. seen-1 of this block.
        const int64_t lo = crosses ? std::clamp<int64_t>(p.key_begin(r0 + r) - c0, 0, bn) : 0;
        const int64_t seen = crosses ? std::clamp<int64_t>(p.key_end(r0 + r) - c0, 0, bn) : bn;
        if (cap) tiled::softcap_row(p, s + lo, seen - lo);  // S = c tanh(S / c), as the forward
        std::fill(s, s + lo, neg_inf);          // masked keys and the padding: P = 0
        std::fill(s + seen, s + bcp, neg_inf);
        if (cap)
          for (int64_t c = 0; c < bcp; ++c) Sl[c] = p.capped_slope(s[c]);  // 0 where masked
        // exercise ds begins
        const float lse = LSE[p.lse_offset(b, h, r0 + r)];
        const float l = lse == neg_inf ? -neg_inf : lse, Dr = D[p.q_offset(b, h, r0 + r) / d];
        for (int64_t c = 0; c < bcp; c += VW) {  // P = exp(S - LSE), dS = P * (dP - D)
          const vf pv = exp_neg(load(s + c) - l);
          store(ds + c, pv * (load(ds + c) - Dr));
        }
        // exercise ds ends
        if (cap)  // through the softcap: dS *= 1 - tanh^2
          for (int64_t c = 0; c < bcp; ++c) ds[c] *= Sl[c];
      }
      // dQ_i += dS_ij K_j (FA2 Alg. 2 line 15, in a fixed order: no atomics).
      gemm_pv(dS.data(), Bcp, br, bn, Kj.data(), dpad, dpad, dQi.data(), dpad);
    }
    for (int64_t r = 0; r < br; ++r) {
      T* dq = dQ + p.q_offset(b, h, r0 + r);
      for (int64_t x = 0; x < d; ++x) dq[x] = scale * dQi[r * dpad + x];
    }
  }
}

// The stage's default: default_blocks(d), all OpenMP threads.
template <class T>
void backward(const fa::AttnProblem& p, const T* Q, const T* K, const T* V, const T* O, const T* dO,
              const T* LSE, T* dQ, T* dK, T* dV) {
  backward(p, Q, K, V, O, dO, LSE, dQ, dK, dV, Blocks{});
}

}  // namespace bwd
