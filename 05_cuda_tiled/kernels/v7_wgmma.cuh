// v7: v5 on Hopper's warpgroup tensor-core instruction, wgmma (sm_90a). Read it beside
// v5_shape.cuh: the loop, the softmax and the block shapes are v5's; the two products change.
//
//   v5                                              v7
//   mma.sync m16n8k16, per warp: 16 x 8 outputs     wgmma m64nNk16, per warpgroup (4 warps):
//   per instruction, operands in registers          64 x Bc outputs of S, 64 x 64 of O per
//                                                   instruction
//   K_j, V_j fragments: ldmatrix into registers     K_j, V_j read by the tensor cores straight
//   before every mma (per warp and 128 x 128        from shared memory (a descriptor, no LDSM,
//   block at d = 128: 128 ldmatrix)                 no registers for B)
//   K_j, V_j tiles padded by 16 bytes a row         stored in the 128-byte swizzle the
//   (bank conflicts)                                descriptor names (the copy writes it)
//   mma.sync waits for its result                   wgmma is asynchronous: issue, commit, wait
//
// Why: on the H200 v5 used only 36 % of issue slots and its tensor pipe 42 % (ncu, lab notebook): the
// warps wait on chains of small mma and on the ldmatrix feeding them. Hopper's tensor cores are
// built around wgmma (FlashAttention-3, Shah et al. 2024, opens on FlashAttention-2 reaching only
// 35 % of the H100's peak with mma.sync): one m64n64k16 does the work of 32 mma.sync m16n8k16
// for the 4 warps, and B no longer passes through registers. Q (A of S = Q K^T) and P (A of
// O += P V) stay in registers as in v5: wgmma's A-from-registers layout is mma.sync's.
//
// Not here yet (FlashAttention-3's other steps): TMA bulk copies, warp specialisation
// (producer warps), and overlapping one block's softmax with the next block's wgmma.
//
// Supports T = __half or __nv_bfloat16, D = 64 or 128, kWarps a multiple of 4, Bc = 64 or 128 (the
// two wgmma widths ptx.cuh wraps); runs only on sm_90a (elsewhere the runner runs v5).
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"

namespace fa05::v7 {

// Shared memory: two each of K_j, V_j in the 128-byte swizzle (below), then Q_i as a padded
// (Br, D + 8) tile (v2: only ldmatrix reads it). 1024 bytes of slack align the swizzled tiles.
template <int D>
constexpr int kPitch = D + 8;
constexpr int smem_bytes(int D, int warps, int Bc) { return 4 * Bc * D * 2 + 16 * warps * (D + 8) * 2 + 1024; }

// The swizzled tile of Bc rows x D columns of T (K_j or V_j): D / 64 column slabs, each Bc rows of
// 128 bytes; in each group of 8 rows the 16-byte chunk c of row r is stored at chunk c ^ (r % 8).
// Why: wgmma's descriptor reads this layout (ptx.cuh, smem_desc_sw128), and the XOR spreads the 8
// rows of a column over all 32 banks, as v2's padding did. Offset of (row r, 16-byte chunk cv of
// the row, 0 <= cv < D / 8), in elements:
template <int Bc>
__device__ __forceinline__ int swz(int r, int cv) {
  return (cv / 8) * Bc * 64 + r * 64 + ((cv % 8) ^ (r % 8)) * 8;
}
// A tile's width in this layout for head dim D: D rounded up to whole 64-column slabs (v13 and
// stage 06's gpu_v4 at d = 96: two slabs, the second half unused).
FA_HOST_DEVICE constexpr int slab_width(int D) { return (D + 63) / 64 * 64; }

// Starts copying rows x D elements from global (row-major, pitch D) into a swizzled (Bc, D) tile,
// 16 bytes per cp.async, kThreads threads; rows past `rows` are zero-filled without reading global
// memory (their scores are masked below).
template <int D, int Bc, int kThreads, class T>
__device__ __forceinline__ void copy_tile_swizzled(T* dst, const T* src, int rows) {
  constexpr int kVecs = D / 8;  // 16-byte vectors per row
  for (int e = threadIdx.x; e < Bc * kVecs; e += kThreads) {
    const int r = e / kVecs, cv = e % kVecs;
    ptx::cp_async_16(dst + swz<Bc>(r, cv), src + min(r, rows - 1) * D + cv * 8, r < rows);
  }
}

// Starts copying rows x D elements from global (row-major, pitch D) into a (kRows, D + 8) shared
// tile, 16 bytes per cp.async, kThreads threads; rows past `rows` are zero-filled, never read.
template <int D, int kRows, int kThreads, class T>
__device__ __forceinline__ void copy_tile_async(T* dst, const T* src, int rows) {
  constexpr int kVecs = D / 8;  // 16-byte vectors per row
  for (int e = threadIdx.x; e < kRows * kVecs; e += kThreads) {
    const int r = e / kVecs, c = e % kVecs * 8;
    ptx::cp_async_16(dst + r * kPitch<D> + c, src + min(r, rows - 1) * D + c, r < rows);
  }
}

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
  // The swizzle's 1024-byte atoms must be aligned in the shared-memory window, where the
  // descriptor's addresses live. Rounding the generic address does that when the window's base
  // is 1024-aligned in the generic space, as it is on the H200 (every test passes at every shape).
  T* Ks = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(sram) + 1023) / 1024 * 1024);  // (2, Bc x D)
  T* Vs = Ks + 2 * Bc * D;  // (2, Bc x D): K_j, V_j in buffer j % 2, swizzled
  T* Qi = Vs + 2 * Bc * D;  // (Br, P)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // fragment coordinates (ptx.cuh): row group, lane in quad
  const float neg_inf = -INFINITY;
  const float c = scale * 1.4426950408889634f;  // scale * log2(e): exp(scale x) = 2^(c x)

  // This block's task: (b, h, query block starting at row r0). Causal: the last query blocks
  // (the most keys) get the first task numbers, so they start first.
  const int64_t t = blockIdx.x, BH = p.B * p.H;
  const int64_t bh = p.causal ? t % BH : t / Tr, qb = p.causal ? Tr - 1 - t / BH : t % Tr;
  const int64_t b = bh / p.H, h = bh % p.H, r0 = qb * Br;
  const int br = int(min(int64_t(Br), p.N_q - r0));

  // Start the copies of Q_i (line 4) and of the first K/V block (line 7 for j = 0) at once.
  const int64_t keys_needed = p.keys_seen(r0 + br - 1);  // causal: key blocks past it are skipped
  copy_tile_async<D, Br, kThreads>(Qi, Q + p.q_offset(b, h, r0), br);
  if (keys_needed > 0) {
    const int bn = int(min(int64_t(Bc), p.N_k));
    copy_tile_swizzled<D, Bc, kThreads>(Ks, K + p.kv_offset(b, h, 0), bn);
    copy_tile_swizzled<D, Bc, kThreads>(Vs, V + p.kv_offset(b, h, 0), bn);
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();

  // O_i, m, l on chip (line 5), in registers. This lane holds two rows of the warp's 16:
  // row g (index 0) and row g + 8 (index 1); o[n] is the 16 x 8 fragment of columns 8n .. 8n+7.
  float o[D / 8][4] = {};
  float m2[2] = {neg_inf, neg_inf};  // the row max so far times c (below)
  float l[2] = {0.f, 0.f};  // this lane's share of the row sum; the quad's 4 shares add up at the end

  for (int64_t c0 = 0, j = 0; c0 < keys_needed; c0 += Bc, ++j) {  // line 6
    // K_j, V_j have arrived (this thread's copies: the wait; everyone's: the barrier), and every
    // warp has finished block j-1, so its buffer can take block j+1 (line 7, one block ahead).
    // wgmma reads shared memory through the "async proxy": each thread's copies are made
    // visible to it (fence.proxy.async) before the barrier publishes them.
    ptx::cp_async_wait<0>();
    ptx::fence_proxy_async();
    __syncthreads();
    const T* Kj = Ks + (j % 2) * Bc * D;
    const T* Vj = Vs + (j % 2) * Bc * D;
    if (c0 + Bc < keys_needed) {
      const int bn = int(min(int64_t(Bc), p.N_k - c0 - Bc));  // zeros past N_k (masked below)
      copy_tile_swizzled<D, Bc, kThreads>(Ks + ((j + 1) % 2) * Bc * D, K + p.kv_offset(b, h, c0 + Bc), bn);
      copy_tile_swizzled<D, Bc, kThreads>(Vs + ((j + 1) % 2) * Bc * D, V + p.kv_offset(b, h, c0 + Bc), bn);
    }
    ptx::cp_async_commit();  // an empty group on the last block: the wait above stays uniform

    // S = Q_i K_j^T (line 8), one warpgroup for 64 rows: s[n] is this warp's 16 x 8 fragment of
    // keys 8n .. 8n+7, as in v5. Each wgmma makes all Bc keys from 16 dims; dim step k starts at
    // dim 16k of the swizzled tile (inside a 128-byte row the step is a plain byte offset: the
    // swizzle is a function of the address bits the hardware computes, PTX ISA "Shared Memory
    // Matrix Layout"; the battery checks the result at every shape).
    // Q_i's A registers are read again from shared memory for every block, where v5 held them for
    // the whole kernel. Held across the loop, they came out overwritten: in the SASS of the
    // d = 64, Bc = 64 build (CUDA 13.0), ptxas gave Q's registers to the mask arithmetic right
    // after the first wgmma, and only the first K/V block came out right (the shape test caught
    // it). PTX only forbids touching a wgmma's A registers between its issue and wait_group, so
    // this looks like a ptxas bug; defined in the loop, they need live one block only. The cost
    // is D / 16 ldmatrix per block and warp (8 at d = 128), against v5's 128 for K and V.
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
}

}  // namespace fa05::v7
