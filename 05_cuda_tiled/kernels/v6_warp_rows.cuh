// v6: v5 with each warp owning 32 query rows (two 16-row mma tiles) instead of 16. Read it beside
// v5_shape.cuh: the loop is v5's; every per-row array gains a leading [kM] (the warp's row tile),
// and Q_i stays in shared memory instead of registers.
//
//   v5                                              v6
//   a warp owns 16 rows: one m16 tile               a warp owns 32 rows: kM = 2 m16 tiles
//   each K or V fragment (ldmatrix) feeds 1 mma     each feeds 2 mma, one per row tile: half the
//   per row tile                                    shared-memory reads per mma in P V, and
//                                                   the two tiles' mma are independent (ILP)
//   Q_i in registers for the whole kernel           Q_i read by ldmatrix per k step (the freed
//   (D/16 x 4 registers)                            registers hold the second tile's S and O)
//   Br = 16 x warps                                 Br = 32 x warps
//
// Why: ncu on v5 (d = 128, N = 8192) shows one block of 8 warps per SM, the tensor pipe at 42 %
// and only 36 % of issue slots used: the warps mostly wait on their own chain of mma, shuffles
// and barriers. With two independent row tiles a warp has twice the work in flight between two
// waits, and the shared-memory traffic per mma drops. FlashAttention-2's kernels do the same: 4
// warps on 128 query rows, 32 rows per warp (its CUTLASS tiled MMA repeats the 64-row warp
// layout twice over the block).
//
// Supports T = __half or __nv_bfloat16, D = 64 or 128; shapes: the instantiations in runner.cu.
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"

namespace fa05::v6 {

// Shared memory: Q_i and two each of K_j, V_j, as padded (rows, D + 8) tiles of T (v2).
template <int D>
constexpr int kPitch = D + 8;
constexpr int kM = 2;  // 16-row mma tiles per warp
constexpr int smem_bytes(int D, int warps, int Bc) { return (16 * kM * warps + 4 * Bc) * (D + 8) * 2; }

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
  constexpr int Br = 16 * kM * kWarps;  // 32 query rows per warp: row tiles mt = 0, 1
  extern __shared__ __align__(16) unsigned char sram[];
  constexpr int P = kPitch<D>;
  T* Qi = reinterpret_cast<T*>(sram);  // (Br, P)
  T* Ks = Qi + Br * P;                 // (2, Bc, P): K_j in buffer j % 2
  T* Vs = Ks + 2 * Bc * P;             // (2, Bc, P)
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
    copy_tile_async<D, Bc, kThreads>(Ks, K + p.kv_offset(b, h, 0), bn);
    copy_tile_async<D, Bc, kThreads>(Vs, V + p.kv_offset(b, h, 0), bn);
  }
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();

  // The first row (within Q_i) of this warp's row tile mt. Q_i stays in shared memory: its A
  // fragments are read by ldmatrix where they are used.
  auto tile_row = [&](int mt) { return (warp * kM + mt) * 16; };

  // O_i, m, l on chip (line 5), in registers, per row tile mt: this lane holds rows g and g + 8
  // of the tile; o[mt][n] is the 16 x 8 fragment of columns 8n .. 8n+7.
  float o[kM][D / 8][4] = {};
  float m2[kM][2], l[kM][2];  // the row max so far times c; this lane's share of the row sum
  for (int mt = 0; mt < kM; ++mt) m2[mt][0] = m2[mt][1] = neg_inf, l[mt][0] = l[mt][1] = 0.f;

  for (int64_t c0 = 0, j = 0; c0 < keys_needed; c0 += Bc, ++j) {  // line 6
    // K_j, V_j have arrived (this thread's copies: the wait; everyone's: the barrier), and every
    // warp has finished block j-1, so its buffer can take block j+1 (line 7, one block ahead).
    ptx::cp_async_wait<0>();
    __syncthreads();
    const T* Kj = Ks + (j % 2) * Bc * P;
    const T* Vj = Vs + (j % 2) * Bc * P;
    if (c0 + Bc < keys_needed) {
      const int bn = int(min(int64_t(Bc), p.N_k - c0 - Bc));  // zeros past N_k (masked below)
      copy_tile_async<D, Bc, kThreads>(Ks + ((j + 1) % 2) * Bc * P, K + p.kv_offset(b, h, c0 + Bc), bn);
      copy_tile_async<D, Bc, kThreads>(Vs + ((j + 1) % 2) * Bc * P, V + p.kv_offset(b, h, c0 + Bc), bn);
    }
    ptx::cp_async_commit();  // an empty group on the last block: the wait above stays uniform

    // S = Q_i K_j^T for this warp's 32 rows (line 8): s[mt][n] is the 16 x 8 fragment of row
    // tile mt, keys 8n .. 8n+7. One ldmatrix of K_j feeds both row tiles.
    float s[kM][Bc / 8][4] = {};
    for (int k = 0; k < D / 16; ++k) {
      uint32_t q[kM][4];  // lane -> row (lane % 8) + 8 ((lane / 8) % 2), col 8 (lane / 16)
      for (int mt = 0; mt < kM; ++mt)
        ptx::ldmatrix_x4(q[mt], Qi + (tile_row(mt) + lane % 8 + (lane / 8 % 2) * 8) * P + k * 16 + lane / 16 * 8);
      for (int n = 0; n < Bc / 8; n += 2) {
        uint32_t kf[4];  // lane -> key 8 (lane / 16) + lane % 8, dims 16k + 8 ((lane / 8) % 2)
        ptx::ldmatrix_x4(kf, Kj + (n * 8 + lane / 16 * 8 + lane % 8) * P + k * 16 + (lane / 8 % 2) * 8);
        for (int mt = 0; mt < kM; ++mt) {
          ptx::mma_m16n8k16<T>(s[mt][n], q[mt], kf[0], kf[1]);
          ptx::mma_m16n8k16<T>(s[mt][n + 1], q[mt], kf[2], kf[3]);
        }
      }
    }

    // Mask only the blocks that need it (the last, ragged one past N_k, and those the causal
    // diagonal crosses): -inf, which ex2() turns into exactly 0 (v4).
    const bool mask = c0 + Bc > p.N_k || (p.causal && c0 + Bc > p.keys_seen(r0));
    if (mask)
      for (int mt = 0; mt < kM; ++mt)
        for (int r = 0; r < 2; ++r) {
          const int seen = int(max(int64_t(0), min(int64_t(Bc), p.keys_seen(r0 + tile_row(mt) + g + r * 8) - c0)));
          for (int n = 0; n < Bc / 8; ++n)
            for (int e = 2 * r; e < 2 * r + 2; ++e)
              if (n * 8 + 2 * t4 + e % 2 >= seen) s[mt][n][e] = neg_inf;
        }

    // Online softmax (line 9), v4's, for each of this lane's two rows in each row tile.
    for (int mt = 0; mt < kM; ++mt)
      for (int r = 0; r < 2; ++r) {
        float mx = neg_inf;  // this block's largest raw score in the row
        for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * r], s[mt][n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m2_new = fmaxf(m2[mt][r], mx * c);          // m2 = m * c, as stored (v4)
        const float m2_use = m2_new == neg_inf ? 0.f : m2_new;  // no -inf - -inf (v1, stage 03)
        const float alpha = ptx::ex2(m2[mt][r] - m2_use);
        float rowsum = 0.f;
        for (int n = 0; n < Bc / 8; ++n)
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[mt][n][e] = ptx::ex2(fmaf(s[mt][n][e], c, -m2_use));  // S becomes P~ in place
            rowsum += s[mt][n][e];
          }
        l[mt][r] = fmaf(alpha, l[mt][r], rowsum);
        m2[mt][r] = m2_new;
        for (int n = 0; n < D / 8; ++n) o[mt][n][2 * r] *= alpha, o[mt][n][2 * r + 1] *= alpha;  // line 10
      }

    // O_i += P~ V_j (line 10, second half), P~ in 16 bits from registers (v2). One transposing
    // ldmatrix of V_j gives the B fragments of two dim tiles, and they feed both row tiles.
    for (int k = 0; k < Bc / 16; ++k) {
      uint32_t a[kM][4];
      for (int mt = 0; mt < kM; ++mt) {
        a[mt][0] = ptx::pack2<T>(s[mt][2 * k][0], s[mt][2 * k][1]);
        a[mt][1] = ptx::pack2<T>(s[mt][2 * k][2], s[mt][2 * k][3]);
        a[mt][2] = ptx::pack2<T>(s[mt][2 * k + 1][0], s[mt][2 * k + 1][1]);
        a[mt][3] = ptx::pack2<T>(s[mt][2 * k + 1][2], s[mt][2 * k + 1][3]);
      }
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t vf[4];  // lane -> key 16k + 8 ((lane / 8) % 2) + lane % 8, dims 8n + 8 (lane / 16)
        ptx::ldmatrix_x4_trans(vf, Vj + (k * 16 + (lane / 8 % 2) * 8 + lane % 8) * P + n * 8 + lane / 16 * 8);
        for (int mt = 0; mt < kM; ++mt) {
          ptx::mma_m16n8k16<T>(o[mt][n], a[mt], vf[0], vf[1]);
          ptx::mma_m16n8k16<T>(o[mt][n + 1], a[mt], vf[2], vf[3]);
        }
      }
    }
  }

  // Write O_i = O_i / l and LSE = m2 ln 2 + log(l) (lines 12-15), per row tile.
  for (int mt = 0; mt < kM; ++mt)
    for (int r = 0; r < 2; ++r) {
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
      const int64_t i = r0 + tile_row(mt) + g + r * 8;
      if (i >= p.N_q) continue;
      const float inv = l[mt][r] == 0.f ? 0.f : 1.f / l[mt][r];  // a row that saw no key: O = 0, LSE = -inf
      T* out = O + p.q_offset(b, h, i);
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<uint32_t*>(out + n * 8 + 2 * t4) =
            ptx::pack2<T>(o[mt][n][2 * r] * inv, o[mt][n][2 * r + 1] * inv);
      if (t4 == 0)
        LSE[p.lse_offset(b, h, i)] = l[mt][r] == 0.f ? neg_inf : fmaf(m2[mt][r], 0.6931471805599453f, logf(l[mt][r]));
    }
}

}  // namespace fa05::v6
