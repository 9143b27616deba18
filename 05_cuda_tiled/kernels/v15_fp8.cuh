// v15: v12 in FP8. Q, K and V arrive in e4m3 (8 bits: 3 significand bits, largest 448) with one
// power-of-two scale per block of rows; the tensor cores multiply e4m3 at twice bf16's rate
// (wgmma k = 32 instead of 16, the same 64 x N x 32-byte step). FlashAttention-3 (Shah et al.
// 2024, section 3.3, "Low-precision with FP8") is the design; docs/fp8.md is the lesson. Read it
// beside v12_warp_specialized.cuh: the producer, the rings, the tile scheduler and the softmax
// are v12's; what changes is what the tensor cores are fed and how their results are combined.
//
//   v12 (bf16)                                     v15 (e4m3)
//   S_j = Q_i K_j^T from 16-bit tiles              the same from e4m3 tiles, times sQ_i sK_j (the
//                                                  blocks' scales) folded into the softmax's
//                                                  scale: c_j = scale log2(e) sQ_i sK_j, one
//                                                  multiply a block, not a pass over the tile
//   P in bf16 registers (the S accumulator's       P in e4m3: 256 P (the row's largest weight at
//   layout is P V's A layout, lane for lane)       256, so weights down to ~2^-18 keep a value)
//                                                  packed four to a register; the accumulator's
//                                                  columns are NOT the 8-bit A layout's (ptx.cuh,
//                                                  "FP8"), so each thread packs the four scores it
//                                                  holds as if they were keys 4 t4 ... 4 t4 + 3,
//                                                  and V^T's keys are stored in that same order
//                                                  (vt_key(): free, done by the pre-pass that
//                                                  transposes V)
//   V_j [keys x d] read MN-major                   V^T_j [d x keys] read K-major: 8-bit wgmma has
//                                                  no transposed operand (runner_fp8.cu transposes
//                                                  V once per call, before the kernel)
//   O += P_j V_j in the tensor core's              O_j = P_j V_j in an accumulator of its own
//   accumulator (fp32)                             (scale_d = 0), then O = alpha O + sV_j O_j in
//                                                  float32 registers: FP8 wgmma adds into its
//                                                  accumulator with ~13 significand bits, which over
//                                                  N_k / 32 steps of a long sequence would lose
//                                                  up to N_k / 32 x 2^-13 (6 % at 16k keys); each
//                                                  block's 4 steps lose at most ~4 x 2^-13. The
//                                                  per-block sV_j is applied there too.
//   O rescaled by alpha before P V (v11)           alpha applied in that float32 merge instead
//   O staged through the Q buffer (v11)            O (bf16, 2 bytes a value) no longer fits the
//                                                  Q buffer (1 byte a value): written from registers
//   40 / 232 registers (producer / consumers)      24 / 240: O, O_j, S and P take 208 registers
//   the two consumer warpgroups drift freely       they take turns at the tensor cores (ping-pong,
//                                                  named barriers): FP8 products take half bf16's
//                                                  time, so a block's 64 x 128 exponentials (the
//                                                  special-function unit: 16 a cycle an SM) now
//                                                  take as long as its products, and must overlap
//                                                  the other warpgroup's
//
// Compiles for D = 128, Bc = 128 (a 128-byte row of Q, K or V^T: one TMA box and one 128-byte
// swizzle row); the runner launches it on sm_90a only, with tensor maps of Q, K (d x N x slices)
// and V^T (N_k rounded up to 16 x d x slices), in bytes.
#pragma once
#include <cuda.h>  // CUtensorMap (a type only)
#include <cuda_bf16.h>

#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"
#include "runner_fp8.hpp"  // vt_key, the scale block sizes

namespace fa05::v15 {

constexpr int kProducerThreads = 128;  // warpgroup 0, as v12
// 384 x 168 = 64,512 registers at launch (v12's pool); 128 x 24 + 256 x 240 = 64,512.
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
constexpr int kWarps = 8, Br = 16 * kWarps;  // two consumer warpgroups of 64 query rows
static_assert(Br == 2 * kFp8RowsQ, "one Q scale per consumer warpgroup's 64 rows");

// Shared memory: two K, two V^T and two Q buffers of 128 x 128 bytes, plus 1024 for alignment.
constexpr int64_t smem_bytes(int D, int Bc) { return 2 * int64_t(Bc) * D + 2 * int64_t(D) * Bc + 2 * int64_t(Br) * D + 1024; }

// The score unit c = scale log2(e) sQ_i sK_j that turns an e4m3 product Q8 K8^T into log2 units.
// Tiny blocks (scales near 2^-126) can make c underflow to 0, and a masked score's -inf * 0 is NaN:
// c is kept at least the smallest normal float (a NaN c, from a non-finite block, stays NaN).
__device__ __forceinline__ float score_unit(float cq, float sk) {
  const float c = cq * sk;
  return c < 0x1p-126f ? 0x1p-126f : c;
}

// Q8 [B,H,N_q,D], K8 [B,H_kv,N_k,D] and Vt8 [B,H_kv,D,N_k16] (e4m3 bytes) are read through the maps;
// sQ [B H, ceil(N_q / 64)], sK and sV [B H_kv, ceil(N_k / 128)]: the blocks' scales (runner_fp8.hpp).
// O [B,H,N_q,D] bf16, LSE [B,H,N_q] float32 natural log. n_tiles = B H Tr, tile_counter as v12.
template <int D, int Bc>
__global__ void __launch_bounds__(32 * kWarps + kProducerThreads, 1)
forward_kernel(__nv_bfloat16* __restrict__ O, float* __restrict__ LSE, const fa::AttnProblem p, const float scale,
               const int64_t Tr, unsigned* __restrict__ tile_counter, const float* __restrict__ sQ,
               const float* __restrict__ sK, const float* __restrict__ sV, const int64_t q_blocks,
               const int64_t kv_blocks, const __grid_constant__ CUtensorMap tm_q,
               const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_vt) {
  constexpr int kConsumers = 32 * kWarps;
  static_assert(D == 128 && Bc == 128, "one 128-byte row of Q, K and V^T per TMA box and swizzle row");
  static_assert(Bc == kFp8RowsKV, "one K and V scale per key block");
  constexpr int kThreads = kProducerThreads + kConsumers, kPool = kThreads * (65536 / kThreads / 8 * 8);
  static_assert(kProducerThreads * kProducerRegs + kConsumers * kConsumerRegs <= kPool, "the block's registers");
  extern __shared__ __align__(16) unsigned char sram[];
  __shared__ uint64_t full_q[2], full_k[2], full_v[2], empty_q[2], empty_k[2], empty_v[2];
  __shared__ int64_t tile_of[2];
  uint8_t* Ks = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(sram) + 1023) / 1024 * 1024);  // (2, Bc x D)
  uint8_t* Vts = Ks + 2 * Bc * D;  // (2, D x Bc): V^T of key block n in buffer n % 2
  uint8_t* Qs = Vts + 2 * D * Bc;  // (2, Br x D)
  const float neg_inf = -INFINITY;
  const int64_t BH = p.B * p.H, n_tiles = BH * Tr;

  struct Tile {  // v12's
    int64_t r0;
    int b, h, Tc, br;
  };
  const auto tile = [&](int64_t t) {
    const int64_t bh = p.causal ? t % BH : t / Tr, qb = p.causal ? Tr - 1 - t / BH : t % Tr;
    Tile x{qb * Br, int(bh / p.H), int(bh % p.H), 0, 0};
    x.br = int(min(int64_t(Br), p.N_q - x.r0));
    x.Tc = int(max(int64_t(0), (p.keys_seen(x.r0 + x.br - 1) + Bc - 1) / Bc));
    return x;
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      ptx::mbar_init(&full_q[s], 1), ptx::mbar_init(&full_k[s], 1), ptx::mbar_init(&full_v[s], 1);
      ptx::mbar_init(&empty_q[s], kConsumers), ptx::mbar_init(&empty_k[s], kConsumers);
      ptx::mbar_init(&empty_v[s], kConsumers);
    }
    ptx::mbar_init_fence();
  }
  __syncthreads();

  if (threadIdx.x < kProducerThreads) {
    // ---- The producer: v12's, one box per tile (a row of D bytes is one 128-byte box row).
    ptx::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x != 0) return;
    const auto copy = [&](uint8_t* dst, int bytes, const CUtensorMap& map, int x, int row, int64_t slice, uint64_t* full) {
      ptx::mbar_arrive_expect_tx(full, uint32_t(bytes));
      ptx::tma_load_3d(dst, &map, x, row, int(slice), full);
    };
    int64_t t = blockIdx.x;
    uint32_t n = 0;
    for (uint32_t step = 0;; ++step) {
      const int qs = step % 2;
      ptx::mbar_wait(&empty_q[qs], (step / 2 + 1) % 2);
      tile_of[qs] = t;
      if (t >= n_tiles) {
        ptx::mbar_arrive(&full_q[qs]);
        break;
      }
      const Tile x = tile(t);
      if (x.Tc > 0)
        copy(Qs + qs * Br * D, Br * D, tm_q, 0, int(x.r0), int64_t(x.b) * p.H + x.h, &full_q[qs]);
      else
        ptx::mbar_arrive(&full_q[qs]);
      const int64_t kv_slice = int64_t(x.b) * p.H_kv + p.kv_head(x.h);
      for (int j = 0; j < x.Tc; ++j, ++n) {
        const uint32_t free = (n / 2 + 1) % 2;
        ptx::mbar_wait(&empty_k[n % 2], free);
        copy(Ks + (n % 2) * Bc * D, Bc * D, tm_k, 0, j * Bc, kv_slice, &full_k[n % 2]);
        ptx::mbar_wait(&empty_v[n % 2], free);
        copy(Vts + (n % 2) * D * Bc, D * Bc, tm_vt, j * Bc, 0, kv_slice, &full_v[n % 2]);  // keys j Bc ..., all D rows
      }
      t = gridDim.x + int64_t(atomicAdd(tile_counter, 1u));
    }
  } else {
    // ---- The consumers: v12's tile in FP8.
    ptx::setmaxnreg_inc<kConsumerRegs>();
    if (threadIdx.x >= kProducerThreads + 128) ptx::named_bar_arrive<1, kConsumers>();  // ping-pong's first turn (below)
    const int warp = threadIdx.x / 32 - kProducerThreads / 32, lane = threadIdx.x % 32, wg = warp / 4;
    const int g = lane / 4, t4 = lane % 4;
    const auto ready = [&](uint64_t(&full)[2], uint32_t n) { ptx::mbar_wait(&full[n % 2], (n / 2) % 2); };
    const auto release = [&](uint64_t(&empty)[2], uint32_t n) { ptx::mbar_arrive(&empty[n % 2]); };
    // Ping-pong (FlashAttention-3, section 3.1): the two warpgroups take turns at the tensor cores.
    // Named barrier 1 + w is warpgroup w's turn; it completes when w waits on it and the other
    // warpgroup has arrived, which the other does right after issuing its own products. So the
    // issues alternate, w0, w1, w0, ..., and each warpgroup's softmax runs while the other's
    // products occupy the tensor cores, instead of both computing exponentials at once (they
    // read the same K and V buffers, so without this they drift into step). Warpgroup 1 opened
    // with an arrival (above): warpgroup 0 goes first.
    const auto my_turn = [&] {
      if (wg == 0) ptx::named_bar_sync<1, kConsumers>();
      else ptx::named_bar_sync<2, kConsumers>();
    };
    const auto your_turn = [&] {
      if (wg == 0) ptx::named_bar_arrive<2, kConsumers>();
      else ptx::named_bar_arrive<1, kConsumers>();
    };
    uint32_t n0 = 0;
    for (uint32_t step = 0;; ++step) {
      const int qbuf = step % 2;
      ready(full_q, step);
      const int64_t t = tile_of[qbuf];
      if (t >= n_tiles) break;
      const Tile cur = tile(t);
      const int64_t b = cur.b, h = cur.h, r0 = cur.r0;
      const int Tc = cur.Tc;
      const uint8_t* Qi = Qs + qbuf * Br * D + wg * 64 * D;  // this warpgroup's 64 rows
      const int64_t kv_slice = b * p.H_kv + p.kv_head(int(h));
      // scale log2(e) sQ_i: this warpgroup's rows share one Q scale (r0 is a multiple of 64); a
      // warpgroup whose rows all lie past N_q has none (its rows are not written)
      const int64_t qblk = r0 / kFp8RowsQ + wg;
      const float cq = scale * 1.4426950408889634f * (qblk < q_blocks ? sQ[(b * p.H + h) * q_blocks + qblk] : 1.f);
      const float* sKj = sK + kv_slice * kv_blocks;
      const float* sVj = sV + kv_slice * kv_blocks;

      float o[D / 8][4] = {};
      float m2[2] = {neg_inf, neg_inf};  // the row max so far, in log2 units (v7's m times c)
      float l[2] = {0.f, 0.f};           // this lane's share of the row sum of 256 P
      float alpha[2] = {1.f, 1.f};       // exp(m_{j-1} - m_j), from the latest softmax
      uint32_t a[Bc / 32][4];            // 256 P of the last softmax, e4m3, as P V's A registers

      const auto issue_s = [&](float(&s)[Bc / 8][4], int j) {
        const uint8_t* Kj = Ks + ((n0 + j) % 2) * Bc * D;
        for (int k = 0; k < D / 32; ++k)
          ptx::wgmma_m64n128k32_e4m3_ss(s, ptx::smem_desc_sw128(Qi + k * 32), ptx::smem_desc_sw128(Kj + k * 32), k > 0);
        ptx::wgmma_commit();
      };
      const auto issue_pv = [&](float(&oj)[D / 8][4], int j) {  // O_j = P_j V_j, a fresh accumulator
        const uint8_t* Vtj = Vts + ((n0 + j) % 2) * D * Bc;
        for (int k = 0; k < Bc / 32; ++k) ptx::wgmma_m64n128k32_e4m3_rs(oj, a[k], ptx::smem_desc_sw128(Vtj + k * 32), k > 0);
        ptx::wgmma_commit();
      };
      const auto pin_a = [&] {
        for (int k = 0; k < Bc / 32; ++k) ptx::wgmma_pin(a[k]);
      };
      // O = alpha_j O + sV_j O_j (alpha of the softmax that made P_j): the float32 merge, one FFMA
      // an element: o holds O / sv_o, in units of the latest block's V scale, so the merge is
      // o = o (alpha_j sv_o / sV_j) + O_j, and the epilogue multiplies by sv_o once. The unit starts
      // at block 0's scale (1 / sV_0 overflows for sV_0 < 2^-128). A block 2^32 below the largest
      // scale so far (never seen in real data; an all-zero block's scale 1 beside tiny ones) does
      // not become the unit: sv_max / sv_o <= 2^32 keeps o far from float32's overflow. (The branch
      // costs 3-5%: docs/lab/05_cuda_tiled.md, "Tiny blocks and far-apart V scales".)
      float sv_o = Tc > 0 ? sVj[0] : 1.f, sv_max = 0.f;
      const auto merge = [&](const float(&oj)[D / 8][4], const float(&al)[2], float sv) {
        sv_max = fmaxf(sv_max, sv);
        if (sv >= sv_max * 0x1p-32f) {  // the common path (false for a NaN scale: the else makes NaN)
          const float f[2] = {al[0] * (sv_o / sv), al[1] * (sv_o / sv)};
          for (int r = 0; r < 2; ++r)
            for (int n = 0; n < D / 8; ++n)
              for (int e = 2 * r; e < 2 * r + 2; ++e) o[n][e] = fmaf(o[n][e], f[r], oj[n][e]);
          sv_o = sv;
        } else {  // keep the unit: o = alpha o + (sV_j / sv_o) O_j
          const float q = sv / sv_o;
          for (int r = 0; r < 2; ++r)
            for (int n = 0; n < D / 8; ++n)
              for (int e = 2 * r; e < 2 * r + 2; ++e) o[n][e] = fmaf(oj[n][e], q, o[n][e] * al[r]);
        }
      };
      const auto softmax = [&](float(&s)[Bc / 8][4], int64_t j, float c) {  // v12's, P scaled by 2^8
        const int64_t c0 = j * Bc;
        const bool mask = c0 + Bc > p.N_k || (p.causal && c0 + Bc > p.keys_seen(r0));
        if (mask)
          for (int r = 0; r < 2; ++r) {
            const int seen = int(max(int64_t(0), min(int64_t(Bc), p.keys_seen(r0 + warp * 16 + g + r * 8) - c0)));
            for (int n = 0; n < Bc / 8; ++n)
              for (int e = 2 * r; e < 2 * r + 2; ++e)
                if (n * 8 + 2 * t4 + e % 2 >= seen) s[n][e] = neg_inf;
          }
        for (int r = 0; r < 2; ++r) {
          float mx = neg_inf;
          for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m2_new = fmaxf(m2[r], mx * c);
          const float m2_use = m2_new == neg_inf ? 0.f : m2_new;
          alpha[r] = ptx::ex2(m2[r] - m2_use);
          const float off = 8.f - m2_use;  // 2^(s c - m + 8) = 256 P: e4m3's range, not its subnormals
          float rowsum = 0.f;
          for (int n = 0; n < Bc / 8; ++n)
            for (int e = 2 * r; e < 2 * r + 2; ++e) {
              s[n][e] = ptx::ex2(fmaf(s[n][e], c, off));
              rowsum += s[n][e];  // the unrounded 256 P: l is summed before P is stored in e4m3
            }
          l[r] = fmaf(alpha[r], l[r], rowsum);
          m2[r] = m2_new;
        }
      };
      // The thread holds keys 8 n + 2 t4, + 1 of each n8 tile n; the A layout wants k = 4 t4 ... 4 t4 + 3
      // and 16 + 4 t4 ... of each 32: keys 2 t4, 2 t4 + 1, 8 + 2 t4, 9 + 2 t4 go to k = 4 t4 ... 4 t4 + 3
      // (tiles 4 k and 4 k + 1; 4 k + 2 and 4 k + 3 for the upper 16). V^T holds key vt_key(k) at
      // column k, so P V pairs every weight with its own key.
      const auto pack_p = [&](const float(&s)[Bc / 8][4]) {
        for (int k = 0; k < Bc / 32; ++k)
          for (int hi = 0; hi < 2; ++hi)
            for (int r = 0; r < 2; ++r) {
              const float(&x)[4] = s[4 * k + 2 * hi];
              const float(&y)[4] = s[4 * k + 2 * hi + 1];
              a[k][2 * hi + r] = ptx::pack4_e4m3(x[2 * r], x[2 * r + 1], y[2 * r], y[2 * r + 1]);
            }
      };

      if (Tc > 0) {
        float al_prev[2];  // alpha of the softmax whose P is in a[]: the merge of its P V uses it
        {  // block 0
          ready(full_k, n0);
          float s[Bc / 8][4];
          const float c = score_unit(cq, sKj[0]);
          ptx::wgmma_pin(s);
          my_turn();
          ptx::wgmma_fence();
          issue_s(s, 0);
          your_turn();
          ptx::wgmma_wait<0>();
          ptx::wgmma_pin(s);
          release(empty_k, n0);
          softmax(s, 0, c);
          pack_p(s);
          al_prev[0] = alpha[0], al_prev[1] = alpha[1];
        }
        for (int j = 1; j < Tc; ++j) {  // S_j beside P_{j-1} V_{j-1}, as v12
          const float c = score_unit(cq, sKj[j]), sv = sVj[j - 1];  // loaded before the waits: their latency hides
          ready(full_k, n0 + j);
          ready(full_v, n0 + j - 1);
          float s[Bc / 8][4], oj[D / 8][4];
          ptx::wgmma_pin(s);
          ptx::wgmma_pin(oj);
          pin_a();
          my_turn();
          ptx::wgmma_fence();
          issue_s(s, j);
          issue_pv(oj, j - 1);
          your_turn();
          ptx::wgmma_wait<1>();
          ptx::wgmma_pin(s);
          release(empty_k, n0 + j);
          softmax(s, j, c);  // overwrites alpha: al_prev still holds P_{j-1}'s
          ptx::wgmma_wait<0>();
          ptx::wgmma_pin(oj);
          pin_a();
          release(empty_v, n0 + j - 1);
          merge(oj, al_prev, sv);
          pack_p(s);
          al_prev[0] = alpha[0], al_prev[1] = alpha[1];
        }
        {  // the last block's P V
          const float sv = sVj[Tc - 1];
          ready(full_v, n0 + Tc - 1);
          float oj[D / 8][4];
          ptx::wgmma_pin(oj);
          pin_a();
          my_turn();
          ptx::wgmma_fence();
          issue_pv(oj, Tc - 1);
          your_turn();
          ptx::wgmma_wait<0>();
          ptx::wgmma_pin(oj);
          pin_a();
          release(empty_v, n0 + Tc - 1);
          merge(oj, al_prev, sv);
        }
      }

      // O_i = O_i / l and LSE = m + log(l / 256) (FA2 Alg. 1 lines 12-15), O from registers.
      for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int64_t i = r0 + warp * 16 + g + r * 8;
        // (o / l) sv_o, not o (sv_o / l): for a tiny block sv_o / l is a float32 subnormal with few bits
        const float inv = l[r] == 0.f ? 0.f : 1.f / l[r];
        if (i < p.N_q) {
          __nv_bfloat16* Oi = O + p.q_offset(b, h, i);
          for (int n = 0; n < D / 8; ++n)
            *reinterpret_cast<uint32_t*>(Oi + n * 8 + 2 * t4) =
                ptx::pack2<__nv_bfloat16>(o[n][2 * r] * inv * sv_o, o[n][2 * r + 1] * inv * sv_o);
          if (t4 == 0)
            LSE[p.lse_offset(b, h, i)] = l[r] == 0.f ? neg_inf : fmaf(m2[r], 0.6931471805599453f, logf(l[r]) - 5.545177444479562f);
        }
      }
      release(empty_q, step);  // no generic-proxy access to the Q buffer: the wgmma read it
      n0 += Tc;
    }
    // Both warpgroups issued as often (they share every tile): warpgroup 1's last arrival on
    // warpgroup 0's barrier is still open; complete it so that no barrier is left half-way.
    if (wg == 0) my_turn();
  }
}

// The pre-pass: V [slices, N_k, D] e4m3 -> V^T [slices, D, N_k16] (N_k16: N_k rounded up to 16),
// column k of a slice holding key vt_key(k) (runner_fp8.hpp), zeros past N_k. One block per
// (slice, 64 keys): 64 rows of D bytes in through shared memory, D rows of 64 bytes out.
template <int D>
__global__ void __launch_bounds__(256) transpose_v_kernel(const uint8_t* __restrict__ V, uint8_t* __restrict__ Vt,
                                                          const int64_t N_k, const int64_t N_k16) {
  __shared__ uint8_t tile[64][D + 4];  // + 4: the column reads of 4-byte words stay off one bank
  const int64_t slice = blockIdx.x, k0 = int64_t(blockIdx.y) * 64;
  const uint8_t* Vs = V + slice * N_k * D;
  for (int e = threadIdx.x * 4; e < 64 * D; e += 256 * 4) {
    const int r = e / D, c = e % D;
    const int64_t key = k0 + r;
    const uint32_t w = key < N_k ? *reinterpret_cast<const uint32_t*>(Vs + key * D + c) : 0u;
    *reinterpret_cast<uint32_t*>(&tile[r][c]) = w;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < D * 64; e += 256) {
    const int c = e / 64, k = e % 64;  // output row c (a head dim), column k0 + k
    if (k0 + k < N_k16) Vt[(slice * D + c) * N_k16 + k0 + k] = tile[vt_key(k)][c];
  }
}

}  // namespace fa05::v15
