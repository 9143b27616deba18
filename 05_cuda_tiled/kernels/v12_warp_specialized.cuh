// v12: v11 with its copies moved to a thread of their own, which drives the copy engine (TMA):
// FlashAttention-3's warp specialisation. Read it beside v11_o_smem.cuh: the consumers' tile keeps
// v11's steps (their math is v11's, bit for bit); what changes is who copies, how, and how the two
// sides wait for each other: a wait for a buffer and a release of it where v11 had copies and
// block barriers.
//
//   v11                                             v12
//   256 threads: two warpgroups do everything       384 threads: warpgroup 0 is the producer (one
//   the tile needs, copies included (8 cp.async     thread issues every copy, 2 TMA instructions
//   of 16 bytes per thread per K or V block, with   per K, V or Q tile; the rest of the warpgroup
//   their address arithmetic)                       only hands its registers back); warpgroups 1
//                                                   and 2 compute, v11's 64 rows each
//   a __syncthreads per key block: both             mbarriers per buffer: "full" (the copy has
//   warpgroups wait for the slower one, and for     landed) and "empty" (every consumer thread is
//   every copy of the block                         done with it); a warpgroup waits only for the
//                                                   buffer it needs next, so the two can drift
//                                                   apart, and one's softmax or O write can run
//                                                   beside the other's products
//   the next tile's Q_i and K_0 copied during the   the producer runs ahead by whole buffers: the
//   last key block; V_0 once the tile starts        next tile's Q_i, K_0 and V_0 as soon as their
//                                                   buffers are free
//   Q_i in rows of D + 8 elements (padding)         Q_i swizzled as K and V are (TMA writes the
//                                                   swizzle; ldmatrix and the O staging read and
//                                                   write through v7's swz)
//   232 registers for all 256 threads               setmaxnreg: the producer warpgroup drops to 40,
//                                                   the consumers rise to 232 (5,120 + 59,392: the
//                                                   64,512 the block gets at launch, 384 x 168)
//
// Why: at N = 512 (4 key blocks per tile) v11 spends about 4.3 us of each 16.9 us tile on its start
// and end (lab notebook, v11); in one run FlashAttention-2 lost 2 % from N = 8192 to N = 512 (lab notebook,
// "Measuring small N") and v11 26 % (lab notebook, v11). Our reading before the run: the barriers that
// tie the two warpgroups together at every key block also tie their tile ends together: both
// write O at the same time, and both wait for the next tile's first copies at the same time. FlashAttention-3 (Shah et al. 2024, section 3.1, "producer-consumer asynchrony
// through warp-specialization and pingpong scheduling") gives the copies to a producer that uses
// TMA, and lets the consumer warpgroups synchronise only through the buffers.
//
// A first draft kept cp.async, issued by one producer warp: 0.43-0.57x v11 at every N. One warp
// issuing 4,096 16-byte copies per key block (128 warp instructions of 32 copies, each with about
// 15 instructions of address arithmetic) was (our reading) slower than the math it fed (lab notebook,
// v12). TMA moves a box (16 KiB for Q and at
// Bc = 128, 8 KiB at Bc = 64) with one instruction.
//
// Measured on the H200 (lab notebook, v12; bf16, d = 128, one run): 1.5-1.8x v11 at every N, not only at
// small N as predicted; 2.02x FlashAttention-2 and 0.97x cuDNN at N = 8192. Our reading, not
// profiled yet: without the block barrier the two consumer warpgroups drift apart, so one's
// softmax runs beside the other's products (FlashAttention-3's ping-pong, here unforced).
//
// The pipeline (a K ring and a V ring of 2 buffers each, a Q ring of 2 tiles, as v11's shared
// memory): buffer n of a ring is slot n % 2, used for the (n / 2)-th time, so a consumer waits for
// the phase of parity (n / 2) % 2 of its "full" barrier, and the producer for the phase before,
// parity (n / 2 + 1) % 2, of its "empty" one, the release of the slot's previous use (ptx.cuh,
// mbarriers). The producer waits for "empty", arrives on "full"
// with the bytes to expect, and issues the copy, whose landing completes "full"; a consumer waits
// for "full", reads, and arrives on "empty". Which tile comes next travels with its Q buffer
// (tile_of): the producer claims tiles from v10's counter and writes the tile number before it
// arrives on that buffer's "full".
//
// Compiles for what v11 does; the runner launches it where v11 runs (d = 128, sm_90a), with a
// tensor map per Q, K and V (runner.cu).
#pragma once
#include <cuda.h>  // CUtensorMap (a type only: the maps are made through the runtime, runner.cu)

#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"
#include "v7_wgmma.cuh"       // the swizzled layout (swz) and its wgmma descriptors
#include "v8_persistent.cuh"  // smem_bytes: v7's K, V buffers and two Q tiles

namespace fa05::v12 {

using v7::swz;
using v8::smem_bytes;  // v11's: its Q tiles' padding is unused here (Q_i is swizzled, Br x D)

constexpr int kProducerThreads = 128;  // warpgroup 0; setmaxnreg applies to whole warpgroups
// setmaxnreg moves registers within the block's own pool, what it got at launch: 384 threads x 168
// (the cap __launch_bounds__(384, 1) gives ptxas; without the 1 there is no cap, and ptxas ignores
// setmaxnreg, warning C7508). An inc beyond that pool waits forever: 128 x 40 + 256 x 232 = 64,512.
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kBoxCols = 64;  // a TMA box is 64 columns wide: the 128-byte swizzle's row (16-bit T)

// As v11, plus the tensor maps of Q (d x N_q x B H, box 64 x Br), K and V (d x N_k x B H_kv, box
// 64 x Bc), 128-byte swizzle (runner.cu). n_tiles = B * H * Tr query blocks; the grid has at most
// that many thread blocks. tile_counter: one unsigned int, zero at launch (the runner's memset),
// counts the tiles claimed past the first gridDim.x. The block has 32 * kWarps consumer threads and
// kProducerThreads more. Q, K and V are read through the maps only.
template <class T, int D, int kWarps, int Bc>
__global__ void __launch_bounds__(32 * kWarps + kProducerThreads, 1)
forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
               T* __restrict__ O, float* __restrict__ LSE, const fa::AttnProblem p, const float scale,
               const int64_t Tr, unsigned* __restrict__ tile_counter, const __grid_constant__ CUtensorMap tm_q,
               const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v) {
  constexpr int Br = 16 * kWarps;  // 16 query rows per consumer warp, one mma row-tile each
  constexpr int kConsumers = 32 * kWarps;
  static_assert(kWarps == 8 && (Bc == 64 || Bc == 128), "two consumer warpgroups, one wgmma width for S");
  constexpr int kThreads = kProducerThreads + kConsumers, kPool = kThreads * (65536 / kThreads / 8 * 8);
  static_assert(kProducerThreads * kProducerRegs + kConsumers * kConsumerRegs <= kPool, "the block's registers");
  static_assert(D % kBoxCols == 0, "whole boxes per row");
  (void)Q, (void)K, (void)V;
  extern __shared__ __align__(16) unsigned char sram[];
  // The rings' barriers: full_*[s] expects the producer's one arrival and the bytes of its copies,
  // empty_*[s] every consumer thread.
  __shared__ uint64_t full_q[2], full_k[2], full_v[2], empty_q[2], empty_k[2], empty_v[2];
  __shared__ int64_t tile_of[2];  // the tile whose Q_i is in Q buffer s; n_tiles or more: no more tiles
  // 1024-aligned for the swizzle (v9 says how).
  T* Ks = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(sram) + 1023) / 1024 * 1024);  // (2, Bc x D)
  T* Vs = Ks + 2 * Bc * D;  // (2, Bc x D): key block n in buffer n % 2, swizzled
  T* Qs = Vs + 2 * Bc * D;  // (2, Br x D): this block's tile number k in buffer k % 2, swizzled
  const float neg_inf = -INFINITY;
  const int64_t BH = p.B * p.H, n_tiles = BH * Tr;

  // Tile t: (b, h, query block starting at row r0) in v9's order, and Tc, the key blocks it sees.
  struct Tile {  // 32-bit where the plan bounds it (B, H, key blocks, rows), to spare registers
    int64_t r0;
    int b, h, Tc, br;
  };
  const auto tile = [&](int64_t t) {
    const int64_t bh = p.causal ? t % BH : t / Tr, qb = p.causal ? Tr - 1 - t / BH : t % Tr;
    Tile x{qb * Br, int(bh / p.H), int(bh % p.H), 0, 0};
    x.br = int(min(int64_t(Br), p.N_q - x.r0));
    x.Tc = int(max(int64_t(0), (p.keys_seen(x.r0 + x.br - 1) + Bc - 1) / Bc));  // causal: blocks past it skipped
    return x;
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      ptx::mbar_init(&full_q[s], 1), ptx::mbar_init(&full_k[s], 1), ptx::mbar_init(&full_v[s], 1);
      ptx::mbar_init(&empty_q[s], kConsumers), ptx::mbar_init(&empty_k[s], kConsumers);
      ptx::mbar_init(&empty_v[s], kConsumers);
    }
    ptx::mbar_init_fence();  // the copy engine sees them initialised too
  }
  __syncthreads();  // the barriers exist before anyone waits on them; no block-wide barrier after this

  if (threadIdx.x < kProducerThreads) {
    // ---- The producer: one thread walks the tiles and copies every Q_i, K_j, V_j into its ring.
    ptx::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x != 0) return;  // the rest of the warpgroup only handed its registers back
    // A (rows x D) tile: D / 64 boxes of 64 columns, each into its column slab (v7's layout).
    const auto copy = [&](T* dst, int slab_rows, const CUtensorMap& map, int row, int64_t slice, uint64_t* full) {
      ptx::mbar_arrive_expect_tx(full, uint32_t(slab_rows * D * sizeof(T)));
      for (int x = 0; x < D; x += kBoxCols)
        ptx::tma_load_3d(dst + x * slab_rows, &map, x, row, int(slice), full);
    };
    int64_t t = blockIdx.x;  // as v10: the first tile is the block's own, the next ones are claimed
    uint32_t n = 0;          // key blocks copied so far: buffer n % 2 of the K and V rings
    for (uint32_t step = 0;; ++step) {  // step: this block's tile number k, in Q buffer k % 2
      const int qs = step % 2;
      ptx::mbar_wait(&empty_q[qs], (step / 2 + 1) % 2);  // the tile two before has written its O
      tile_of[qs] = t;
      if (t >= n_tiles) {  // no more tiles: the consumers read that from tile_of and stop
        ptx::mbar_arrive(&full_q[qs]);
        break;
      }
      const Tile x = tile(t);
      if (x.Tc > 0)
        copy(Qs + qs * Br * D, Br, tm_q, int(x.r0), int64_t(x.b) * p.H + x.h, &full_q[qs]);
      else
        ptx::mbar_arrive(&full_q[qs]);  // a tile that sees no key copies nothing: its O is 0
      const int64_t kv_slice = int64_t(x.b) * p.H_kv + p.kv_head(x.h);
      for (int j = 0; j < x.Tc; ++j, ++n) {
        const uint32_t free = (n / 2 + 1) % 2;  // the buffer's previous use has been released
        ptx::mbar_wait(&empty_k[n % 2], free);
        copy(Ks + (n % 2) * Bc * D, Bc, tm_k, j * Bc, kv_slice, &full_k[n % 2]);
        ptx::mbar_wait(&empty_v[n % 2], free);
        copy(Vs + (n % 2) * Bc * D, Bc, tm_v, j * Bc, kv_slice, &full_v[n % 2]);
      }
      t = gridDim.x + int64_t(atomicAdd(tile_counter, 1u));
    }
  } else {
    // ---- The consumers: v11's tile, with "wait for the buffer" where v11 had a block barrier.
    ptx::setmaxnreg_inc<kConsumerRegs>();
    const int warp = threadIdx.x / 32 - kProducerThreads / 32, lane = threadIdx.x % 32;  // warp: rows 16 warp ...
    const int g = lane / 4, t4 = lane % 4;  // fragment coordinates (ptx.cuh): row group, lane in quad
    const float c = scale * 1.4426950408889634f;  // scale * log2(e): exp(scale x) = 2^(c x)
    // Buffer n of a ring: wait until its copy has landed; release it once this thread is done with
    // it (for K and V: after the wgmma_wait that covers its reads).
    const auto ready = [&](uint64_t(&full)[2], uint32_t n) { ptx::mbar_wait(&full[n % 2], (n / 2) % 2); };
    const auto release = [&](uint64_t(&empty)[2], uint32_t n) { ptx::mbar_arrive(&empty[n % 2]); };
    uint32_t n0 = 0;  // key blocks consumed so far by this block: this tile's block j is n0 + j
    for (uint32_t step = 0;; ++step) {  // step: this block's tile number k in the comments
      const int qbuf = step % 2;
      ready(full_q, step);
      const int64_t t = tile_of[qbuf];
      if (t >= n_tiles) break;
      const Tile cur = tile(t);
      const int64_t b = cur.b, h = cur.h, r0 = cur.r0;
      const int Tc = cur.Tc;
      const T* Qi = Qs + qbuf * Br * D;

      float o[D / 8][4] = {};
      float m2[2] = {neg_inf, neg_inf};  // the row max so far times c (v7)
      float l[2] = {0.f, 0.f};  // this lane's share of the row sum; the quad's 4 shares add up at the end
      float alpha[2] = {1.f, 1.f};       // exp(m_{j-1} - m_j) per row: O's rescaling, applied one block late
      uint32_t a[Bc / 16][4];            // P~ of the last softmax as P V's A registers (a[k]: keys 16k .. 16k+15)
      float(*o64)[8][4] = reinterpret_cast<float(*)[8][4]>(o);  // o64[sl]: dims 64 sl .. 64 sl + 63

      // v11's steps, with block j of this tile in buffers (n0 + j) % 2.
      const auto load_q = [&](uint32_t(&q)[D / 16][4]) {  // Q_i is swizzled now: 16-byte chunk 2 k + lane / 16
        for (int k = 0; k < D / 16; ++k)
          ptx::ldmatrix_x4(q[k], Qi + swz<Br>(warp * 16 + lane % 8 + (lane / 8 % 2) * 8, 2 * k + lane / 16));
      };
      const auto rescale_o = [&] {
        for (int r = 0; r < 2; ++r)
          for (int n = 0; n < D / 8; ++n) o[n][2 * r] *= alpha[r], o[n][2 * r + 1] *= alpha[r];
      };
      const auto issue_s = [&](float(&s)[Bc / 8][4], const uint32_t(&q)[D / 16][4], int j) {
        const T* Kj = Ks + ((n0 + j) % 2) * Bc * D;
        for (int k = 0; k < D / 16; ++k)
          ptx::wgmma_m64nNk16<T, Bc, 0>(s, q[k], ptx::smem_desc_sw128(Kj + (k / 4) * Bc * 64 + (k % 4) * 16));
        ptx::wgmma_commit();
      };
      const auto issue_pv = [&](int j) {
        const T* Vj = Vs + ((n0 + j) % 2) * Bc * D;
        for (int k = 0; k < Bc / 16; ++k)
          for (int sl = 0; sl < D / 64; ++sl)
            ptx::wgmma_m64nNk16<T, 64, 1>(o64[sl], a[k], ptx::smem_desc_sw128(Vj + sl * Bc * 64 + k * 16 * 64));
        ptx::wgmma_commit();
      };
      const auto pin_pv = [&] {
        for (int sl = 0; sl < D / 64; ++sl) ptx::wgmma_pin(o64[sl]);
        for (int k = 0; k < Bc / 16; ++k) ptx::wgmma_pin(a[k]);
      };
      const auto softmax = [&](float(&s)[Bc / 8][4], int64_t j) {
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
          float rowsum = 0.f;
          for (int n = 0; n < Bc / 8; ++n)
            for (int e = 2 * r; e < 2 * r + 2; ++e) {
              s[n][e] = ptx::ex2(fmaf(s[n][e], c, -m2_use));
              rowsum += s[n][e];
            }
          l[r] = fmaf(alpha[r], l[r], rowsum);
          m2[r] = m2_new;
        }
      };
      const auto pack_p = [&](const float(&s)[Bc / 8][4]) {
        for (int k = 0; k < Bc / 16; ++k) {
          a[k][0] = ptx::pack2<T>(s[2 * k][0], s[2 * k][1]), a[k][1] = ptx::pack2<T>(s[2 * k][2], s[2 * k][3]);
          a[k][2] = ptx::pack2<T>(s[2 * k + 1][0], s[2 * k + 1][1]);
          a[k][3] = ptx::pack2<T>(s[2 * k + 1][2], s[2 * k + 1][3]);
        }
      };

      if (Tc > 0) {
        {  // block 0, as in v11
          // (Q_i is in: its "full" came first.)
          FA_ZOO_INSTEAD(MBAR_WRONG_PARITY, ready(full_k, n0 + 2))  // zoo: waits at the previous use's parity
          ready(full_k, n0);
          uint32_t q[D / 16][4];
          float s[Bc / 8][4] = {};
          load_q(q);
          ptx::wgmma_pin(s);
          ptx::wgmma_fence();
          issue_s(s, q, 0);
          ptx::wgmma_wait<0>();
          ptx::wgmma_pin(s);
          release(empty_k, n0);  // S_0 is done, so K_0 is read
          softmax(s, 0);
          pack_p(s);
        }
        for (int j = 1; j < Tc; ++j) {  // as in v11
          ready(full_k, n0 + j);
          ready(full_v, n0 + j - 1);
          uint32_t q[D / 16][4];
          float s[Bc / 8][4] = {};
          load_q(q);
          rescale_o();
          ptx::wgmma_pin(s);
          pin_pv();
          ptx::wgmma_fence();
          issue_s(s, q, j);
          issue_pv(j - 1);
          ptx::wgmma_wait<1>();
          ptx::wgmma_pin(s);
          release(empty_k, n0 + j);  // S_j is done, so K_j is read
          softmax(s, j);
          ptx::wgmma_wait<0>();
          pin_pv();
          release(empty_v, n0 + j - 1);
          pack_p(s);
        }
        ready(full_v, n0 + Tc - 1);  // the last block's P V
        rescale_o();
        pin_pv();
        ptx::wgmma_fence();
        issue_pv(Tc - 1);
        ptx::wgmma_wait<0>();
        pin_pv();
        release(empty_v, n0 + Tc - 1);
      }

      // Write O_i = O_i / l and LSE = m + log(l) (lines 12-15), through this tile's Q buffer, as
      // v11; the buffer is swizzled, so a staging store's 8 rows x 4 lanes still hit 32 banks.
      // The __syncwarp orders every lane's ldmatrix of these rows before any lane overwrites them
      // (v11 had a block barrier in between; without one racecheck reports it).
      T* Os = Qs + qbuf * Br * D;
      __syncwarp();
      for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int row = warp * 16 + g + r * 8;
        const float inv = l[r] == 0.f ? 0.f : 1.f / l[r];
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<uint32_t*>(Os + swz<Br>(row, n) + 2 * t4) = ptx::pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        const int64_t i = r0 + row;
        if (t4 == 0 && i < p.N_q) LSE[p.lse_offset(b, h, i)] = l[r] == 0.f ? neg_inf : fmaf(m2[r], 0.6931471805599453f, logf(l[r]));
      }
      __syncwarp();  // this warp's 16 rows are in; no other warp touches them
      constexpr int kLanesPerRow = D * int(sizeof(T)) / 16;  // 16-byte pieces per row: 16 at D = 128
      for (int rr = lane / kLanesPerRow; rr < 16; rr += 32 / kLanesPerRow) {
        const int cv = lane % kLanesPerRow;
        const int64_t i = r0 + warp * 16 + rr;
        // Ragged N_q: rows past it are not written, and no pointer to them is formed.
        if (i < p.N_q)
          *reinterpret_cast<uint4*>(O + p.q_offset(b, h, i) + cv * 8) = *reinterpret_cast<const uint4*>(Os + swz<Br>(warp * 16 + rr, cv));
      }
      // The Q buffer may take the tile after the next. TMA writes it next, through the async proxy:
      // this thread's reads and writes of it (ldmatrix, the staging) are ordered before that first.
      ptx::fence_proxy_async();
      release(empty_q, step);
      n0 += Tc;
    }
  }
}

}  // namespace fa05::v12
