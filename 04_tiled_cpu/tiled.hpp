// Stage 04: FlashAttention's forward on a CPU, tiled the way Dao et al. 2022 (Algorithm 1) tile it.
//
// Stage 03 already needs only O(d) extra memory per query row: a running max m, a running sum l
// and a running output o (the online softmax). But it still reads every key and value row from
// main memory once per query row, N_q * N_k * d elements each for K and V. The one new idea here:
// work on BLOCKS. Copy Br query rows and Bc key/value rows into small buffers that fit on chip
// (the "SRAM"), compute the Br x Bc block of scores S there, fold it into the running (m, l, O)
// of all Br rows at once, and move on. Each K_j, V_j block fetched from main memory (the "HBM")
// is now used by Br query rows instead of one, so the traffic drops by a factor Br
// (Theorem 2: Theta(N^2 d^2 / M) accesses for an SRAM of M elements).
//
// Loop order: FA2's (Dao 2023, Algorithm 1), not the 2022 paper's. The 2022 Algorithm 1 puts the
// key/value loop outside (line 5) and the query loop inside (line 7), so O_i, l_i, m_i go back and
// forth to HBM on every step (its lines 8 and 13). FA2 swaps them: each query block is loaded
// once, visits every key/value block, and is written once, dividing by l a single time at the end.
// That also makes query blocks independent: the outer loop is the parallel one (OpenMP over
// batch x head x query block) and the result cannot depend on the thread count.
//
// Block sizes: the 2022 paper sizes blocks from the SRAM size M (in elements):
//   Bc = ceil(M / 4d)  (Q_i, K_j, V_j, O_i of ~Bc x d each fit in M),  Br = min(Bc, d)   (line 1)
// blocks_from_sram() is that rule (the program's `--sram-bytes M` uses it). The default on a CPU,
// default_blocks(), is measured instead (README, "Speed"): Br = 256 rows, because K and V are
// read from main memory N_q / Br times, and a GPU's reason to keep Br <= d (the S block and the
// output rows live in registers) does not hold here; Bc up to 512, within M = the L2 of one core.
//
// Shapes and layout (common/problem.hpp): Q, O [B,H,N_q,d]; K, V [B,H_kv,N_k,d]; LSE [B,H,N_q].
// Or token-major, one sequence of a packed batch (common/varlen.hpp): rows are then H d (H_kv d)
// apart, so rows are found with p's offsets and row strides, never by stepping d.
// The micro-kernels (microkernel.hpp) are float32 only; T is kept for the common signature.
#pragma once
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "bug_zoo.hpp"
#include "io_count.hpp"
#include "microkernel.hpp"
#include "problem.hpp"

namespace tiled {

struct Blocks {
  int64_t Br = 0;   // query rows per block (0: from M)
  int64_t Bc = 0;   // key/value rows per block (0: from M)
  int threads = 0;  // OpenMP threads (0: omp_get_max_threads())
};

// Counting the traffic is a compile-time choice. forward(..., blk) runs with NoIo, whose counters
// are empty types: every `io.x += n` in the loop compiles to nothing. forward(..., blk, &count)
// with an fa::IoCount adds up the elements each step moves (common/io_count.hpp; the tests and
// the program's --io-report use it).
struct NoIo {
  struct Nothing {
    template <class N>
    Nothing& operator+=(N) { return *this; }
  };
  Nothing hbm_read, hbm_write, sram;
};

// The paper's block sizes for an SRAM of M_bytes (Algorithm 1, line 1), in float32 elements.
inline Blocks blocks_from_sram(int64_t M_bytes, int64_t d) {
  const int64_t M = std::max<int64_t>(1, M_bytes / int64_t(sizeof(float)));
  Blocks b;
  b.Bc = (M + 4 * d - 1) / (4 * d);
  b.Br = std::min(b.Bc, d);
  return b;
}

// M = the L2 cache of one core (the CPU's closest analogue of a GPU's shared memory in size).
inline int64_t default_sram_bytes() {
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 > 0 ? l2 : 1 << 20;
}

// The CPU default: Br = 256; Bc the largest multiple of 64 up to 512 whose S, K_j^T and V_j
// buffers ((Br + 2d) Bc floats) fill at most half of M = the L2 of one core (64 at least).
inline Blocks default_blocks(int64_t d) {
  const int64_t M = default_sram_bytes() / int64_t(sizeof(float));
  Blocks b;
  b.Br = 256;
  b.Bc = std::clamp<int64_t>(M / 2 / (b.Br + 2 * d) / 64 * 64, 64, 512);
  return b;
}

// The default Br shrinks when a problem has too few query rows to give every thread two blocks
// (B H ceil(N_q / Br) tasks): one head of a few hundred rows, or a batch of one short sequence,
// would otherwise run on one thread. Explicit block sizes are used as given.
inline int64_t rows_for_threads(int64_t Br, const fa::AttnProblem& p, int threads) {
  const int64_t heads = p.B * p.H, want = 2 * int64_t(threads);
  if (heads * ((p.N_q + Br - 1) / Br) >= want) return Br;
  const int64_t per_head = (want + heads - 1) / heads;  // query blocks each (b, h) needs
  return std::max<int64_t>(1, std::min(Br, (p.N_q + per_head - 1) / per_head));
}

// The blocks forward() runs p with: sizes given (> 0) as they are, zeros replaced by the default
// (default_blocks), both at most the problem's N_q, N_k; threads 0 replaced by
// omp_get_max_threads(), and never more threads than query blocks (B H ceil(N_q / Br) tasks):
// an idle thread would still cost its block buffers. Short sequences get smaller default blocks: at most N_k / 4 keys, and
// with the causal mask at most N_q / 8 rows (64 at least): each query block computes and throws
// away its diagonal triangle, Br^2 / 2 scores, a large share when N is a few Br. Measured at
// N = 1024 (README, "Block sizes"); then rows_for_threads.
inline Blocks blocks_for(const fa::AttnProblem& p, const Blocks& blk) {
  const Blocks def = default_blocks(p.d);
  const auto down64 = [](int64_t n) { return std::max<int64_t>(64, n / 64 * 64); };
  Blocks b;
  b.threads = blk.threads > 0 ? blk.threads : omp_get_max_threads();
  const int64_t Br = p.causal ? std::min(def.Br, down64(p.N_q / 8)) : def.Br;
  const int64_t Bc = std::min(def.Bc, down64(p.N_k / 4));
  b.Br = std::min(blk.Br > 0 ? blk.Br : rows_for_threads(Br, p, b.threads), p.N_q);
  b.Bc = std::min(blk.Bc > 0 ? blk.Bc : Bc, p.N_k);
  b.threads = int(std::min<int64_t>(b.threads, p.B * p.H * ((p.N_q + b.Br - 1) / b.Br)));
  // A tiny problem runs on one thread (unless threads were asked for): below 2^20 FLOPs (tens of
  // microseconds on one core) a parallel region's start and join cost about what it could save,
  // and far more on a loaded machine. A packed batch of many short sequences is many such calls
  // (varlen_forward: one per sequence): 20,000 sequences of one token ran 308 ms with a region
  // each, against 3.9 ms for the same work as one plain batch (a tester's measurement, lab
  // notebook 04, "Varlen").
  if (blk.threads <= 0 && p.forward_flops() < double(1 << 20)) b.threads = 1;
  return b;
}

// Floats of one thread's block buffers in forward() (its Sram) for head dim d and blocks b.
inline int64_t sram_floats(int64_t d, const Blocks& b) {
  const int64_t ldk = mk::row_stride(b.Bc), ldo = mk::row_stride(d);
  return b.Br * d + d * ldk + b.Bc * ldo + b.Br * ldk + b.Br * ldo + 2 * b.Br;
}

// The softcap on the n visible scores of a row, in place: s = c tanh(s / c) (problem.hpp's
// capped(), Gemma 2). A policy applied to the S block between gemm_qk and the mask, as the mask
// is; scalar std::tanh (microkernel.hpp has no vector tanh: about one tanh per score).
inline void softcap_row(const fa::AttnProblem& p, float* s, int64_t n) {
  for (int64_t x = 0; x < n; ++x) s[x] = p.capped(s[x]);
}

template <class T, class Io = NoIo>
void forward(const fa::AttnProblem& p, const T* Q, const T* K, const T* V, T* O, T* LSE,
             const Blocks& blk, Io* io_total = nullptr) {
  static_assert(std::is_same_v<T, float>, "stage 04's micro-kernels are float32");
  using namespace mk;
  const Blocks use = blocks_for(p, blk);
  const int64_t d = p.d, Br = use.Br, Bc = use.Bc;
  const int threads = use.threads;
  const int64_t Tr = (p.N_q + Br - 1) / Br;           // number of query blocks
  float scale = p.resolved_scale();
  FA_ZOO(HARDCODED_SCALE, scale = 1.f / std::sqrt(float(d)));  // zoo: 1/sqrt(d), whatever the problem says
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // dpad: d padded to whole vectors ("d padded"; not dP, the gradient of stage 06). ldk, ldo: the
  // row strides of the buffers with Bc and d columns (mk::row_stride: whole vectors, and never a
  // multiple of 128 bytes, so the rows a micro-kernel walks down do not crowd into a few L1 sets).
  const int64_t dpad = round_up(d, VW), ldk = row_stride(Bc), ldo = row_stride(d);
  const int64_t ldkv = p.kv_row_stride();  // from one K (V) row to the next in memory
  // The keys query row i sees, key_begin(i) <= j < key_end(i): problem.hpp's key_range() (the
  // bottom-right aligned causal mask and the sliding window).
  const auto key_begin = [&p](int64_t i) { return p.key_begin(i); };
  const auto key_end = [&p](int64_t i) {
    FA_ZOO(CAUSAL_TOP_LEFT, return p.causal ? std::min(p.N_k, i + 1) : p.N_k);  // zoo: top-left causal
    return p.key_end(i);
  };

  // The "SRAM": each thread's block buffers, O(Br d + Bc d + Br Bc) floats, whatever N is.
  // Allocated here, before the parallel region, so that running out of memory throws
  // std::bad_alloc to the caller (an exception cannot leave an OpenMP region). mk::Buffer is a
  // std::vector whose memory starts on a 64-byte cache line, so that no vector load in the
  // micro-kernels straddles two lines (microkernel.hpp, LineAligned).
  struct Sram {
    Buffer Qi;  // (Br, d)      this query block
    Buffer Kt;  // (d, ldk)     K_j transposed: keys along the vectors
    Buffer Vj;  // (Bc, ldo)
    Buffer S;   // (Br, ldk)    S, then P in place
    Buffer Oi;  // (Br, ldo)    the unnormalised output
    Buffer m;   // (Br)         running row max
    Buffer l;   // (Br)         running row sum
  };
  std::vector<Sram> sram(static_cast<size_t>(threads));
  for (Sram& t : sram)
    t = {Buffer(Br * d), Buffer(d * ldk), Buffer(Bc * ldo, 0.f), Buffer(Br * ldk), Buffer(Br * ldo),
         Buffer(Br), Buffer(Br)};

#pragma omp parallel num_threads(threads)
  {
    auto& [Qi, Kt, Vj, S, Oi, m, l] = sram[static_cast<size_t>(omp_get_thread_num())];
    Io io{};  // this thread's traffic (nothing at all with NoIo)

#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < p.B * p.H * Tr; ++t) {  // one task = (batch, head, query block)
      const int64_t b = t / (p.H * Tr), h = t / Tr % p.H, r0 = t % Tr * Br;
      const int64_t br = std::min(Br, p.N_q - r0);  // the last block may be ragged

      // Load Q_i into SRAM once; O_i = 0, l_i = 0, m_i = -inf on chip (Alg. 1 lines 2 and 8).
      for (int64_t r = 0; r < br; ++r) {
        const T* q = Q + p.q_offset(b, h, r0 + r);
        std::copy(q, q + d, Qi.data() + r * d);
        std::fill(Oi.data() + r * ldo, Oi.data() + r * ldo + dpad, 0.f);
        m[r] = neg_inf, l[r] = 0.f;
        FA_ZOO(FINITE_NEG_INF_INIT, m[r] = -1e4f);  // zoo: the running max starts finite
      }
      // Both ends of a row's keys rise with the row: the block's first row sees the first key
      // any row of it sees, its last row the last. Keys outside [keys_from, keys_needed) are
      // masked for every row of the block, and never loaded: with causal, the key blocks past the
      // diagonal; with a window of w keys, all but about w + Br keys, O(N w) work, not O(N^2).
      const int64_t keys_from = key_begin(r0), keys_needed = key_end(r0 + br - 1);

      for (int64_t c0 = keys_from; c0 < keys_needed; c0 += Bc) {  // Alg. 1 line 5 (FA2: the inner loop)
        const int64_t bc = std::min(Bc, p.N_k - c0);
        // Keys of this block past keys_needed are masked for every row; neither load nor compute
        // them. Without a mask, or away from the diagonal, bn = bc.
        const int64_t bn = std::min(bc, keys_needed - c0), bcp = round_up(bn, VW);

        // Load K_j and V_j into SRAM (line 6): only the bn keys some row of this block sees (a
        // block crossing the diagonal stops at keys_needed; the rest of it is never read). K_j goes
        // in transposed, Kt[x][c] = K_j[c][x], so that the micro-kernel reads keys as contiguous
        // vectors (transpose_k: VW x VW squares at a time, through registers). Columns bn .. bcp-1
        // of Kt (the padding to a whole vector) keep stale keys of an earlier block, finite or not: harmless, because their scores are overwritten with -inf
        // below before anything reads them, so P is exactly 0 there, and gemm_pv reads only the
        // first bn rows of Vj (and columns of P).
        // GQA: query head h reads kv head h / (H / H_kv) (problem.hpp's kv_offset).
        int64_t kv = p.kv_offset(b, h, c0);
        FA_ZOO(KV_HEAD_MOD, kv = p.kv_offset(b, h % p.H_kv * (p.H / p.H_kv), c0));  // zoo: kv head h % H_kv
        const T* Kj = K + kv;
        const T* Vsrc = V + kv;  // rows c0 .. c0 + bn - 1, ldkv apart (d, or H_kv d token-major)
        transpose_k(Kj, ldkv, bn, d, Kt.data(), ldk);
        for (int64_t c = 0; c < bn; ++c)
          std::copy(Vsrc + c * ldkv, Vsrc + c * ldkv + d, Vj.data() + c * ldo);
        io.hbm_read += 2 * bn * d;

        // S_ij = scale * Q_i K_j^T, a br x bn block (bcp columns computed), on chip (line 9).
        gemm_qk(Qi.data(), br, d, Kt.data(), ldk, bcp, scale, S.data(), ldk);

        // Only a block that an edge of the band crosses needs a mask: its last loaded key is past
        // what the block's first row may see (the diagonal), or its first key is before what the
        // last row may see (the window's left edge).
        const bool crosses = c0 + bn > key_end(r0) || key_begin(r0 + br - 1) > c0;
        for (int64_t r = 0; r < br; ++r) {
          float* s = S.data() + r * ldk;
          // Row r sees columns lo .. seen-1 of this block.
          const int64_t lo = crosses ? std::clamp<int64_t>(key_begin(r0 + r) - c0, 0, bn) : 0;
          const int64_t seen = crosses ? std::clamp<int64_t>(key_end(r0 + r) - c0, 0, bn) : bn;
          if (p.softcap > 0.f) softcap_row(p, s + lo, seen - lo);  // S = c tanh(S / c)
          // Masked keys and the padding past bn: whatever gemm_qk computed there (from stale Kt
          // columns, even NaN) is replaced by -inf, which exp_neg() turns into exactly 0.
          std::fill(s, s + lo, neg_inf);
          std::fill(s + seen, s + bcp, neg_inf);
          FA_ZOO(FINITE_MASK, std::fill(s + seen, s + bcp, -1e4f));  // zoo: masked with a finite "-inf"

          // Online softmax update of row r (lines 10-11; stage 03's update, Br rows at a time):
          //   m_new = max(m, rowmax(S)),  P = exp(S - m_new),  l = e^(m - m_new) l + rowsum(P)
          //   O_i  <- e^(m - m_new) O_i   (the P V_j term is added below, line 12)
          // exercise block_update begins
          const float m_new = std::max(m[r], row_max(s, bcp));
          // A row that has seen no key yet keeps m = -inf; subtract 0 instead, so -inf - -inf
          // never makes a NaN (stage 03's exp_minus()).
          const float m_use = m_new == neg_inf ? 0.f : m_new;
          const float alpha = std::exp(m[r] - m_use);  // rescales what was summed so far
          l[r] = alpha * l[r] + exp_sub_sum(s, bcp, m_use);  // s now holds P (unnormalised)
          if (alpha != 1.f) scale_row(Oi.data() + r * ldo, dpad, alpha);
          m[r] = m_new;
          // exercise block_update ends
        }
        // O_i += P_ij V_j (line 12, without the division: FA2 divides once, at the end).
        gemm_pv(S.data(), ldk, br, bn, Vj.data(), ldo, dpad, Oi.data(), ldo);
        FA_ZOO(DIVIDE_BY_L_IN_LOOP, for (int64_t r = 0; r < br; ++r)  // zoo: O_i / l per block, l never put back
                                      if (l[r] > 0.f) scale_row(Oi.data() + r * ldo, dpad, 1.f / l[r]));
        // SRAM accesses by the arithmetic (scalar model): two operands per multiply-add in both
        // GEMMs, S written, read twice (max, exp) and P written; O_i rescaled (read + write).
        io.sram += 4 * br * bn * d + 4 * br * bn + 2 * br * d;
      }

      // Write O_i = O_i / l_i and LSE_i = m_i + log(l_i) to HBM, once (FA2 lines 12-14).
      // A row that saw no key (causal, N_q > N_k) has l = 0: O = 0 and LSE = -inf, never NaN.
      for (int64_t r = 0; r < br; ++r) {
        T* o = O + p.q_offset(b, h, r0 + r);
        const float* acc = Oi.data() + r * ldo;
        if (l[r] == 0.f) {
          std::fill(o, o + d, 0.f);
          LSE[p.lse_offset(b, h, r0 + r)] = neg_inf;
          continue;
        }
        for (int64_t x = 0; x < d; ++x) o[x] = acc[x] / l[r];
        FA_ZOO(DIVIDE_BY_L_IN_LOOP, std::copy(acc, acc + d, o));  // zoo: (divided in the loop already)
        LSE[p.lse_offset(b, h, r0 + r)] = m[r] + std::log(l[r]);
        FA_ZOO(LSE_LOG2, LSE[p.lse_offset(b, h, r0 + r)] = m[r] + std::log2(l[r]));  // zoo: log base 2
      }
      io.hbm_read += br * d, io.hbm_write += br * d + br;
    }
    if constexpr (!std::is_same_v<Io, NoIo>) {
      if (io_total) {
#pragma omp critical
        *io_total += io;
      }
    }
  }
}

// The stage's default: blocks from M = the L2 size, all OpenMP threads.
template <class T>
void forward(const fa::AttnProblem& p, const T* Q, const T* K, const T* V, T* O, T* LSE) {
  forward(p, Q, K, V, O, LSE, Blocks{});
}

}  // namespace tiled
