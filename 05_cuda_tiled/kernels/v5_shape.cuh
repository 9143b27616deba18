// v5: v4 with the work shaped by measurement: the block shape per head dimension (warps per
// thread block and keys per K/V block, chosen by a sweep), and causal's heaviest query blocks
// launched first. Read it beside v4_exp2.cuh: the loop body is v4's; Br, Bc and the order of the
// tasks become parameters.
//
//   v4                                              v5
//   4 warps, Br = 64, Bc = 64 for every d           kWarps (Br = 16 kWarps) and Bc template
//                                                   parameters; runner.cu picks them per d from
//                                                   the sweep (bench BM_shape, lab notebook)
//   task t -> (b, h, query block t % Tr)            causal: query block Tr - 1 - t / (B H) first
//
// Why the shape matters: a larger Br shares each K/V tile (bytes from HBM and cp.async work)
// among more warps; a larger Bc halves the barriers and the per-block softmax bookkeeping (max,
// shuffles, rescale of O) per key, but costs registers (S is Bc/2 floats per lane) and shared
// memory (two K and V buffers); both change how many thread blocks fit on an SM. Which wins is
// measured, not guessed.
// Why the order matters for causal: query block i sees i + 1 key blocks, so the last blocks cost
// Tr times the first. Launched in index order, the heavy ones start last and the GPU idles at
// the end while a few SMs finish them; heaviest first, the light ones fill the gaps (the
// longest-processing-time-first rule of scheduling).
//
// Supports T = __half or __nv_bfloat16, D = 64 or 128; shapes: the instantiations in runner.cu.
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"

namespace fa05::v5 {

// Shared memory: Q_i and two each of K_j, V_j, as padded (rows, D + 8) tiles of T (v2).
template <int D>
constexpr int kPitch = D + 8;
constexpr int smem_bytes(int D, int warps, int Bc) { return (16 * warps + 4 * Bc) * (D + 8) * 2; }

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

  // Each warp takes its 16 rows of Q_i into registers as mma A fragments, once:
  // q[k] holds the 16 x 16 slice of columns 16k .. 16k+15.
  uint32_t q[D / 16][4];
  for (int k = 0; k < D / 16; ++k)  // lane -> row (lane % 8) + 8 ((lane / 8) % 2), col 8 (lane / 16)
    ptx::ldmatrix_x4(q[k], Qi + (warp * 16 + lane % 8 + (lane / 8 % 2) * 8) * P + k * 16 + lane / 16 * 8);

  // O_i, m, l on chip (line 5), in registers. This lane holds two rows of the warp's 16:
  // row g (index 0) and row g + 8 (index 1); o[n] is the 16 x 8 fragment of columns 8n .. 8n+7.
  float o[D / 8][4] = {};
  float m2[2] = {neg_inf, neg_inf};  // the row max so far times c (below)
  float l[2] = {0.f, 0.f};  // this lane's share of the row sum; the quad's 4 shares add up at the end

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

    // S = Q_i K_j^T for this warp's 16 rows (line 8): s[n] is the 16 x 8 fragment of keys
    // 8n .. 8n+7. K_j (row-major [key][dim]) is already the "col" B operand: one ldmatrix gives
    // the B fragments of two key tiles.
    float s[Bc / 8][4] = {};
    for (int k = 0; k < D / 16; ++k)
      for (int n = 0; n < Bc / 8; n += 2) {
        uint32_t kf[4];  // lane -> key 8 (lane / 16) + lane % 8, dims 16k + 8 ((lane / 8) % 2)
        ptx::ldmatrix_x4(kf, Kj + (n * 8 + lane / 16 * 8 + lane % 8) * P + k * 16 + (lane / 8 % 2) * 8);
        ptx::mma_m16n8k16<T>(s[n], q[k], kf[0], kf[1]);
        ptx::mma_m16n8k16<T>(s[n + 1], q[k], kf[2], kf[3]);
      }

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

    // O_i += P~ V_j (line 10, second half). P~ goes to 16 bits in registers: the C fragments of
    // key tiles 2k and 2k+1 are, lane for lane, the A fragment of the 16 x 16 slice k. V_j is
    // row-major [key][dim]: a transposing ldmatrix gives the B fragments of two dim tiles.
    for (int k = 0; k < Bc / 16; ++k) {
      const uint32_t a[4] = {ptx::pack2<T>(s[2 * k][0], s[2 * k][1]), ptx::pack2<T>(s[2 * k][2], s[2 * k][3]),
                             ptx::pack2<T>(s[2 * k + 1][0], s[2 * k + 1][1]),
                             ptx::pack2<T>(s[2 * k + 1][2], s[2 * k + 1][3])};
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t vf[4];  // lane -> key 16k + 8 ((lane / 8) % 2) + lane % 8, dims 8n + 8 (lane / 16)
        ptx::ldmatrix_x4_trans(vf, Vj + (k * 16 + (lane / 8 % 2) * 8 + lane % 8) * P + n * 8 + lane / 16 * 8);
        ptx::mma_m16n8k16<T>(o[n], a, vf[0], vf[1]);
        ptx::mma_m16n8k16<T>(o[n + 1], a, vf[2], vf[3]);
      }
    }
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

}  // namespace fa05::v5
