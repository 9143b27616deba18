// Memory-traffic accounting: how many elements each stage moves between the big arrays (the
// "HBM": Q, K, V, O, LSE, and S, P where a stage materialises them) and its small working set
// (the "SRAM"). This is the quantity Dao et al. 2022 reason about (Theorem 2): FlashAttention is
// faster not because it does fewer FLOPs (it does the same, plus a little) but because it moves
// fewer bytes through the slow memory.
//
// Units: elements (multiply by sizeof(float) for bytes). One element read from Q counts 1.
//
// The model, one rule for every stage: a stage's "SRAM" is what its loops keep and reuse between
// two uses of it; everything else is "HBM" and counts once per use.
//   stages 01-03 work one query row at a time: the row q_i and its running state (m, l, o_i) are
//                the working set, so every key/value row they touch counts once per query row.
//   stage 04     keeps blocks of Br query rows and Bc key/value rows in buffers; each K_j, V_j
//                block read from HBM is reused by all Br rows of the query block.
// Stages 01-03 are counted analytically (formulas below, derived from their loops); stage 04
// counts what its block copies really move (tiled::forward with an IoCount) and test_04_tiled_cpu checks that
// the count equals tiled_io() below.
#pragma once
#include <algorithm>
#include <cstdint>

#include "problem.hpp"

namespace fa {

struct IoCount {
  int64_t hbm_read = 0;   // elements read from Q, K, V (and S, P when materialised)
  int64_t hbm_write = 0;  // elements written to O, LSE (and S, P when materialised)
  int64_t sram = 0;       // element accesses by the arithmetic inside the block buffers (stage 04)
  int64_t hbm() const { return hbm_read + hbm_write; }
  IoCount& operator+=(const IoCount& o) {
    hbm_read += o.hbm_read, hbm_write += o.hbm_write, sram += o.sram;
    return *this;
  }
};

// Sum over query rows of the keys each row sees (N_q * N_k without a mask).
inline int64_t visible_pairs(const AttnProblem& p) {
  int64_t n = 0;
  for (int64_t i = 0; i < p.N_q; ++i) n += p.keys_seen(i);
  return n;
}

// Stage 01 (01_naive/naive.hpp), per (b, h):
//   read  Q row once per query row                 N_q d
//         K row for every visible (i, j)           d * visible
//         S once (exp pass), P twice (divide, PV)  3 N_q N_k
//         V row for every (i, j) (the PV loop runs over all keys, masked P = 0)  N_q N_k d
//   write S once, P twice (exp, divide)            3 N_q N_k
//         O, LSE                                   N_q d + N_q
inline IoCount io_stage01(const AttnProblem& p) {
  const int64_t bh = p.B * p.H, NN = p.N_q * p.N_k;
  IoCount c;
  c.hbm_read = bh * (p.N_q * p.d + p.d * visible_pairs(p) + 3 * NN + NN * p.d);
  c.hbm_write = bh * (3 * NN + p.N_q * p.d + p.N_q);
  return c;
}

// Stage 02 (02_safe_softmax/safe_softmax.hpp): stage 01's traffic plus its extra pass over S
// (the row max), which reads S once more.
inline IoCount io_stage02(const AttnProblem& p) {
  IoCount c = io_stage01(p);
  c.hbm_read += p.B * p.H * p.N_q * p.N_k;
  return c;
}

// Stage 03 (03_online_softmax/online_softmax.hpp: one pass per query row, the running state
// (m, l, o) kept on chip), per (b, h):
//   read  q_i once                                  N_q d
//         K row of every visible key                d * visible
//         V row of every key (add_key() runs for masked keys too, with weight 0)   N_q N_k d
//   write O, LSE once per row                       N_q d + N_q
// No N x N array exists, but every key/value row is read again for every query row.
inline IoCount io_stage03(const AttnProblem& p) {
  const int64_t bh = p.B * p.H;
  IoCount c;
  c.hbm_read = bh * (p.N_q * p.d + p.d * visible_pairs(p) + p.N_q * p.N_k * p.d);
  c.hbm_write = bh * (p.N_q * p.d + p.N_q);
  return c;
}

// Stage 04 (04_tiled_cpu/tiled.hpp) with blocks Br x Bc, exactly what its block copies move:
// per (b, h) and query block of br rows (the last one may be ragged):
//   read  Q_i once                                     br d
//         K and V rows of every key it visits          2 d * keys_loaded
//   write O_i, LSE_i once                              br d + br
// keys_loaded = N_k without a mask; with the causal mask, the keys the block's last row sees
// (key_end of that row): key blocks entirely above the diagonal are skipped, and the block that
// crosses the diagonal is loaded only up to that key, not to its block edge. With a sliding
// window, loading also starts at the first key the block's first row sees (key_begin): about
// w + br keys per block for a window of w keys, so the traffic and the work are O(N_q w), not
// O(N_q N_k). So Bc does not appear: it changes how the keys are cut into blocks, not how many
// are loaded.
inline IoCount tiled_io(const AttnProblem& p, int64_t Br, int64_t Bc) {
  (void)Bc;  // kept in the signature: the count is the same for every Bc (see above)
  IoCount c;
  for (int64_t r0 = 0; r0 < p.N_q; r0 += Br) {
    const int64_t br = std::min(Br, p.N_q - r0);
    const int64_t keys_loaded = std::max<int64_t>(0, p.key_end(r0 + br - 1) - p.key_begin(r0));
    c.hbm_read += br * p.d + 2 * p.d * keys_loaded;
    c.hbm_write += br * p.d + br;
  }
  c.hbm_read *= p.B * p.H;
  c.hbm_write *= p.B * p.H;
  return c;
}

// Theorem 2 of Dao et al. 2022: with an SRAM of M elements, FlashAttention makes
// Theta(N^2 d^2 / M) HBM accesses. Its leading term with the paper's blocks (Br = M / 4d rows of
// Q per block, every key/value row read once per query block) is
//   2 N_q N_k d / Br = 8 N_q N_k d^2 / M     per (b, h), non-causal.
// It holds while M <= 4 d^2: beyond that Br = min(Bc, d) stops growing at d and the count
// flattens at 2 N_q N_k (see the README's table).
inline double theorem2_leading(const AttnProblem& p, double M_elems) {
  return double(p.B * p.H) * 8.0 * double(p.N_q) * double(p.N_k) * double(p.d) * double(p.d) /
         M_elems;
}

}  // namespace fa
