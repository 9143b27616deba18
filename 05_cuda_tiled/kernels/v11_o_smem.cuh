// v11: v10 with O written through shared memory in 16-byte stores, as FlashAttention-2's code ends
// a tile (FlashAttention-3's uses TMA for the same step). Read it beside v10_scheduler.cuh: only
// the end of a tile changes, where O_i / l leaves the registers.
//
//   v10                                             v11
//   each thread stores its accumulator's pairs      each warp puts its 16 rows of O_i / l into
//   straight to HBM: 4 bytes per lane, so a warp's  the tile's Q buffer (free once its last S is
//   store covers 16 bytes of each of 8 rows, and    done), then copies them out 16 bytes per
//   every 32-byte sector of O is written in two     lane: a warp's store covers two whole rows
//   halves by two instructions                      (256 bytes each at D = 128, bf16), each
//                                                   sector written once; per thread 32 STS.32
//                                                   and 8 LDS.128 more, 8 STG.128 instead of
//                                                   32 STG.32
//
// Why: ncu on the H200 (lab notebook, v10, "Measuring small N") counts 3.15 M excess global sectors
// from uncoalesced accesses in v10 at every N of the papers' grid (B N fixed, so O has the same
// size everywhere): 13 % of all its sectors at N = 512, 1 % at N = 8192, and ncu estimates 11.8 %
// of v10's time at N = 512 behind them. O written in half sectors accounts for 2.10 M of them
// (64 MiB of O in 32-byte sectors). At N = 512 a tile has only 4 key blocks, so its end is a
// large share of it.
//
// The staging needs no barrier across warps: the wgmma products read Q from registers, and each
// warp reads (ldmatrix) and now writes only its own 16 rows of the Q buffer, so a __syncwarp
// orders a warp's writes before its reads. The buffer's next use, the Q_i of the tile after the
// next (cp.async, issued in the next tile's last key block, or where the next tile sees no key),
// comes after a barrier of the next tile.
//
// Compiles for what v10 does; the runner launches it where v10 runs (d = 128, sm_90a).
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"
#include "v7_wgmma.cuh"       // the swizzled tiles and their copies
#include "v8_persistent.cuh"  // smem_bytes: v7's K, V buffers and two Q tiles

namespace fa05::v11 {

using v7::copy_tile_async;
using v7::copy_tile_swizzled;
using v7::kPitch;
using v8::smem_bytes;

// n_tiles = B * H * Tr query blocks; the grid has at most that many thread blocks. tile_counter:
// one unsigned int, zero at launch (the runner's memset), counts the tiles claimed past the first
// gridDim.x.
template <class T, int D, int kWarps, int Bc>
__global__ void __launch_bounds__(32 * kWarps)
forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
               T* __restrict__ O, float* __restrict__ LSE, const fa::AttnProblem p, const float scale,
               const int64_t Tr, unsigned* __restrict__ tile_counter) {
  constexpr int kThreads = 32 * kWarps;
  constexpr int Br = 16 * kWarps;  // 16 query rows per warp, one mma row-tile each
  static_assert(kWarps % 4 == 0 && (Bc == 64 || Bc == 128), "whole warpgroups, one wgmma width for S");
  extern __shared__ __align__(16) unsigned char sram[];
  __shared__ int64_t next_tile[2];  // the scheduler's answers: slot k % 2, the tile after tile k
  constexpr int P = kPitch<D>;
  // 1024-aligned for the swizzle (v9 says how).
  T* Ks = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(sram) + 1023) / 1024 * 1024);  // (2, Bc x D)
  T* Vs = Ks + 2 * Bc * D;  // (2, Bc x D): the block's K/V blocks alternate between the two, swizzled
  T* Qs = Vs + 2 * Bc * D;  // (2, Br x P): this block's tile number k in buffer k % 2
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // fragment coordinates (ptx.cuh): row group, lane in quad
  const float neg_inf = -INFINITY;
  const float c = scale * 1.4426950408889634f;  // scale * log2(e): exp(scale x) = 2^(c x)
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
  // A tile's first copies, Q_i into Q buffer qbuf and K_0 into K buffer buf % 2, as one group.
  // Only for a tile that sees a key (v9: no copy is left in flight by one that does not).
  const auto start_tile = [&](const Tile& x, int qbuf, int buf) {
    copy_tile_async<D, Br, kThreads>(Qs + qbuf * Br * P, Q + p.q_offset(x.b, x.h, x.r0), x.br);
    copy_tile_swizzled<D, Bc, kThreads>(Ks + (buf % 2) * Bc * D, K + p.kv_offset(x.b, x.h, 0), int(min(int64_t(Bc), p.N_k)));
    ptx::cp_async_commit();
  };

  int64_t t = blockIdx.x;
  if (t >= n_tiles) return;  // the runner launches at most n_tiles blocks; never taken
  if (threadIdx.x == 0) next_tile[0] = gridDim.x + int64_t(atomicAdd(tile_counter, 1u));
  Tile cur = tile(t);
  if (cur.Tc > 0) start_tile(cur, 0, 0);
  int qbuf = 0;  // the Q buffer of the current tile
  int buf0 = 0;  // the K/V buffer of this tile's block 0 (the parity of the blocks this one ran before)
  for (int step = 0; t < n_tiles; ++step) {  // step: this block's tile number k in the comments
    // Claim the tile after the next one now; its number is needed only at the end of the next tile.
    unsigned claimed = 0;
    if (threadIdx.x == 0) claimed = atomicAdd(tile_counter, 1u);
    const int64_t b = cur.b, h = cur.h, r0 = cur.r0;
    const int Tc = cur.Tc;
    const T* Qi = Qs + qbuf * Br * P;
    int64_t t_next = n_tiles;  // the next tile (n_tiles: none); its Tile is recomputed where needed
    bool next_copies = false;  // the next tile's Q_i, K_0 in flight as the last group

    float o[D / 8][4] = {};
    float m2[2] = {neg_inf, neg_inf};  // the row max so far times c (v7)
    float l[2] = {0.f, 0.f};  // this lane's share of the row sum; the quad's 4 shares add up at the end
    float alpha[2] = {1.f, 1.f};       // exp(m_{j-1} - m_j) per row: O's rescaling, applied one block late
    uint32_t a[Bc / 16][4];            // P~ of the last softmax as P V's A registers (a[k]: keys 16k .. 16k+15)
    float(*o64)[8][4] = reinterpret_cast<float(*)[8][4]>(o);  // o64[sl]: dims 64 sl .. 64 sl + 63

    // v9's steps, with block j of this tile in buffers (buf0 + j) % 2.
    const auto wait_tiles = [&] {
      ptx::cp_async_wait<0>();
      ptx::fence_proxy_async();
      __syncthreads();
    };
    // The next tile, as the scheduler answered (read after a barrier that follows thread 0's write).
    const auto read_next = [&] { t_next = next_tile[step % 2]; };
    const auto start_copies = [&](int64_t j) {
      const int64_t c0 = j * Bc;
      if (j + 1 < Tc)
        copy_tile_swizzled<D, Bc, kThreads>(Ks + ((buf0 + j + 1) % 2) * Bc * D, K + p.kv_offset(b, h, c0 + Bc),
                                            int(min(int64_t(Bc), p.N_k - c0 - Bc)));
      copy_tile_swizzled<D, Bc, kThreads>(Vs + ((buf0 + j) % 2) * Bc * D, V + p.kv_offset(b, h, c0), int(min(int64_t(Bc), p.N_k - c0)));
      ptx::cp_async_commit();
      // New against v9 (v8's copy-ahead): the last block's free K buffer (it held K_{Tc-2}, whose
      // S finished in the iteration before) takes the next tile's K_0, the other Q buffer (the
      // tile before this one read it, and every warp has passed this tile's first barrier) its Q_i.
      if (j + 1 == Tc && t_next < n_tiles) {
        const Tile next = tile(t_next);
        if (next.Tc > 0) start_tile(next, qbuf ^ 1, buf0 + Tc), next_copies = true;
      }
    };
    const auto load_q = [&](uint32_t(&q)[D / 16][4]) {
      for (int k = 0; k < D / 16; ++k)
        ptx::ldmatrix_x4(q[k], Qi + (warp * 16 + lane % 8 + (lane / 8 % 2) * 8) * P + k * 16 + lane / 16 * 8);
    };
    const auto rescale_o = [&] {
      for (int r = 0; r < 2; ++r)
        for (int n = 0; n < D / 8; ++n) o[n][2 * r] *= alpha[r], o[n][2 * r + 1] *= alpha[r];
    };
    const auto issue_s = [&](float(&s)[Bc / 8][4], const uint32_t(&q)[D / 16][4], int64_t j) {
      const T* Kj = Ks + ((buf0 + j) % 2) * Bc * D;
      for (int k = 0; k < D / 16; ++k)
        ptx::wgmma_m64nNk16<T, Bc, 0>(s, q[k], ptx::smem_desc_sw128(Kj + (k / 4) * Bc * 64 + (k % 4) * 16));
      ptx::wgmma_commit();
    };
    const auto issue_pv = [&](int64_t j) {
      const T* Vj = Vs + ((buf0 + j) % 2) * Bc * D;
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
      {  // block 0, as in v9
        wait_tiles();  // Q_i and K_0 are in; next_tile[step % 2] is written
        read_next();
        start_copies(0);
        uint32_t q[D / 16][4];
        float s[Bc / 8][4] = {};
        load_q(q);
        ptx::wgmma_pin(s);
        ptx::wgmma_fence();
        issue_s(s, q, 0);
        ptx::wgmma_wait<0>();
        ptx::wgmma_pin(s);
        softmax(s, 0);
        pack_p(s);
      }
      for (int64_t j = 1; j < Tc; ++j) {  // as in v9
        wait_tiles();
        start_copies(j);
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
        softmax(s, j);
        ptx::wgmma_wait<0>();
        pin_pv();
        pack_p(s);
      }
      // The last block's P V: wait for V_{Tc-1}, and not for the next tile's copies behind it.
      if (next_copies)
        ptx::cp_async_wait<1>();
      else
        ptx::cp_async_wait<0>();
      ptx::fence_proxy_async();
      __syncthreads();
      rescale_o();
      pin_pv();
      ptx::wgmma_fence();
      issue_pv(Tc - 1);
      ptx::wgmma_wait<0>();
      pin_pv();
    } else {
      // No key to see (causal, N_q > N_k): no block to start the next tile's copies in. Start them
      // here, once every warp is done with the buffers they take. (Not reached in v9's tile order:
      // a block's tile numbers only increase, and in causal order the keys a query block sees only
      // decrease with the tile number, so a tile that sees no key is never followed by one that
      // does. Kept so the kernel does not depend on that order.)
      __syncthreads();
      read_next();
      if (t_next < n_tiles) {
        const Tile next = tile(t_next);
        if (next.Tc > 0) start_tile(next, qbuf ^ 1, buf0);
      }
    }

    // Write O_i = O_i / l and LSE = m + log(l) (lines 12-15). New against v10: O_i / l goes into
    // this tile's Q buffer first (the pitch P puts the 8 rows x 4 lanes of a store in 32 different
    // banks), then out to HBM 16 bytes per lane, whole rows per warp store.
    T* Os = Qs + qbuf * Br * P;
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      const int row = warp * 16 + g + r * 8;
      const float inv = l[r] == 0.f ? 0.f : 1.f / l[r];
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(Os + row * P + n * 8 + 2 * t4) = ptx::pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      const int64_t i = r0 + row;
      if (t4 == 0 && i < p.N_q) LSE[p.lse_offset(b, h, i)] = l[r] == 0.f ? neg_inf : fmaf(m2[r], 0.6931471805599453f, logf(l[r]));
    }
    __syncwarp();  // this warp's 16 rows are in; no other warp touches them
    constexpr int kLanesPerRow = D * int(sizeof(T)) / 16;  // 16-byte pieces per row: 16 at D = 128
    for (int rr = lane / kLanesPerRow; rr < 16; rr += 32 / kLanesPerRow) {
      const int col = lane % kLanesPerRow * 8;
      const int64_t i = r0 + warp * 16 + rr;
      // Ragged N_q: rows past it are not written, and no pointer to them is formed.
      if (i < p.N_q)
        *reinterpret_cast<uint4*>(O + p.q_offset(b, h, i) + col) = *reinterpret_cast<const uint4*>(Os + (warp * 16 + rr) * P + col);
    }
    // The claim from this tile's start, for the tile after the next: slot (k + 1) % 2 was last
    // read in tile k - 1, before this tile's first barrier. The next tile reads it after its own.
    if (threadIdx.x == 0) next_tile[(step + 1) % 2] = gridDim.x + int64_t(claimed);
    t = t_next, qbuf ^= 1, buf0 = (buf0 + Tc) % 2;  // a parity: no sum over the walk to overflow
    if (t < n_tiles) cur = tile(t);
  }
  ptx::cp_async_wait<0>();  // no copy still landing when the block exits (none should be)
}

}  // namespace fa05::v11
