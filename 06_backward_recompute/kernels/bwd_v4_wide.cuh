// Stage 06 on the GPU, v4 at wide heads (D = 192, 256): gpu_v4's wgmma step where a warpgroup
// cannot own all of its keys' head dims. Read it beside bwd_v4_wgmma.cuh: the task, the mask, the
// softmax algebra and the five products are v4's; who owns what changes, and Q_i, dO_i come by TMA.
//
// Why: in v4 warpgroup w owns 64 keys and all D dims of their dK_j and dV_j, 2 x 64 D / 128 = D
// accumulator registers a thread for the two: 128 at D = 128, 192 at D = 192 and 256 at D = 256.
// With S^T and dP^T beside them (32 each) that is 256 at D = 192, more than a thread has (255),
// before dQ's accumulators and any address. So at D > 128 (as FlashAttention-3's backward at its widest
// heads) the two warpgroups share one block of 64 keys and split the rest
// (docs/img/diagram_bwd_v4_wide.png draws both):
//
//   v4, D = 128 (Bc = 128)                         here, D = 192 or 256 (Bc = 64)
//   S^T, dP^T: warpgroup w, its 64 keys x all      warpgroup w: all 64 keys x queries 32w .. 32w + 31
//   64 queries                                     (N = 32)
//   P^T into dV's A registers, lane for lane       P^T stored to shared memory (16 bits, swizzled),
//                                                  since dV_j's product needs all 64 queries of it
//   dV_j, dK_j: its 64 keys x all D dims           all 64 keys x dims w D/2 .. (w + 1) D/2 - 1:
//   (D registers a thread for the two)             D / 2 registers a thread for the two (96, 128)
//   dQ_i: 64 queries x dims 64 w .. 64 w + 63      64 queries x the same D / 2 dims
//
// A step then costs one more barrier (P^T of both warpgroups must be in before dV's product), and
// a key block does half v4's keys per step, so Q_i and dO_i are read from L2 twice as often. The
// products whose N is a warpgroup's dims are cut at the 64-element column atoms of the swizzle
// (at D = 192 warpgroup 0's dims 0 .. 95 are 64 + 32 and warpgroup 1's 96 .. 191 are 32 + 64, the
// two sharing the slab of dims 64 .. 127: Dims below), each piece a wgmma of N = 32
// or 64 into its slice of the accumulator (ptx::wgmma_ss_at). The two warpgroups run the same
// instructions on different addresses: no branch on the warpgroup, so every barrier is reached by
// all 256 threads at one instruction (compute-sanitizer's synccheck flagged a first version whose
// warpgroups ran two compiled copies of the loop) and ptxas finds no wgmma on a divergent path.
//
// Per step (one query block i of Br = 64 rows, one query head), warpgroup w (FA2 Algorithm 2,
// lines 10-16, transposed as in v2):
//   S^T  = K_j Q_i^T     (64 keys x its 32 queries, K = D: D/16 wgmma m64n32k16, A and B in smem)
//   dP^T = V_j dO_i^T    (the same with V_j, dO_i); then the next step's Q_i, dO_i are copied
//   P^T  = exp(S^T - LSE_i), to shared memory;  barrier
//   dV_j += P^T dO_i     (its dims; A = P^T, all 64 queries, B = dO_i MN-major)
//   dS^T = P^T (dP^T - D_i), to shared memory;  barrier
//   dK_j += dS^T Q_i     (its dims)
//   dQ_i += dS K_j       (its dims; A = dS^T read transposed, B = K_j MN-major)
// Q_i and dO_i come by TMA (the copy engine: stage 05's v12), 2 D / 64 boxes a step issued by one
// thread onto an mbarrier per buffer, where v4's 256 threads issue 16-byte cp.async: at D = 256
// those were 16 copies a thread a step with their address arithmetic, beside the 32 atomic adds
// into dQacc, and ncu put 13 % of the warps' stalls on the queue of global memory instructions
// (run 3 in the lab notebook). The next step's copies (the TMA and LSE_i, D_i's cp.async) are
// issued after this step's first products, not before them as in v4, so that the tensor cores
// start on S^T without waiting for their issue. Each wgmma's descriptor is its tile's plus an
// offset in 16-byte units (the start address field is the low bits: smem_desc_sw128), computed
// once a step instead of once a wgmma.
//
// Names: a "slab" is 64 columns of a tile (64 16-bit elements, one 128-byte row of the swizzle per
// tile row; a tile of D columns is D / 64 slabs one after the other, v7_wgmma.cuh's swz), the
// "column atom" of an MN-major wgmma operand is one slab's 8 rows x 64 columns; K-major and
// MN-major say which of a wgmma operand's two dims is contiguous (ptx.cuh, wgmma_m64nNk16).
// At D = 192 warpgroup 1's 32-wide piece starts 32 elements (64 bytes) into its slab's rows: the
// swizzle is applied to the address the hardware computes, so a start inside the 128-byte row is
// read as the same chunks the copy wrote (as the K-major steps of 16 elements are; the tests at
// D = 192 check every column).
// Layout, dQacc, the deterministic variant, the window and the softcap as v4; T = __half or
// __nv_bfloat16, sm_90a only. The tiles are addressed from the shared-memory array itself (an
// offset added to it, not a pointer rounded through an integer), so the compiler keeps their
// stores and loads shared (STS, LDS) where v4's are generic (issue 38's ncu).
#pragma once
#include <cuda.h>  // CUtensorMap (a type only: the maps are made through the runtime, common/cuda/tensor_map.hpp)

#include <cstdint>

#include "bwd_v4_wgmma.cuh"

namespace fa06::bwd_v4_wide {

namespace ptx = fa05::ptx;
using bwd_v2::Br;
using fa05::v7::copy_tile_swizzled;
using fa05::v7::swz;

constexpr int kWarpgroups = 2, kThreads = 128 * kWarpgroups, Bc = 64;

// K_j, V_j (Bc x D), two each of Q_i, dO_i (Br x D), P^T and dS^T (Bc x Br), all 16-bit in the
// 128-byte swizzle, LSE_i and D_i (2 x Br floats each), two mbarriers, and 1024 bytes of slack to
// align the swizzled tiles: 210 KiB at D = 256, 162 KiB at D = 192. Every tile has 64 rows, so a
// slab (64 columns) is 64 x 64 elements and dim c of row r sits at swz<64>(r, c / 8) + c % 8, the
// layout a TMA box of 64 x 64 with the 128-byte swizzle lands in.
template <int D>
constexpr int smem_bytes() {
  return 1024 + (2 * Bc * D + 4 * Br * D + 2 * Bc * Br) * 2 + 4 * Br * 4 + 2 * 8;
}

// A descriptor moved by `elems` 16-bit elements: the start address field counts 16-byte units
// in the low bits (ptx::smem_desc_sw128), and no tile here reaches past them.
__device__ __forceinline__ uint64_t desc_at(uint64_t desc, int elems) { return desc + uint64_t(elems * 2 / 16); }

// Warpgroup w's dims (w D/2 .. (w + 1) D/2 - 1) in two pieces that end where a 64-element slab
// ends, since a wgmma's N columns of an MN-major operand must lie inside one column atom (ptx.cuh,
// the descriptor): D = 256: 64 + 64; D = 192: 64 + 32 (w = 0: dims 0-63, 64-95), 32 + 64 (w = 1:
// 96-127, 128-191). The 64-wide piece takes accumulator tiles 0-7 and the other tiles 8 on, so
// both warpgroups issue the same two wgmma shapes and differ only in addresses (with the narrow
// piece first, a 64-wide wgmma into tiles 4-11, ptxas serialised every wgmma: C7511). acc[n]
// holds dims dim_of(n) .. + 7; a tile's piece starts at element offset(dim) of its row 0.
template <int D>
struct Dims {
  int dim0, dim1;  // the first dims of the 64-wide piece and of the other one (D / 2 - 64 wide)
  __device__ explicit Dims(int wg)
      : dim0(D == 192 && wg == 1 ? 128 : wg * D / 2), dim1(D == 192 && wg == 1 ? 96 : wg * D / 2 + 64) {}
  __device__ int dim_of(int n) const { return n < 8 ? dim0 + 8 * n : dim1 + 8 * (n - 8); }
  __device__ static int offset(int dim) { return (dim / 64) * 64 * 64 + dim % 64; }
};

// acc += A times B's rows krow .. krow + 15 at this warpgroup's dims: B (b0, b1: the descriptors
// of the tile at the two pieces) a swizzled 64-row tile read MN-major (the dims are N), A a 64 x
// 16 piece of shared memory (desc_a; kTransA as wgmma's). A row of a slab is 64 elements.
template <class T, int D, int kTransA>
__device__ __forceinline__ void mul_dims(float (&acc)[D / 16][4], uint64_t desc_a, uint64_t b0, uint64_t b1, int krow) {
  ptx::wgmma_ss_at<T, 64, kTransA, /*kTransB*/ 1, 0>(acc, desc_a, desc_at(b0, krow * 64));
  ptx::wgmma_ss_at<T, D / 2 - 64, kTransA, /*kTransB*/ 1, 8>(acc, desc_a, desc_at(b1, krow * 64));
}

// One thread block per (b, kv head hk, key block j) of Bc = 64 keys. Tc key blocks per head.
// tm_q, tm_do: TMA maps of Q and dO as (B H, N_q, D) tensors, boxes of 64 x 64 (rows past N_q
// read as zeros), made by runner_bwd.cu.
template <class T, int D, bool kDeterministic>
__global__ void __launch_bounds__(kThreads, 1)
dk_dv_dq_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                const T* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ Dv,
                T* __restrict__ dK, T* __restrict__ dV, float* __restrict__ dQacc, int* __restrict__ dq_turn,
                const fa::AttnProblem p, const float scale, const int64_t Tc, const __grid_constant__ CUtensorMap tm_q,
                const __grid_constant__ CUtensorMap tm_do) {
  static_assert(D == 192 || D == 256, "the widths where a warpgroup cannot hold all of its keys' dims");
  extern __shared__ __align__(16) unsigned char sram[];
  // 1024-aligned for the swizzle: an offset into sram, so the pointers stay in the shared window.
  const uint32_t at = uint32_t(__cvta_generic_to_shared(sram));
  T* Ks = reinterpret_cast<T*>(sram + (1024 - at % 1024) % 1024);  // (Bc x D), D / 64 slabs
  T* Vs = Ks + Bc * D;                                  // (Bc x D)
  T* Qs = Vs + Bc * D;                                  // (2, Br x D): Q_i of step s in buffer s % 2
  T* dOs = Qs + 2 * Br * D;                             // (2, Br x D)
  T* Pt = dOs + 2 * Br * D;                             // (Bc x Br): P^T of the step
  T* dSt = Pt + Bc * Br;                                // (Bc x Br): dS^T of the step
  float* Ls = reinterpret_cast<float*>(dSt + Bc * Br);  // (2, Br): LSE_i
  float* Ds = Ls + 2 * Br;                              // (2, Br): D_i
  uint64_t* full = reinterpret_cast<uint64_t*>(Ds + 2 * Br);  // (2): buffer s % 2's Q_i, dO_i have landed
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;        // fragment coordinates (ptx.cuh)
  const int kw = warp * 16;                     // this warp's 16 accumulator rows (g, g + 8): keys, or in dQ queries
  const int qw = wg * 32;                       // this warpgroup's 32 queries in S^T, dP^T
  constexpr int kDims = D / 2;                  // this warpgroup's dims in dV_j, dK_j, dQ_i (Dims)
  const Dims<D> dims(wg);
  const bool cap = p.softcap > 0.f;
  const float c = (cap ? 1.f : scale) * 1.4426950408889634f;
  const auto desc = [](const T* tile) { return ptx::smem_desc_sw128(tile); };
  // The descriptors that stay: K_j and V_j as A of S^T, dP^T (dim step k at desc_at(.., k / 4 *
  // Bc * 64 + k % 4 * 16)), K_j at this warpgroup's dims as B of dQ, P^T and dS^T.
  const uint64_t dKs = desc(Ks), dVs = desc(Vs), dPt = desc(Pt), ddSt = desc(dSt);
  const uint64_t dK0 = desc(Ks + dims.offset(dims.dim0)), dK1 = desc(Ks + dims.offset(dims.dim1));

  // The task and the steps: as v4.
  const int64_t Tr = (p.N_q + Br - 1) / Br;
  const int64_t t = bwd_v2::task_index<kDeterministic>(dq_turn, p.B * p.H * Tr), G = p.H / p.H_kv;
  const int64_t b = t / (p.H_kv * Tc), hk = t / Tc % p.H_kv, j = t % Tc, c0 = j * Bc;
  const int bc = int(min(int64_t(Bc), p.N_k - c0));
  const QueryBlocks qb = query_blocks(p, c0, bc, Br);
  const int64_t i_first = qb.first;
  const int64_t blocks_per_head = max(int64_t(0), qb.last - i_first), steps = G * blocks_per_head;
  auto step_head = [&](int64_t s) { return hk * G + s / blocks_per_head; };
  auto step_row0 = [&](int64_t s) { return (i_first + s % blocks_per_head) * Br; };
  // Step s's tiles into buffer s % 2: Q_i and dO_i by thread 0 (D / 64 boxes each, counted on
  // full[s % 2]), LSE_i and D_i by cp.async (threads 0 .. Br - 1).
  auto load_step = [&](int64_t s) {
    const int64_t h = step_head(s), r0 = step_row0(s);
    const int br = int(min(int64_t(Br), p.N_q - r0)), buf = int(s % 2);
    if (threadIdx.x == 0) {
      ptx::mbar_arrive_expect_tx(&full[buf], uint32_t(2 * Br * D * sizeof(T)));
      for (int x = 0; x < D; x += 64) {
        ptx::tma_load_3d(Qs + buf * Br * D + x * Br, &tm_q, x, int(r0), int(b * p.H + h), &full[buf]);
        ptx::tma_load_3d(dOs + buf * Br * D + x * Br, &tm_do, x, int(r0), int(b * p.H + h), &full[buf]);
      }
    }
    for (int r = threadIdx.x; r < Br; r += kThreads) {
      const int64_t a = p.lse_offset(b, h, r0 + min(r, br - 1));
      ptx::cp_async_4(Ls + buf * Br + r, LSE + a, r < br);
      ptx::cp_async_4(Ds + buf * Br + r, Dv + a, r < br);
    }
  };

  if (threadIdx.x == 0) {
    ptx::mbar_init(&full[0], 1), ptx::mbar_init(&full[1], 1);
    ptx::mbar_init_fence();  // the copy engine sees them initialised too
  }
  __syncthreads();
  copy_tile_swizzled<D, Bc, kThreads>(Ks, K + p.kv_offset(b, hk * G, c0), bc);
  copy_tile_swizzled<D, Bc, kThreads>(Vs, V + p.kv_offset(b, hk * G, c0), bc);
  if (steps > 0) load_step(0);
  ptx::cp_async_commit();
  // dK_j, dV_j (line 7): all 64 keys x this warpgroup's dims; dk[n][e]: key kw + g + 8 (e / 2),
  // dim dims.dim_of(n) + 2 t4 + e % 2.
  float dk[kDims / 8][4] = {}, dv[kDims / 8][4] = {};

  for (int64_t s = 0; s < steps; ++s) {  // line 8
    // Step s's tiles are in (Q_i, dO_i: the u-th use of buffer s % 2, u = s / 2, completes phase
    // u, parity u % 2; LSE_i, D_i: this thread's cp.async, then the barrier for everyone's); every
    // warpgroup is done with step s - 1's products, so the other buffers, P^T and dS^T can be
    // refilled. The proxy fence is for K_j and V_j (cp.async, read by the tensor cores through the
    // async proxy) before step 0; TMA's writes need none, and later steps only repeat it.
    ptx::cp_async_wait<0>();
    ptx::mbar_wait(&full[s % 2], uint32_t(s / 2 % 2));
    ptx::fence_proxy_async();
    __syncthreads();
    const int64_t h = step_head(s), r0 = step_row0(s);
    const int br = int(min(int64_t(Br), p.N_q - r0));
    const T* Qi = Qs + (s % 2) * Br * D;
    const T* dOi = dOs + (s % 2) * Br * D;
    const float* Li = Ls + (s % 2) * Br;
    const float* Di = Ds + (s % 2) * Br;
    const uint64_t dQi = desc(Qi), ddOi = desc(dOi);

    // S^T = K_j Q_i^T (line 10), dP^T = V_j dO_i^T (line 13): A all 64 rows of K_j (V_j), B this
    // warpgroup's 32 rows of Q_i (dO_i), both K-major; dim step k: slab k / 4, 16 (k % 4) in.
    float st[4][4] = {}, dpt[4][4] = {};  // st[n][e]: key kw + g + 8 (e / 2), query qw + 8n + 2 t4 + e % 2
    ptx::wgmma_pin(st);
    ptx::wgmma_pin(dpt);
    ptx::wgmma_fence();
    for (int k = 0; k < D / 16; ++k)
      ptx::wgmma_ss_at<T, 32, 0, 0, 0>(st, desc_at(dKs, (k / 4) * Bc * 64 + (k % 4) * 16),
                                       desc_at(dQi, (k / 4) * Br * 64 + qw * 64 + (k % 4) * 16));
    ptx::wgmma_commit();
    for (int k = 0; k < D / 16; ++k)
      ptx::wgmma_ss_at<T, 32, 0, 0, 0>(dpt, desc_at(dVs, (k / 4) * Bc * 64 + (k % 4) * 16),
                                       desc_at(ddOi, (k / 4) * Br * 64 + qw * 64 + (k % 4) * 16));
    ptx::wgmma_commit();
    // The next step's tiles, into the other buffers, while the tensor cores work.
    if (s + 1 < steps) load_step(s + 1);
    ptx::cp_async_commit();
    ptx::wgmma_wait<1>();  // S^T is done; dP^T may still run
    ptx::wgmma_pin(st);

    // Mask, softcap and P^T = exp(S^T - LSE_i) (line 11): v4's, per accumulator element. P^T goes
    // to shared memory [key][query] (a 4-byte store: 8 rows x 4 lanes in 32 banks); st keeps P^T,
    // with a softcap times the slope of the capped S^T (8.2), for dS^T below.
    const BandTile band = band_tile(p, r0, c0, Br, Bc);
    const bool mask = c0 + Bc > p.N_k || r0 + Br > p.N_q || band.crosses(Br, Bc);
    if (mask) {
      for (int n = 0; n < 4; ++n)
        for (int e = 0; e < 4; ++e) {
          const int kr = kw + g + e / 2 * 8, qc = qw + n * 8 + 2 * t4 + e % 2;
          if (kr >= bc || qc >= br || !band.sees(kr - qc)) st[n][e] = -INFINITY;
        }
    }
    for (int n = 0; n < 4; ++n) {
      const float2 lse = *reinterpret_cast<const float2*>(Li + qw + n * 8 + 2 * t4);
      const float l2[2] = {lse.x == -INFINITY ? INFINITY : lse.x * 1.4426950408889634f,
                           lse.y == -INFINITY ? INFINITY : lse.y * 1.4426950408889634f};
      float P[4], S[4];  // softcap (8.2): S = c tanh(scale x / c), masked (-inf) kept
      for (int e = 0; e < 4; ++e) {
        S[e] = cap && st[n][e] != -INFINITY ? softcap(scale * st[n][e], p.softcap) : st[n][e];
        P[e] = ptx::ex2(fmaf(S[e], c, -l2[e % 2]));
      }
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(Pt + swz<Bc>(kw + g + r * 8, qw / 8 + n) + 2 * t4) = ptx::pack2<T>(P[2 * r], P[2 * r + 1]);
      for (int e = 0; e < 4; ++e) st[n][e] = cap ? P[e] * softcap_slope(S[e], 1.f / p.softcap) : P[e];
    }
    ptx::fence_proxy_async();
    __syncthreads();  // P^T of both warpgroups is in

    // dV_j += P^T dO_i (line 12): A = P^T K-major (query step k: 16 k in), B = dO_i's rows 16k.
    const uint64_t dO0 = desc_at(ddOi, dims.offset(dims.dim0)), dO1 = desc_at(ddOi, dims.offset(dims.dim1));
    ptx::wgmma_pin(dv);
    ptx::wgmma_fence();
    for (int k = 0; k < Br / 16; ++k) mul_dims<T, D, 0>(dv, desc_at(dPt, k * 16), dO0, dO1, k * 16);
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();  // dP^T is done; dV's product may still run
    ptx::wgmma_pin(dpt);

    // dS^T = P^T (dP^T - D_i) (line 14; softcap: st holds P^T times the slope), to shared memory.
    for (int n = 0; n < 4; ++n) {
      const float2 dd = *reinterpret_cast<const float2*>(Di + qw + n * 8 + 2 * t4);
      for (int e = 0; e < 4; ++e) dpt[n][e] = st[n][e] * (dpt[n][e] - (e % 2 ? dd.y : dd.x));
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(dSt + swz<Bc>(kw + g + r * 8, qw / 8 + n) + 2 * t4) =
            ptx::pack2<T>(dpt[n][2 * r], dpt[n][2 * r + 1]);
    }
    ptx::fence_proxy_async();
    __syncthreads();  // dS^T of both warpgroups is in

    // dK_j += dS^T Q_i (line 16; scale applied at the write), as dV's: A = dS^T K-major, its k
    // (queries) along the row, so query step k is 16 k elements in. dQ_i += dS K_j (line 15): A = dS
    // (query x key) read from dS^T [key][query] transposed (kTransA = 1), its k (keys) down the
    // rows, so key step k is rows 16k, 16 k x 64 elements in; B = K_j's rows 16k, MN-major.
    const uint64_t dQ0 = desc_at(dQi, dims.offset(dims.dim0)), dQ1 = desc_at(dQi, dims.offset(dims.dim1));
    ptx::wgmma_pin(dk);
    ptx::wgmma_fence();
    for (int k = 0; k < Br / 16; ++k) mul_dims<T, D, 0>(dk, desc_at(ddSt, k * 16), dQ0, dQ1, k * 16);
    ptx::wgmma_commit();
    float dq[kDims / 8][4] = {};  // dq[n][e]: query kw + g + 8 (e / 2), dim dims.dim_of(n) + 2 t4 + e % 2
    ptx::wgmma_pin(dq);
    ptx::wgmma_fence();
    for (int k = 0; k < Bc / 16; ++k) mul_dims<T, D, 1>(dq, desc_at(ddSt, k * 16 * 64), dK0, dK1, k * 16);
    ptx::wgmma_commit();
    [[maybe_unused]] int* turn = dq_turn + (b * p.H + h) * Tr + r0 / Br;
    [[maybe_unused]] const int64_t turn_no = j - first_key_block(p, r0, Bc);
    if constexpr (kDeterministic) {  // wait for the key blocks before j (bwd_v2::add_dq says why this cannot hang)
      if (threadIdx.x == 0)
        while (bwd_v2::load_acquire(turn) != turn_no) {
        }
    }
    ptx::wgmma_wait<0>();  // every product of the step is done
    ptx::wgmma_pin(dq);
    ptx::wgmma_pin(dv);
    ptx::wgmma_pin(dk);
    if constexpr (kDeterministic) __syncthreads();  // the turn is ours
    for (int r = 0; r < 2; ++r) {
      const int q = kw + g + r * 8;
      if (q >= br) continue;  // rows past N_q: nothing to add, and no memory there
      float* out = dQacc + p.q_offset(b, h, r0 + q) + 2 * t4;
      for (int n = 0; n < kDims / 8; ++n)
        bwd_v2::add_to_dq<kDeterministic>(reinterpret_cast<float2*>(out + dims.dim_of(n)), make_float2(dq[n][2 * r], dq[n][2 * r + 1]));
    }
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
    for (int n = 0; n < kDims / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dk_out + dims.dim_of(n)) = ptx::pack2<T>(scale * dk[n][2 * r], scale * dk[n][2 * r + 1]);
      *reinterpret_cast<uint32_t*>(dv_out + dims.dim_of(n)) = ptx::pack2<T>(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

}  // namespace fa06::bwd_v4_wide
