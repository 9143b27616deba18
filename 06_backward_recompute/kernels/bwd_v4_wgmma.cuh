// Stage 06 on the GPU, v4: gpu_v3's step on Hopper's warpgroup matrix multiply, wgmma (sm_90a),
// as stage 05's v7 moved the forward onto it. Read it beside bwd_v3_split.cuh: the task, the
// steps, the loads, the mask and the softmax algebra are v3's; the five products change.
//
//   v3 (mma.sync, 8 warps)                           v4 (wgmma, 2 warpgroups of 4 warps)
//   every operand loaded by ldmatrix into registers  K_j, V_j, Q_i, dO_i, dS^T read by the tensor
//   before each 16 x 8 x 16 mma (ncu at d = 128:     cores straight from shared memory (128-byte
//   the shared-memory pipe 65 % busy, the tensor     swizzle, a descriptor: no ldmatrix, no
//   pipe 39 %)                                       registers for them)
//   S^T, dP^T: a 4 x 2 grid of 32 x 32 warp tiles;   warpgroup w owns keys 64w .. 64w + 63 in every
//   dV_j, dK_j: another grid of 32 keys x 64 dims,   product but dQ: S^T, dP^T (64 keys x 64
//   so P^T went through shared memory               queries), dV_j, dK_j (64 keys x all 128 dims,
//                                                    128 accumulator registers a thread for the two)
//   P^T, dS^T stored, read back by ldmatrix          P^T, dS^T go from the S^T / dP^T accumulators
//                                                    straight into dV's / dK's A registers (stage
//                                                    05 v2's P trick); only dS^T is stored, for dQ
//   dQ_i += dS K_j: v2's add_dq (ldmatrix, mma)      one wgmma chain per warpgroup: 64 queries x
//                                                    its 64 dims, all 128 keys; A = dS^T read
//                                                    transposed by the tensor cores (imm-trans-a)
//   products wait for their results                  issued asynchronously: dV's product runs
//                                                    while dS^T is computed, dK's while dQ waits
//                                                    for the barrier
//
// Why: FlashAttention-3 (Shah et al. 2024, Sec. 3 and its backward, Appendix B) builds on the same
// observation as stage 05's v7: mma.sync keeps Hopper's tensor cores at a fraction of their peak.
// v3 loads every operand through ldmatrix into registers, and ncu at d = 128 shows no unit near
// its limit (L1 pipe 65 %, tensor 39 %, issue slots 27 %) with one block of 8 warps per SM: our
// reading, the latency of too few warps waiting on their loads and products.
//
// The table above and the step below are drawn at D = 128; D = 96 differs only where the head
// dims meet the swizzle (the paragraph after the step).
// Per step (one query block i of Br = 64 rows, one query head), warpgroup w computes (FA2
// Algorithm 2, lines 10-16, transposed so that a warpgroup owns keys, as in v2):
//   S^T  = K_j Q_i^T    (64 keys x 64 queries, K = 128 dims: 8 wgmma m64n64k16, A and B in smem)
//   dP^T = V_j dO_i^T   (the same with V_j, dO_i)
//   P^T  = exp(S^T - LSE_i);  dV_j += P^T dO_i   (A = P^T in registers, B = dO_i: 4 x 2 wgmma)
//   dS^T = P^T (dP^T - D_i);  dK_j += dS^T Q_i   (the same with dS^T, Q_i)
// and, after a barrier (dS^T of both warpgroups in shared memory):
//   dQ_i[:, 64w .. 64w + 63] += dS K_j[:, 64w .. 64w + 63]   (8 wgmma: A = dS, B = K_j, both in smem)
//
// D = 96 (Phi-3-mini's head dim, and Phi-2's 80 padded to it) runs the same step: a tile is stored
// D rounded up to 64 columns wide, two slabs of which the second holds dims 64-95 in its first 32
// columns (its last 32 are never written and never read; stage 05's v13 lays its tiles out the
// same way, with TMA's zeros there). The products over the dims (S^T, dP^T) take D / 16 = 6 steps.
// Those whose N is the head dims issue one wgmma per piece of the dims that lies inside one slab,
// each into its slice of the accumulator (ptx::wgmma_rs_at, wgmma_ss_at): dV_j, dK_j's 96 dims are
// 64 + 32; dQ_i's 48 dims of a warpgroup are 32 + 16 (Dq below: 0-31, 32-47 and 64-95, 48-63, cut so
// that both warpgroups issue the same two shapes), 16 wgmma where D = 128 has 8. 96 registers a
// thread hold dK_j and dV_j there, where 128 do at D = 128.
//
// Layout, dQacc and the deterministic variant as v2; T = __half or __nv_bfloat16, D = 96 or 128
// (at d = 64, v2's 32-keys-a-warp shape runs), sm_90a only (elsewhere the runner runs v3). The
// window and the softcap (docs/math.md section 8) as v2's; P^T is packed into dV's A registers
// before dP^T is done, so the softcap's slope joins P^T there, in the registers dS^T then reads.
// The tiles are addressed from the shared-memory array itself (an offset added to it, not a
// pointer rounded through an integer), so the compiler keeps the stores of dS^T and the loads of
// LSE_i, D_i shared (STS, LDS; issue 38's ncu found them generic).
#pragma once
#include <cstdint>

#include "bwd_v2_mma.cuh"
#include "v7_wgmma.cuh"  // the 128-byte swizzle (swz) and the copy that writes it

namespace fa06::bwd_v4 {

namespace ptx = fa05::ptx;
using bwd_v2::Br;
using fa05::v7::copy_tile_swizzled;
using fa05::v7::swz;

constexpr int kWarpgroups = 2, kThreads = 128 * kWarpgroups, Bc = 64 * kWarpgroups;

using fa05::v7::slab_width;  // a tile's width in shared memory: D rounded up to 64-column slabs

// K_j, V_j (Bc x W), two each of Q_i, dO_i (Br x W), dS^T (Bc x Br), all 16-bit in the 128-byte
// swizzle (no padding), LSE_i and D_i (2 x Br floats each), and 1024 bytes of slack to align the
// swizzled tiles: 146 KiB at D = 96 and 128 (W = 128). A swizzled tile of R rows x W columns is
// stored as W / 64 slabs, each R rows of 64 elements (128 bytes), one after the other
// (v7_wgmma.cuh, swz): so dim step k of K_j starts at slab k / 4, 16 (k % 4) elements into each
// row, and row 64 w at element 64 w x 64 of a slab. At D = 96 the second slab's columns 32 .. 63
// are never written and never read.
template <int D>
constexpr int smem_bytes() {
  constexpr int W = slab_width(D);
  return 1024 + (2 * Bc * W + 4 * Br * W + Bc * Br) * 2 + 4 * Br * 4;
}

// dQ_i's dims of warpgroup wg, D / 2 of them, in pieces that each lie inside one slab (a wgmma's N
// columns of an MN-major operand must lie in one column atom: bwd_v4_wide.cuh): D = 128: dims 64 wg
// .. + 63, one piece; D = 96: 32 + 16, dims 0-31 and 32-47 (wg 0), 64-95 and 48-63 (wg 1), so that
// both warpgroups issue the same two shapes. dq[n] holds dims dim_of(n) .. + 7.
template <int D>
struct Dq {
  static constexpr int kN0 = D == 128 ? 64 : 32, kN1 = D / 2 - kN0;  // the pieces' widths (kN1: 0 or 16)
  int dim0, dim1;
  __device__ explicit Dq(int wg) : dim0(64 * wg), dim1(32 + 16 * wg) {}
  __device__ int dim_of(int n) const { return n < kN0 / 8 ? dim0 + 8 * n : dim1 + 8 * (n - kN0 / 8); }
};

// dQ_i's 64 x D/2 piece of warpgroup wg (rows 16 warp + g (+ 8), dims Dq::dim_of(n) + 2 t4 (+ 1)
// in the accumulator layout) added into dQacc by bwd_v2::add_to_dq: atomically or, in the
// deterministic variant, in key-block order (the caller holds the turn).
template <int D, bool kDeterministic>
__device__ __forceinline__ void add_dq_piece(const float (&dq)[D / 16][4], float* dQacc, const fa::AttnProblem& p,
                                             int64_t b, int64_t h, int64_t r0, int br, int wg) {
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const Dq<D> dims(wg);
  for (int r = 0; r < 2; ++r) {
    const int q = warp * 16 + g + r * 8;
    if (q >= br) continue;  // rows past N_q: nothing to add, and no memory there
    float* out = dQacc + p.q_offset(b, h, r0 + q) + 2 * t4;
    for (int n = 0; n < D / 16; ++n)
      bwd_v2::add_to_dq<kDeterministic>(reinterpret_cast<float2*>(out + dims.dim_of(n)), make_float2(dq[n][2 * r], dq[n][2 * r + 1]));
  }
}

// acc (64 keys x D dims) += A (in registers: P^T or dS^T, query step k) times B's rows krow .. +
// 15, B a swizzled tile of Br rows (dO_i, Q_i) read MN-major (the dims are N): a wgmma per slab,
// 64 wide, and at D = 96 32 wide in the second (dims 64 .. 95: tiles 8 .. 11).
template <class T, int D>
__device__ __forceinline__ void mul_dims(float (&acc)[D / 8][4], const uint32_t (&a)[4], const T* tile, int krow) {
  ptx::wgmma_rs_at<T, 64, /*kTransB*/ 1, 0>(acc, a, ptx::smem_desc_sw128(tile + krow * 64));
  ptx::wgmma_rs_at<T, D - 64, /*kTransB*/ 1, 8>(acc, a, ptx::smem_desc_sw128(tile + Br * 64 + krow * 64));
}

// One thread block per (b, kv head hk, key block j) of Bc = 128 keys, as v3. Tc key blocks per head.
template <class T, int D, bool kDeterministic>
__global__ void __launch_bounds__(kThreads, 1)
dk_dv_dq_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                const T* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ Dv,
                T* __restrict__ dK, T* __restrict__ dV, float* __restrict__ dQacc, int* __restrict__ dq_turn,
                const fa::AttnProblem p, const float scale, const int64_t Tc) {
  static_assert(D == 96 || D == 128, "two 64-column slabs per row; dQ's dims split between the two warpgroups");
  constexpr int W = slab_width(D);
  extern __shared__ __align__(16) unsigned char sram[];
  // 1024-aligned for the swizzle (stage 05 v9 says why): an offset into sram, so the pointers stay
  // in the shared window.
  const uint32_t at = uint32_t(__cvta_generic_to_shared(sram));
  T* Ks = reinterpret_cast<T*>(sram + (1024 - at % 1024) % 1024);  // (Bc x W), 2 slabs
  T* Vs = Ks + Bc * W;                                  // (Bc x W), 2 slabs
  T* Qs = Vs + Bc * W;                                  // (2, Br x W): Q_i of step s in buffer s % 2
  T* dOs = Qs + 2 * Br * W;                             // (2, Br x W)
  T* dSt = dOs + 2 * Br * W;                            // (Bc x Br): dS^T of the step, for dQ
  float* Ls = reinterpret_cast<float*>(dSt + Bc * Br);  // (2, Br): LSE_i
  float* Ds = Ls + 2 * Br;                              // (2, Br): D_i
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;        // fragment coordinates (ptx.cuh)
  const int kw = wg * 64 + warp * 16;           // this warp's 16 keys: rows g and g + 8 of them
  // exp(scale x) = 2^(c x) with c = scale log2(e); softcap: S is capped and scaled, c = log2(e).
  const bool cap = p.softcap > 0.f;
  const float c = (cap ? 1.f : scale) * 1.4426950408889634f;
  const auto desc = [](const T* tile) { return ptx::smem_desc_sw128(tile); };

  // The task, the steps and their loads: as v3, into swizzled tiles.
  const int64_t Tr = (p.N_q + Br - 1) / Br;
  const int64_t t = bwd_v2::task_index<kDeterministic>(dq_turn, p.B * p.H * Tr), G = p.H / p.H_kv;
  const int64_t b = t / (p.H_kv * Tc), hk = t / Tc % p.H_kv, j = t % Tc, c0 = j * Bc;
  const int bc = int(min(int64_t(Bc), p.N_k - c0));
  const QueryBlocks qb = query_blocks(p, c0, bc, Br);
  const int64_t i_first = qb.first;
  const int64_t blocks_per_head = max(int64_t(0), qb.last - i_first), steps = G * blocks_per_head;
  auto step_head = [&](int64_t s) { return hk * G + s / blocks_per_head; };
  auto step_row0 = [&](int64_t s) { return (i_first + s % blocks_per_head) * Br; };
  auto load_step = [&](int64_t s) {
    const int64_t h = step_head(s), r0 = step_row0(s);
    const int br = int(min(int64_t(Br), p.N_q - r0)), buf = int(s % 2);
    copy_tile_swizzled<D, Br, kThreads>(Qs + buf * Br * W, Q + p.q_offset(b, h, r0), br);
    copy_tile_swizzled<D, Br, kThreads>(dOs + buf * Br * W, dO + p.q_offset(b, h, r0), br);
    for (int r = threadIdx.x; r < Br; r += kThreads) {
      const int64_t at = p.lse_offset(b, h, r0 + min(r, br - 1));
      ptx::cp_async_4(Ls + buf * Br + r, LSE + at, r < br);
      ptx::cp_async_4(Ds + buf * Br + r, Dv + at, r < br);
    }
  };

  copy_tile_swizzled<D, Bc, kThreads>(Ks, K + p.kv_offset(b, hk * G, c0), bc);
  copy_tile_swizzled<D, Bc, kThreads>(Vs, V + p.kv_offset(b, hk * G, c0), bc);
  if (steps > 0) load_step(0);
  ptx::cp_async_commit();
  // dK_j, dV_j (line 7): this warpgroup's 64 keys x D dims, one n8 tile of the accumulator layout
  // per 8 dims (dk[n][e]: key kw + g + 8 (e / 2), dim 8n + 2 t4 + e % 2).
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};

  for (int64_t s = 0; s < steps; ++s) {  // line 8
    // Step s's tiles are in (the wait: this thread's copies; the fence: visible to the tensor
    // cores, which read through the async proxy; the barrier: everyone's), and every warpgroup
    // has waited for its step s-1 products, so their buffers (and dS^T) can be refilled.
    ptx::cp_async_wait<0>();
    ptx::fence_proxy_async();
    __syncthreads();
    if (s + 1 < steps) load_step(s + 1);
    ptx::cp_async_commit();
    const int64_t h = step_head(s), r0 = step_row0(s);
    const int br = int(min(int64_t(Br), p.N_q - r0));
    const T* Qi = Qs + (s % 2) * Br * W;
    const T* dOi = dOs + (s % 2) * Br * W;
    const float* Li = Ls + (s % 2) * Br;
    const float* Di = Ds + (s % 2) * Br;

    // S^T = K_j Q_i^T (line 10) and dP^T = V_j dO_i^T (line 13), one group each. A: this
    // warpgroup's 64 rows of K_j (V_j), K-major; B: Q_i (dO_i) [query][dim], K-major as K_j is in
    // the forward. Dim step k: slab k / 4, 16 k % 4 elements into the 128-byte row (D / 16 steps: at
    // D = 96 the second slab's unwritten half is never read).
    float st[8][4] = {}, dpt[8][4] = {};  // st[n][e]: key kw + g + 8 (e / 2), query 8n + 2 t4 + e % 2
    ptx::wgmma_pin(st);
    ptx::wgmma_pin(dpt);
    ptx::wgmma_fence();
    for (int k = 0; k < D / 16; ++k)
      ptx::wgmma_m64n64k16_ss<T, /*kTransA*/ 0, /*kTransB*/ 0>(st, desc(Ks + (k / 4) * Bc * 64 + wg * 64 * 64 + (k % 4) * 16),
                                       desc(Qi + (k / 4) * Br * 64 + (k % 4) * 16));
    ptx::wgmma_commit();
    for (int k = 0; k < D / 16; ++k)
      ptx::wgmma_m64n64k16_ss<T, /*kTransA*/ 0, /*kTransB*/ 0>(dpt, desc(Vs + (k / 4) * Bc * 64 + wg * 64 * 64 + (k % 4) * 16),
                                       desc(dOi + (k / 4) * Br * 64 + (k % 4) * 16));
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();  // S^T is done; dP^T may still run
    ptx::wgmma_pin(st);

    // Mask, softcap and P^T = exp(S^T - LSE_i) (line 11): v3's, per accumulator element.
    const BandTile band = band_tile(p, r0, c0, Br, Bc);
    const bool mask = c0 + Bc > p.N_k || r0 + Br > p.N_q || band.crosses(Br, Bc);
    if (mask) {
      for (int n = 0; n < 8; ++n)
        for (int e = 0; e < 4; ++e) {
          const int kr = kw + g + e / 2 * 8, qc = n * 8 + 2 * t4 + e % 2;
          if (kr >= bc || qc >= br || !band.sees(kr - qc)) st[n][e] = -INFINITY;
        }
    }
    // dV_j += P^T dO_i (line 12): the accumulators of query tiles 2k, 2k+1 are, lane for lane, the
    // A registers of query step k; B = dO_i with the query as k, MN-major (as V_j in the forward:
    // each of its 16 k-rows is a 64-element row of the slab). P^T goes into them as it is made;
    // with a softcap st then keeps P^T times the slope of the capped S^T (8.2), the factor dS^T
    // needs below, so that no register holds the slopes apart.
    uint32_t pa[Br / 16][4], sa[Br / 16][4];
    const auto pack = [](uint32_t(&a)[Br / 16][4], const float(&x)[8][4]) {
      for (int k = 0; k < Br / 16; ++k) {
        a[k][0] = ptx::pack2<T>(x[2 * k][0], x[2 * k][1]), a[k][1] = ptx::pack2<T>(x[2 * k][2], x[2 * k][3]);
        a[k][2] = ptx::pack2<T>(x[2 * k + 1][0], x[2 * k + 1][1]);
        a[k][3] = ptx::pack2<T>(x[2 * k + 1][2], x[2 * k + 1][3]);
      }
    };
    for (int n = 0; n < 8; ++n) {
      const float2 lse = *reinterpret_cast<const float2*>(Li + n * 8 + 2 * t4);
      const float l2[2] = {lse.x == -INFINITY ? INFINITY : lse.x * 1.4426950408889634f,
                           lse.y == -INFINITY ? INFINITY : lse.y * 1.4426950408889634f};
      float P[4];
      float S[4];  // softcap (8.2): S = c tanh(scale x / c), masked (-inf) kept
      for (int e = 0; e < 4; ++e) {
        S[e] = cap && st[n][e] != -INFINITY ? softcap(scale * st[n][e], p.softcap) : st[n][e];
        P[e] = ptx::ex2(fmaf(S[e], c, -l2[e % 2]));
      }
      // pack(pa, st)'s registers of query tile n (k = n / 2, the pair 2 (n % 2), 2 (n % 2) + 1).
      pa[n / 2][2 * (n % 2)] = ptx::pack2<T>(P[0], P[1]), pa[n / 2][2 * (n % 2) + 1] = ptx::pack2<T>(P[2], P[3]);
      for (int e = 0; e < 4; ++e) st[n][e] = cap ? P[e] * softcap_slope(S[e], 1.f / p.softcap) : P[e];
    }
    ptx::wgmma_pin(dv);
    for (int k = 0; k < Br / 16; ++k) ptx::wgmma_pin(pa[k]);
    ptx::wgmma_fence();
    for (int k = 0; k < Br / 16; ++k) mul_dims<T, D>(dv, pa[k], dOi, 16 * k);
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();  // dP^T is done; dV's product may still run
    ptx::wgmma_pin(dpt);

    // dS^T = P^T (dP^T - D_i) (line 14; softcap: st holds P^T times the slope), into dK's A
    // registers and, swizzled [key][query], into shared memory for dQ (a 4-byte store: the 8 rows
    // x 4 lanes fall in 32 different banks).
    for (int n = 0; n < 8; ++n) {
      const float2 dd = *reinterpret_cast<const float2*>(Di + n * 8 + 2 * t4);
      for (int e = 0; e < 4; ++e) dpt[n][e] = st[n][e] * (dpt[n][e] - (e % 2 ? dd.y : dd.x));
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(dSt + swz<Bc>(kw + g + r * 8, n) + 2 * t4) =
            ptx::pack2<T>(dpt[n][2 * r], dpt[n][2 * r + 1]);
    }
    pack(sa, dpt);
    // dK_j += dS^T Q_i (line 16; scale applied at the write), as dV's.
    ptx::wgmma_pin(dk);
    for (int k = 0; k < Br / 16; ++k) ptx::wgmma_pin(sa[k]);
    ptx::wgmma_fence();
    for (int k = 0; k < Br / 16; ++k) mul_dims<T, D>(dk, sa[k], Qi, 16 * k);
    ptx::wgmma_commit();

    // dQ_i += dS K_j (line 15) sums over both warpgroups' keys: all of dS^T must be in.
    ptx::fence_proxy_async();
    __syncthreads();
    // Warpgroup wg: 64 queries x its D / 2 dims (Dq), key step k. A = dS (query x key), stored as
    // dS^T [key][query]: its 64 output rows (queries) are contiguous, "MN-major", which wgmma reads
    // with its transpose flag (kTransA = 1; 16-bit types only). B = K_j with the key as k: MN-major,
    // a piece at dim x starting x % 64 elements into slab x / 64's rows.
    float dq[D / 16][4] = {};
    const Dq<D> dims(wg);
    const auto kj_at = [&](int dim, int k) { return desc(Ks + (dim / 64) * Bc * 64 + dim % 64 + k * 16 * 64); };
    ptx::wgmma_pin(dq);
    ptx::wgmma_fence();
    for (int k = 0; k < Bc / 16; ++k) {
      ptx::wgmma_ss_at<T, Dq<D>::kN0, /*kTransA*/ 1, /*kTransB*/ 1, 0>(dq, desc(dSt + k * 16 * 64), kj_at(dims.dim0, k));
      if constexpr (Dq<D>::kN1 > 0)
        ptx::wgmma_ss_at<T, Dq<D>::kN1, 1, 1, Dq<D>::kN0 / 8>(dq, desc(dSt + k * 16 * 64), kj_at(dims.dim1, k));
    }
    ptx::wgmma_commit();
    [[maybe_unused]] int* turn = dq_turn + (b * p.H + h) * Tr + r0 / Br;
    // This key block's turn among those that see query block i (bwd_v2::add_dq).
    [[maybe_unused]] const int64_t turn_no = j - first_key_block(p, r0, Bc);
    if constexpr (kDeterministic) {  // wait for the key blocks before j (bwd_v2::add_dq says why this cannot hang)
      if (threadIdx.x == 0)
        while (bwd_v2::load_acquire(turn) != turn_no) {
        }
    }
    ptx::wgmma_wait<0>();  // every product of the step is done
    ptx::wgmma_pin(dq);
    ptx::wgmma_pin(dv), ptx::wgmma_pin(dk);
    for (int k = 0; k < Br / 16; ++k) ptx::wgmma_pin(pa[k]), ptx::wgmma_pin(sa[k]);
    if constexpr (kDeterministic) __syncthreads();  // the turn is ours
    add_dq_piece<D, kDeterministic>(dq, dQacc, p, b, h, r0, br, wg);
    if constexpr (kDeterministic) {
      __threadfence();  // this block's additions are visible GPU-wide before the turn passes on
      __syncthreads();
      if (threadIdx.x == 0) bwd_v2::store_release(turn, int(turn_no + 1));
    }
  }

  // dK_j = scale dK_j, dV_j to HBM, once (line 18); rows past N_k are not written.
  for (int r = 0; r < 2; ++r) {
    const int key = kw + g + r * 8;
    if (key >= bc) continue;
    T* dk_out = dK + p.kv_offset(b, hk * G, c0 + key) + 2 * t4;
    T* dv_out = dV + p.kv_offset(b, hk * G, c0 + key) + 2 * t4;
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dk_out + n * 8) = ptx::pack2<T>(scale * dk[n][2 * r], scale * dk[n][2 * r + 1]);
      *reinterpret_cast<uint32_t*>(dv_out + n * 8) = ptx::pack2<T>(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

}  // namespace fa06::bwd_v4
