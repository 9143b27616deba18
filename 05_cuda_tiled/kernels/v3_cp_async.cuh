// v3: v2 with the K/V loads overlapped with the math (cp.async, double buffering). Read it beside
// v2_fa2_mma.cuh: the arithmetic is unchanged; only how K_j and V_j reach shared memory moves.
//
//   v2                                              v3
//   load K_j, V_j; barrier; compute j               issue the copy of K_j+1, V_j+1; compute j
//   (every warp waits for HBM each iteration)       (the copy runs while the tensor cores work)
//   global -> registers -> shared (LDG + STS)       global -> shared directly (LDGSTS, cp.async)
//   one K and one V buffer                          two of each: compute reads one, the copy
//                                                   fills the other
//   2 barriers per K/V block                        1
//
// Why: in v2 a K/V block is ~70 % of a thread block's bytes from HBM, and nothing hides its
// latency but other resident thread blocks (3 per SM at v2's registers). FA2 (Dao 2023, Sec. 3.3
// and its code) and every fast GEMM prefetch the next tile into a second buffer: the load of
// block j+1 is in flight during block j's two matrix products and softmax.
//
// The pipeline, one barrier per iteration:
//   before the loop: copy Q_i, K_0, V_0 (buffer 0), commit
//   iteration j:     wait for my copies; __syncthreads()   <- K_j, V_j visible to all warps, and
//                                                              every warp is done with block j-1,
//                                                              whose buffer the next copy reuses
//                    copy K_j+1, V_j+1 into buffer (j+1) % 2, commit
//                    S = Q_i K_j^T, softmax, O_i += P~ V_j  from buffer j % 2
// Rows past N_k are zero-filled by the copy itself (cp.async with src-size 0), never read.
//
// Supports what v2 supports (T = __half or __nv_bfloat16, D = 64 or 128, Br = Bc = 64).
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"

namespace fa05::v3 {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int Br = 16 * kWarps;  // 64 query rows: 16 per warp, one mma row-tile each
constexpr int Bc = 64;           // keys per K/V block

// Shared memory: Q_i and two each of K_j, V_j, as (rows, D + 8) tiles of T (v2's padded pitch:
// the 8 rows one ldmatrix reads fall in 8 different bank groups): 85 KiB at D = 128.
template <int D>
constexpr int kPitch = D + 8;
template <int D>
constexpr int smem_bytes() { return (Br + 4 * Bc) * kPitch<D> * 2; }

// Starts copying rows x D elements from global (row-major, pitch D) into a (64, D + 8) shared
// tile, 16 bytes per cp.async; rows past `rows` are zero-filled, never read from global memory.
// The caller commits and waits (ptx::cp_async_commit / cp_async_wait).
template <int D, class T>
__device__ __forceinline__ void copy_tile_async(T* dst, const T* src, int rows) {
  constexpr int kVecs = D / 8;  // 16-byte vectors per row
  for (int e = threadIdx.x; e < 64 * kVecs; e += kThreads) {
    const int r = e / kVecs, c = e % kVecs * 8;
    ptx::cp_async_16(dst + r * kPitch<D> + c, src + min(r, rows - 1) * D + c, r < rows);
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
  T* Ks = Qi + Br * P;                 // (2, Bc, P): K_j in buffer j % 2
  T* Vs = Ks + 2 * Bc * P;             // (2, Bc, P)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;  // fragment coordinates (ptx.cuh): row group, lane in quad
  const float neg_inf = -INFINITY;

  // This block's task, as in v1: (b, h, query block starting at row r0).
  const int64_t t = blockIdx.x;
  const int64_t b = t / (p.H * Tr), h = t / Tr % p.H, r0 = t % Tr * Br;
  const int br = int(min(int64_t(Br), p.N_q - r0));

  // Start the copies of Q_i (line 4) and of the first K/V block (line 7 for j = 0) at once.
  const int64_t keys_needed = p.keys_seen(r0 + br - 1);  // causal: key blocks past it are skipped
  copy_tile_async<D>(Qi, Q + p.q_offset(b, h, r0), br);
  if (keys_needed > 0) {
    const int bn = int(min(int64_t(Bc), p.N_k));
    copy_tile_async<D>(Ks, K + p.kv_offset(b, h, 0), bn);
    copy_tile_async<D>(Vs, V + p.kv_offset(b, h, 0), bn);
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
  float m[2] = {neg_inf, neg_inf};
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
      copy_tile_async<D>(Ks + ((j + 1) % 2) * Bc * P, K + p.kv_offset(b, h, c0 + Bc), bn);
      copy_tile_async<D>(Vs + ((j + 1) % 2) * Bc * P, V + p.kv_offset(b, h, c0 + Bc), bn);
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

    // Scale; mask only the blocks that need it (the last, ragged one past N_k, and those the
    // causal diagonal crosses): -inf, which exp() turns into exactly 0.
    const bool mask = c0 + Bc > p.N_k || (p.causal && c0 + Bc > p.keys_seen(r0));
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
      l[r] = fmaf(alpha, l[r], rowsum);
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

}  // namespace fa05::v3
