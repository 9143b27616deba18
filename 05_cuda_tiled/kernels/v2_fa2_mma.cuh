// v2: the FlashAttention-2 work split on tensor cores. Read it beside v1_smem_fp32.cuh: the loop
// is the same (FA2 Alg. 1: for each K/V block, S = Q K^T, online softmax, O += P V); what moves
// is WHO does each step and WHERE the tiles live.
//
//   v1                                            v2
//   128 threads share every step via smem         each of 4 warps owns 16 query rows, alone
//   S, P, O_i, m, l in shared memory              S, P, O_i, m, l in registers (mma fragments)
//   scalar fp32 FMAs: 2 smem reads per FMA        mma.sync m16n8k16: a 16x8x16 product per
//                                                 instruction, operands from ldmatrix
//   softmax: one thread per row                   softmax: 4 lanes per row (a quad), 2 shuffles
//   4 barriers per K/V block                      2 (only the K/V tiles are shared)
//
// Dao 2023 (FlashAttention-2), Sec. 3.3, "Work partitioning between warps": splitting Q across
// the warps of a block (not K and V, as FA1 did) means no warp needs another warp's S or partial
// O: the row max, the row sum and O stay in the registers of the warp that owns the rows, and
// the division by l happens once, at the end (Sec. 3.1).
//
// P is converted to 16 bits in registers and fed straight back into the second mma as its A
// operand: the C fragment of S (16 x 8 per mma) has the same per-lane layout as the A fragment
// of P (16 x 16 = two C fragments side by side), so no shared memory round trip is needed.
//
// Supports T = __half or __nv_bfloat16 and D = 64 or 128 (runner.cu falls back to v1 for other
// head dims and for fp32). Br = Bc = 64. Precision: the mma operands (Q, K, V and P) are 16-bit
// values; their products and every sum (S, O, m, l) are fp32.
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"

namespace fa05::v2 {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int Br = 16 * kWarps;  // 64 query rows: 16 per warp, one mma row-tile each
constexpr int Bc = 64;           // keys per K/V block

// Shared memory: Q_i, K_j, V_j as (rows, D + 8) tiles of T. The 8 extra elements (16 bytes) per
// row shift each row by 4 banks, so the 8 rows one ldmatrix reads fall in 8 different bank
// groups (with a pitch of exactly D, all 8 would start in the same bank: an 8-way conflict).
template <int D>
constexpr int kPitch = D + 8;
template <int D>
constexpr int smem_bytes() { return (Br + 2 * Bc) * kPitch<D> * 2; }

// rows x D elements from global (row-major, pitch D) into a (64, D + 8) shared tile, 16 bytes
// per load; rows past `rows` are filled with zeros (never read from global memory).
template <int D, class T>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int rows) {
  constexpr int kVecs = D / 8;  // 16-byte vectors per row
  for (int e = threadIdx.x; e < 64 * kVecs; e += kThreads) {
    const int r = e / kVecs, c = e % kVecs * 8;
    uint4 x = make_uint4(0, 0, 0, 0);
    if (r < rows) x = *reinterpret_cast<const uint4*>(src + r * D + c);
    *reinterpret_cast<uint4*>(dst + r * kPitch<D> + c) = x;
  }
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads)
forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
               T* __restrict__ O, float* __restrict__ LSE, const fa::AttnProblem p, const float scale,
               const int64_t Tr) {
  extern __shared__ __align__(16) unsigned char sram[];
  constexpr int P = kPitch<D>;
  T* Qi = reinterpret_cast<T*>(sram);  // (Br, P)
  T* Kj = Qi + Br * P;                 // (Bc, P)
  T* Vj = Kj + Bc * P;                 // (Bc, P)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // fragment coordinates (ptx.cuh): row group, lane in quad
  const float neg_inf = -INFINITY;

  // This block's task, as in v1: (b, h, query block starting at row r0).
  const int64_t t = blockIdx.x;
  const int64_t b = t / (p.H * Tr), h = t / Tr % p.H, r0 = t % Tr * Br;
  const int br = int(min(int64_t(Br), p.N_q - r0));

  // Load Q_i (line 4), then each warp takes its 16 rows into registers as mma A fragments, once:
  // q[k] holds the 16 x 16 slice of columns 16k .. 16k+15.
  load_tile<D>(Qi, Q + p.q_offset(b, h, r0), br);
  __syncthreads();
  uint32_t q[D / 16][4];
  for (int k = 0; k < D / 16; ++k)  // lane -> row (lane % 8) + 8 ((lane / 8) % 2), col 8 (lane / 16)
    ptx::ldmatrix_x4(q[k], Qi + (warp * 16 + lane % 8 + (lane / 8 % 2) * 8) * P + k * 16 + lane / 16 * 8);

  // O_i, m, l on chip (line 5), in registers. This lane holds two rows of the warp's 16:
  // row g (index 0) and row g + 8 (index 1); o[n] is the 16 x 8 fragment of columns 8n .. 8n+7.
  float o[D / 8][4] = {};
  float m[2] = {neg_inf, neg_inf};
  float l[2] = {0.f, 0.f};  // this lane's share of the row sum; the quad's 4 shares add up at the end

  const int64_t keys_needed = p.keys_seen(r0 + br - 1);  // causal: key blocks past it are skipped
  for (int64_t c0 = 0; c0 < keys_needed; c0 += Bc) {     // line 6
    // Load K_j, V_j (line 7): up to N_k, zeros past it (their scores are masked below).
    const int bn = int(min(int64_t(Bc), p.N_k - c0));
    __syncthreads();  // every warp is done reading the previous K_j, V_j
    load_tile<D>(Kj, K + p.kv_offset(b, h, c0), bn);
    load_tile<D>(Vj, V + p.kv_offset(b, h, c0), bn);
    __syncthreads();

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

    // Scale; mask only the blocks that need it (the last, ragged one past N_k, and those the
    // causal diagonal crosses): -inf, which exp() turns into exactly 0.
    bool mask = c0 + Bc > p.N_k || (p.causal && c0 + Bc > p.keys_seen(r0));
    FA_ZOO(RAGGED_NO_MASK, mask = p.causal && c0 + Bc > p.keys_seen(r0));  // zoo: keys past N_k unmasked
    for (int n = 0; n < Bc / 8; ++n)
      for (int e = 0; e < 4; ++e) {
        s[n][e] *= scale;
        if (mask) {
          const int64_t i = r0 + warp * 16 + g + e / 2 * 8, j = c0 + n * 8 + 2 * t4 + e % 2;
          if (j >= p.N_k || !p.visible(i, j)) s[n][e] = neg_inf;
        }
      }

    // Online softmax (line 9), for each of this lane's two rows. The row's 64 scores are spread
    // over the 4 lanes of a quad: each takes the max of its 16, two shuffles combine the quad.
    for (int r = 0; r < 2; ++r) {
      float m_new = m[r];
      for (int n = 0; n < Bc / 8; ++n) m_new = fmaxf(m_new, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 1));
      m_new = fmaxf(m_new, __shfl_xor_sync(0xffffffffu, m_new, 2));
      const float m_use = m_new == neg_inf ? 0.f : m_new;  // no -inf - -inf (v1, stage 03)
      const float alpha = expf(m[r] - m_use);
      float rowsum = 0.f;
      for (int n = 0; n < Bc / 8; ++n)
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[n][e] = expf(s[n][e] - m_use);  // S becomes P~ in place
          rowsum += s[n][e];
        }
      // fmaf, one rounding, written out: nvcc (-fmad=true, its default) may or may not fuse a
      // written a * b + c, depending on the code around it, and so differ between kernels that do
      // the same arithmetic (v9's bit-identity test against v7 caught that in LSE).
      l[r] = fmaf(alpha, l[r], rowsum);
      FA_ZOO(FP16_ROWSUM, l[r] = __half2float(__float2half(l[r])));  // zoo: l kept in fp16
      m[r] = m_new;
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
    FA_ZOO(FP16_O_ACCUM, for (auto& on : o) for (float& x : on) x = __half2float(__float2half(x)));  // zoo: O in fp16
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
    if (t4 == 0) LSE[p.lse_offset(b, h, i)] = l[r] == 0.f ? neg_inf : m[r] + logf(l[r]);
  }
}

}  // namespace fa05::v2
