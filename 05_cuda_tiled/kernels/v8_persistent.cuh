// v8: v7 with persistent thread blocks: as many blocks as stay resident (one per SM at d = 128)
// walk over tiles (query blocks) t, t + grid, t + 2 grid, ..., and during the last K/V block of one tile it
// already copies the next tile's Q_i and first K_j, V_j. Read it beside v7_wgmma.cuh: the
// products, the softmax and the block shapes are v7's; only the loop around them changes.
//
//   v7                                              v8
//   a thread block per query block (2048 at         min(tiles, SMs x blocks per SM) blocks, each
//   d = 128 on the papers' grid), then it exits     running tile after tile
//   each block starts by loading Q_i and K_0, V_0   the next tile's Q_i, K_0, V_0 are copied while
//   with nothing to overlap them: the SM idles      the current tile's last block computes and
//   until they arrive                               its O_i is written (Q_i double-buffered)
//
// Why: at d = 128 and small N a v7 block spends about 4.7 us of its 18.5 us on this start and
// end (ncu at N = 512 against N = 8192, lab notebook "Small N at d = 128"), and one block fills an SM
// (207 registers x 256 threads, 163 KiB), so nothing hides it. FlashAttention-2 hides it with two
// resident blocks per SM; FlashAttention-3 (Shah et al. 2024, Section 3.1) with persistent blocks
// whose producer warps load the next tile. This is the second idea without the producer warps.
//
// Compiles for what v7 does (T = __half or __nv_bfloat16, D = 64 or 128, kWarps a multiple of 4,
// Bc = 64 or 128), but the runner launches it at D = 128 only: at D = 64 the second Q tile cost
// v7's third block per SM (measured 17 % slower), so there it runs v7. Only on sm_90a (elsewhere
// the runner runs v5).
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"
#include "v7_wgmma.cuh"  // the swizzled tiles and their copies

namespace fa05::v8 {

using v7::copy_tile_async;
using v7::copy_tile_swizzled;
using v7::kPitch;

// Shared memory: two each of K_j, V_j in the 128-byte swizzle (v7), then two Q_i tiles, padded
// (Br, D + 8): the current tile's and the next one's. 1024 bytes of slack align the swizzled tiles.
constexpr int smem_bytes(int D, int warps, int Bc) { return 4 * Bc * D * 2 + 2 * 16 * warps * (D + 8) * 2 + 1024; }

// n_tiles = B * H * Tr query blocks; the grid has at most that many thread blocks (the runner
// launches as many as stay resident at once), and block x runs tiles x, x + gridDim.x, ...
template <class T, int D, int kWarps, int Bc>
__global__ void __launch_bounds__(32 * kWarps)
forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
               T* __restrict__ O, float* __restrict__ LSE, const fa::AttnProblem p, const float scale,
               const int64_t Tr) {
  constexpr int kThreads = 32 * kWarps;
  constexpr int Br = 16 * kWarps;  // 16 query rows per warp, one mma row-tile each
  static_assert(kWarps % 4 == 0 && (Bc == 64 || Bc == 128), "whole warpgroups, one wgmma width for S");
  extern __shared__ __align__(16) unsigned char sram[];
  constexpr int P = kPitch<D>;
  T* Ks = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(sram) + 1023) / 1024 * 1024);  // (2, Bc x D), v7
  T* Vs = Ks + 2 * Bc * D;  // (2, Bc x D): K/V block number jg in buffer jg % 2, swizzled
  T* Qs = Vs + 2 * Bc * D;  // (2, Br x P): tile number k of this thread block in buffer k % 2
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // fragment coordinates (ptx.cuh): row group, lane in quad
  const float neg_inf = -INFINITY;
  const float c = scale * 1.4426950408889634f;  // scale * log2(e): exp(scale x) = 2^(c x)
  const int64_t BH = p.B * p.H, n_tiles = BH * Tr;

  // Tile t: (b, h, query block starting at row r0), v7's order (causal: the heaviest first).
  struct Tile {
    int64_t b, h, r0, keys_needed;
    int br;
  };
  const auto tile = [&](int64_t t) {
    const int64_t bh = p.causal ? t % BH : t / Tr, qb = p.causal ? Tr - 1 - t / BH : t % Tr;
    Tile x{bh / p.H, bh % p.H, qb * Br, 0, 0};
    x.br = int(min(int64_t(Br), p.N_q - x.r0));
    x.keys_needed = p.keys_seen(x.r0 + x.br - 1);  // causal: key blocks past it are skipped
    return x;
  };
  // Starts the copies a tile begins with: Q_i into Q buffer qbuf, the first K/V block into K/V
  // buffer kvbuf (lines 4 and 7 for j = 0). The caller commits. A tile with no key to see (causal,
  // N_q > N_k) copies nothing: it reads neither, and a copy left in flight could land after a later
  // tile's copy into the same buffer (two cp.async are ordered only by a wait between them).
  const auto start_tile = [&](const Tile& x, int qbuf, int kvbuf) {
    if (x.keys_needed > 0) {
      copy_tile_async<D, Br, kThreads>(Qs + qbuf * Br * P, Q + p.q_offset(x.b, x.h, x.r0), x.br);
      const int bn = int(min(int64_t(Bc), p.N_k));
      copy_tile_swizzled<D, Bc, kThreads>(Ks + kvbuf * Bc * D, K + p.kv_offset(x.b, x.h, 0), bn);
      copy_tile_swizzled<D, Bc, kThreads>(Vs + kvbuf * Bc * D, V + p.kv_offset(x.b, x.h, 0), bn);
    }
  };

  int64_t t = blockIdx.x;
  if (t >= n_tiles) return;  // the runner launches at most n_tiles blocks; never taken
  Tile cur = tile(t);
  start_tile(cur, 0, 0);
  ptx::cp_async_commit();
  int qbuf = 0;     // the Q buffer of the current tile
  int64_t jg = 0;   // K/V blocks this thread block has started: block jg is in buffer jg % 2
  for (; t < n_tiles; t += gridDim.x, qbuf ^= 1) {
    const int64_t b = cur.b, h = cur.h, r0 = cur.r0, keys_needed = cur.keys_needed;
    const T* Qi = Qs + qbuf * Br * P;
    const bool has_next = t + gridDim.x < n_tiles;
    const Tile next = has_next ? tile(t + gridDim.x) : cur;
    bool next_started = false;

    // O_i, m, l on chip (line 5), in registers, as in v7.
    float o[D / 8][4] = {};
    float m2[2] = {neg_inf, neg_inf};  // the row max so far times c (v7)
    float l[2] = {0.f, 0.f};  // this lane's share of the row sum; the quad's 4 shares add up at the end

    for (int64_t c0 = 0; c0 < keys_needed; c0 += Bc, ++jg) {  // line 6
      // K/V block jg (and, on a tile's first block, its Q_i) has arrived, and every warp has
      // finished block jg - 1: its buffer can take the block after this one (v7).
      ptx::cp_async_wait<0>();
      ptx::fence_proxy_async();
      __syncthreads();
      const T* Kj = Ks + (jg % 2) * Bc * D;
      const T* Vj = Vs + (jg % 2) * Bc * D;
      if (c0 + Bc < keys_needed) {
        const int bn = int(min(int64_t(Bc), p.N_k - c0 - Bc));  // zeros past N_k (masked below)
        copy_tile_swizzled<D, Bc, kThreads>(Ks + ((jg + 1) % 2) * Bc * D, K + p.kv_offset(b, h, c0 + Bc), bn);
        copy_tile_swizzled<D, Bc, kThreads>(Vs + ((jg + 1) % 2) * Bc * D, V + p.kv_offset(b, h, c0 + Bc), bn);
      } else if (has_next) {
        // The new idea: this tile's last block; the next tile's first loads go out now, and
        // arrive while this block computes and O_i is written. Its Q buffer was last read by the
        // tile before this one, which every warp finished before the barrier above.
        start_tile(next, qbuf ^ 1, int((jg + 1) % 2));
        next_started = true;
      }
      ptx::cp_async_commit();

      // S = Q_i K_j^T (line 8), then the mask, the online softmax and O_i += P~ V_j (lines 9-10):
      // v7's, unchanged (its comments say why each step is as it is; Q_i's A registers are read
      // from shared memory for every block, the workaround v7 explains).
      uint32_t q[D / 16][4];  // q[k]: the 16 x 16 slice of columns 16k .. 16k+15 (lane map: v5)
      for (int k = 0; k < D / 16; ++k)
        ptx::ldmatrix_x4(q[k], Qi + (warp * 16 + lane % 8 + (lane / 8 % 2) * 8) * P + k * 16 + lane / 16 * 8);
      float s[Bc / 8][4] = {};
      ptx::wgmma_pin(s);
      ptx::wgmma_fence();
      for (int k = 0; k < D / 16; ++k)
        ptx::wgmma_m64nNk16<T, Bc, 0>(s, q[k], ptx::smem_desc_sw128(Kj + (k / 4) * Bc * 64 + (k % 4) * 16));
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::wgmma_pin(s);

      // Mask only the blocks that need it (the last, ragged one past N_k, and those the causal
      // diagonal crosses): -inf, which ex2() turns into exactly 0. seen[r]: how many of this
      // block's keys row r sees (stage 03's keys_seen, relative to c0), one 64-bit sum per row.
      const bool mask = c0 + Bc > p.N_k || (p.causal && c0 + Bc > p.keys_seen(r0));
      if (mask)
        for (int r = 0; r < 2; ++r) {
          const int seen = int(max(int64_t(0), min(int64_t(Bc), p.keys_seen(r0 + warp * 16 + g + r * 8) - c0)));
          for (int n = 0; n < Bc / 8; ++n)
            for (int e = 2 * r; e < 2 * r + 2; ++e)
              if (n * 8 + 2 * t4 + e % 2 >= seen) s[n][e] = neg_inf;
        }

      // Online softmax (line 9), for each of this lane's two rows, on raw (unscaled) scores. The
      // row's Bc scores are spread over the 4 lanes of a quad: each takes the max of its Bc/4, two
      // shuffles combine the quad.
      for (int r = 0; r < 2; ++r) {
        float mx = neg_inf;  // this block's largest raw score in row r
        for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // The running max is kept as it is used, m2 = m * c (log2 units): every exponent below is
        // then a difference of stored values, and the rescalings telescope exactly. (Recomputing
        // m_old * c instead leaves each rescaling an exponent error of up to half an ulp of m c,
        // and whether the compiler fuses that product into an FMA differs between instantiations:
        // the GPU battery caught LSE errors of 4e-5, against stage 01's 5e-6, at Br x Bc = 64 x 32.)
        const float m2_new = fmaxf(m2[r], mx * c);
        const float m2_use = m2_new == neg_inf ? 0.f : m2_new;  // no -inf - -inf (v1, stage 03)
        const float alpha = ptx::ex2(m2[r] - m2_use);
        float rowsum = 0.f;
        for (int n = 0; n < Bc / 8; ++n)
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[n][e] = ptx::ex2(fmaf(s[n][e], c, -m2_use));  // S becomes P~ in place: FFMA + MUFU.EX2
            rowsum += s[n][e];
          }
        l[r] = fmaf(alpha, l[r], rowsum);
        m2[r] = m2_new;
        for (int n = 0; n < D / 8; ++n) o[n][2 * r] *= alpha, o[n][2 * r + 1] *= alpha;  // line 10, first half
      }

      // O_i += P~ V_j (line 10, second half). P~ goes to 16 bits in registers as in v5 (S's
      // accumulators are, lane for lane, P's A registers). V_j ([key][dim]) is B with its rows
      // along k: the "transposed" (MN-major) form; the wgmma for keys 16k .. 16k+15 and dims
      // 64 sl .. 64 sl + 63 starts at row 16k of slab sl.
      uint32_t a[Bc / 16][4];  // a[k]: the A registers of keys 16k .. 16k+15
      for (int k = 0; k < Bc / 16; ++k) {
        a[k][0] = ptx::pack2<T>(s[2 * k][0], s[2 * k][1]), a[k][1] = ptx::pack2<T>(s[2 * k][2], s[2 * k][3]);
        a[k][2] = ptx::pack2<T>(s[2 * k + 1][0], s[2 * k + 1][1]), a[k][3] = ptx::pack2<T>(s[2 * k + 1][2], s[2 * k + 1][3]);
        ptx::wgmma_pin(a[k]);
      }
      float(*o64)[8][4] = reinterpret_cast<float(*)[8][4]>(o);  // o64[sl]: dims 64 sl .. 64 sl + 63
      for (int sl = 0; sl < D / 64; ++sl) ptx::wgmma_pin(o64[sl]);
      ptx::wgmma_fence();
      for (int k = 0; k < Bc / 16; ++k)
        for (int sl = 0; sl < D / 64; ++sl)
          ptx::wgmma_m64nNk16<T, 64, 1>(o64[sl], a[k], ptx::smem_desc_sw128(Vj + sl * Bc * 64 + k * 16 * 64));
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      for (int sl = 0; sl < D / 64; ++sl) ptx::wgmma_pin(o64[sl]);
    }
    if (has_next && !next_started) {
      // A tile with no key to see (causal, N_q > N_k) has no last block to start the next tile
      // in: start it here, once every warp is done with the buffers (the tile before may still be
      // reading the Q buffer the next tile takes).
      __syncthreads();
      start_tile(next, qbuf ^ 1, int(jg % 2));
      ptx::cp_async_commit();
    }

    // Write O_i = O_i / l and LSE = m + log(l) (lines 12-15). The row sum: add the quad's shares.
    for (int r = 0; r < 2; ++r) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      const int64_t i = r0 + warp * 16 + g + r * 8;
      if (i >= p.N_q) continue;
      const float inv = l[r] == 0.f ? 0.f : 1.f / l[r];  // a row that saw no key: O = 0, LSE = -inf
      T* out = O + p.q_offset(b, h, i);
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(out + n * 8 + 2 * t4) = ptx::pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
      if (t4 == 0) LSE[p.lse_offset(b, h, i)] = l[r] == 0.f ? neg_inf : fmaf(m2[r], 0.6931471805599453f, logf(l[r]));
    }
    cur = next;
  }
  ptx::cp_async_wait<0>();  // no copy still landing when the block exits
}

}  // namespace fa05::v8
