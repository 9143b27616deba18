// Stage 06 on the GPU, v1: backward_tiled.hpp's two passes moved into shared memory, scalar fp32.
// Read it beside ../backward_tiled.hpp (the CPU version, with the derivation at its top) and
// ../../05_cuda_tiled/kernels/v1_smem_fp32.cuh (the forward's first GPU page): the same loops,
// with each task a thread block, its buffers in shared memory, and the threads of the block
// splitting every step (element e of a product goes to thread e % kThreads).
//
//   CPU (backward_tiled.hpp)                        GPU v1 (this file)
//   row_dots: D_i = rowsum(dO_i * O_i)              row_dots_kernel: one warp per row
//   pass 1: an OpenMP task per (b, kv head, j)      dk_dv_kernel: a thread block per (b, kv head, j)
//   pass 2: an OpenMP task per (b, h, i)            dq_kernel: a thread block per (b, h, i)
//   block buffers in each thread's std::vector      the thread block's shared memory
//
// FA2 Algorithm 2 (Dao 2023) is one loop nest with dQ_i accumulated in HBM by atomic additions
// (line 15, Sec. 3.2). Like the CPU version, v1 splits it into two passes instead, so that each
// output element is written by one thread block, in a fixed order: no atomics, and gradients that
// are bit-identical run after run (tested). The price: S and dP are computed twice (7 block
// products instead of 5).
//
// Precision: fp32 arithmetic on chip. T (float, __half or __nv_bfloat16) is the storage type of
// the tensors in HBM: values are converted as they are loaded and as the gradients are written,
// so gpu_v2 (bwd_v2_mma.cuh) can fall back to this file for the head dims it is not compiled for,
// as stage 05's tensor-core forwards fall back to v1. Shapes (common/problem.hpp): Q, O, dO, dQ
// [B,H,N_q,d]; K, V, dK, dV [B,H_kv,N_k,d]; LSE, D [B,H,N_q]. Bottom-right causal, GQA, any N.
//
// Variants (docs/math.md section 8; bwd_variants.hpp): a sliding window runs, per key block, only
// the query blocks whose band reaches it, and per query block only the keys its rows see, as the
// CPU version; only a tile an edge of the band crosses asks visible() pair by pair. A softcap
// recomputes S = c tanh(scale q.k / c) and multiplies dS by its slope 1 - (S/c)^2 (8.2).
#pragma once
#include <cstdint>

#include "bwd_variants.hpp"
#include "kernel_common.cuh"
#include "problem.hpp"

namespace fa06::bwd_v1 {

constexpr int kThreads = 256;

// D_i = rowsum(dO_i * O_i) (FA2 Alg. 2 line 4; FA1 App. B.2: it equals rowsum(P_i * dP_i), the
// one row-wide quantity of the softmax's Jacobian). One warp per row: each lane adds every 32nd
// element, five shuffles add the lanes. D: rows floats. heads > 0: a packed batch's token-major
// rows (row t H + h of O [total_q, H, d]), whose D, as its LSE, is [H, total_q].
template <class T>
__global__ void row_dots_kernel(const T* __restrict__ O, const T* __restrict__ dO, float* __restrict__ D,
                                int64_t rows, int d, int64_t heads = 0) {
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // a whole warp leaves together
  float s = 0.f;
  for (int x = lane; x < d; x += 32) s += fa05::load(dO[row * d + x]) * fa05::load(O[row * d + x]);
  for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (lane == 0) D[heads > 0 ? row % heads * (rows / heads) + row / heads : row] = s;
}

// Shared memory of both passes, in floats. Rows of d elements are stored with pitch d + 1 and
// rows of a score block with pitch Br + 1 or Bc + 1: an odd pitch puts the same column of
// consecutive rows in different banks (the products below read down columns).
struct Layout {
  int Br, Bc, d;
  __host__ __device__ int dp() const { return d + 1; }
  // pass 1: K_j, V_j, dK_j, dV_j (Bc rows), Q_i, dO_i (Br rows), S^T/P^T, dS^T (Bc x Br), LSE_i, D_i
  __host__ __device__ int pass1_floats() const { return (4 * Bc + 2 * Br) * dp() + 2 * Bc * (Br + 1) + 2 * Br; }
  // pass 2: Q_i, dO_i, dQ_i (Br rows), K_j, V_j (Bc rows), S/P, dP/dS (Br x Bc), LSE_i, D_i
  __host__ __device__ int pass2_floats() const { return (3 * Br + 2 * Bc) * dp() + 2 * Br * (Bc + 1) + 2 * Br; }
};

// C = alpha A B^T: C (rows x cols, pitch pc), A (rows x K, pitch pa), B (cols x K, pitch pb), all
// in shared memory. Each element is one thread's dot product over K, in order k = 0, 1, ...
__device__ __forceinline__ void mm_abt(float* C, int pc, const float* A, int pa, const float* B, int pb,
                                       int rows, int cols, int K, float alpha) {
  for (int e = threadIdx.x; e < rows * cols; e += kThreads) {
    const int r = e / cols, c = e % cols;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += A[r * pa + k] * B[c * pb + k];
    C[r * pc + c] = alpha * acc;
  }
}

// C += A B: C (rows x cols, pitch pc), A (rows x K, pitch pa), B (K x cols, pitch pb).
__device__ __forceinline__ void mm_ab_acc(float* C, int pc, const float* A, int pa, const float* B, int pb,
                                          int rows, int cols, int K) {
  for (int e = threadIdx.x; e < rows * cols; e += kThreads) {
    const int r = e / cols, c = e % cols;
    float acc = C[r * pc + c];
    for (int k = 0; k < K; ++k) acc += A[r * pa + k] * B[k * pb + c];
    C[r * pc + c] = acc;
  }
}

// rows x d elements from global (pitch d) into shared memory as floats (pitch d + 1).
template <class T>
__device__ __forceinline__ void load_rows(float* dst, const T* src, int rows, int d) {
  for (int e = threadIdx.x; e < rows * d; e += kThreads) dst[e / d * (d + 1) + e % d] = fa05::load(src[e]);
}

// Pass 1: dK_j and dV_j of one key block (FA2 Alg. 2 lines 5-19 without line 15). Thread block
// t = (b, kv head hk, key block j); Tc key blocks per head.
template <class T>
__global__ void __launch_bounds__(kThreads)
dk_dv_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
             const T* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ D,
             T* __restrict__ dK, T* __restrict__ dV, const fa::AttnProblem p, const float scale,
             const Layout L, const int64_t Tc) {
  extern __shared__ float sm[];
  const int Br = L.Br, Bc = L.Bc, d = L.d, dp = L.dp(), sp = Br + 1;
  float* Kj = sm;                 // (Bc, dp)
  float* Vj = Kj + Bc * dp;       // (Bc, dp)
  float* dKj = Vj + Bc * dp;      // (Bc, dp)
  float* dVj = dKj + Bc * dp;     // (Bc, dp)
  float* Qi = dVj + Bc * dp;      // (Br, dp)
  float* dOi = Qi + Br * dp;      // (Br, dp)
  float* St = dOi + Br * dp;      // (Bc, sp): S^T, then P^T in place
  float* dSt = St + Bc * sp;      // (Bc, sp): dP^T, then dS^T in place
  float* Li = dSt + Bc * sp;      // (Br)
  float* Di = Li + Br;            // (Br)

  const int64_t t = blockIdx.x, G = p.H / p.H_kv;
  const int64_t b = t / (p.H_kv * Tc), hk = t / Tc % p.H_kv, c0 = t % Tc * Bc;
  const int bc = int(min(int64_t(Bc), p.N_k - c0));
  const bool cap = p.softcap > 0.f;  // (8.2): S = c tanh(S / c), dS times its slope

  // Load K_j, V_j (line 6); dK_j = dV_j = 0 on chip (line 7).
  load_rows(Kj, K + p.kv_offset(b, hk * G, c0), bc, d);  // query head hk * G reads kv head hk
  load_rows(Vj, V + p.kv_offset(b, hk * G, c0), bc, d);
  for (int e = threadIdx.x; e < Bc * dp; e += kThreads) dKj[e] = 0.f, dVj[e] = 0.f;
  // Only the query blocks that see some of these keys (causal: none above the diagonal; a window:
  // none whose band has passed them, bwd_variants.hpp); the others are skipped whole.
  const QueryBlocks qb = query_blocks(p, c0, bc, Br);

  for (int64_t h = hk * G; h < (hk + 1) * G; ++h)                             // GQA: the heads sharing hk
    for (int64_t r0 = qb.first * Br; r0 < qb.last * Br; r0 += Br) {  // line 8: the query blocks
      const int br = int(min(int64_t(Br), p.N_q - r0));
      __syncthreads();  // everyone is done with the previous Q_i, dO_i, dS^T
      // Load Q_i, dO_i, LSE_i, D_i (line 9). A row that sees no key has LSE = -inf; +inf makes
      // its P exactly 0 below.
      load_rows(Qi, Q + p.q_offset(b, h, r0), br, d);
      load_rows(dOi, dO + p.q_offset(b, h, r0), br, d);
      for (int r = threadIdx.x; r < br; r += kThreads) {
        const float lse = LSE[p.lse_offset(b, h, r0 + r)];
        Li[r] = lse == -INFINITY ? INFINITY : lse;
        Di[r] = D[p.lse_offset(b, h, r0 + r)];
      }
      __syncthreads();
      // S^T = scale K_j Q_i^T (line 10) and dP^T = V_j dO_i^T (line 13), bc x br (keys down,
      // queries across): independent, one phase.
      mm_abt(St, sp, Kj, dp, Qi, dp, bc, br, d, scale);
      mm_abt(dSt, sp, Vj, dp, dOi, dp, bc, br, d, 1.f);
      __syncthreads();
      // P^T = exp(S^T - LSE_i) (line 11), 0 where the mask hides the key from the query, and
      // dS^T = P^T * (dP^T - D_i) (line 14). Only a tile an edge of the band crosses asks
      // visible(): its last key is past what its first query sees (the diagonal), or its first
      // key before what its last query sees (the window's left edge). Softcap: S = c tanh(S / c)
      // as the forward, and dS times the slope 1 - (S/c)^2 (8.2).
      const bool crosses = c0 + bc > p.key_end(r0) || p.key_begin(r0 + br - 1) > c0;
      for (int e = threadIdx.x; e < bc * br; e += kThreads) {
        const int c = e / br, r = e % br;
        float P = 0.f, slope = 1.f;
        if (!crosses || p.visible(r0 + r, c0 + c)) {
          float S = St[c * sp + r];
          if (cap) S = softcap(S, p.softcap), slope = softcap_slope(S, 1.f / p.softcap);
          P = expf(S - Li[r]);
        }
        St[c * sp + r] = P;
        dSt[c * sp + r] = P * (dSt[c * sp + r] - Di[r]);
        if (cap) dSt[c * sp + r] *= slope;
      }
      __syncthreads();
      // dV_j += P^T dO_i (line 12) and dK_j += dS^T Q_i (line 16; the factor scale is applied
      // once, at the write): independent, one phase.
      mm_ab_acc(dVj, dp, St, sp, dOi, dp, bc, d, br);
      mm_ab_acc(dKj, dp, dSt, sp, Qi, dp, bc, d, br);
    }
  __syncthreads();
  // Write dK_j, dV_j to HBM, once (line 18).
  T* dk = dK + p.kv_offset(b, hk * G, c0);
  T* dv = dV + p.kv_offset(b, hk * G, c0);
  for (int e = threadIdx.x; e < bc * d; e += kThreads) {
    dk[e] = fa05::store<T>(scale * dKj[e / d * dp + e % d]);
    dv[e] = fa05::store<T>(dVj[e / d * dp + e % d]);
  }
}

// Pass 2: dQ_i of one query block (FA2 Alg. 2 line 15, in a fixed order instead of atomics).
// Thread block t = (b, h, query block i); Tr query blocks per head.
template <class T>
__global__ void __launch_bounds__(kThreads)
dq_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
          const T* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ D,
          T* __restrict__ dQ, const fa::AttnProblem p, const float scale, const Layout L, const int64_t Tr) {
  extern __shared__ float sm[];
  const int Br = L.Br, Bc = L.Bc, d = L.d, dp = L.dp(), sp = Bc + 1;
  float* Qi = sm;                 // (Br, dp)
  float* dOi = Qi + Br * dp;      // (Br, dp)
  float* dQi = dOi + Br * dp;     // (Br, dp)
  float* Kj = dQi + Br * dp;      // (Bc, dp)
  float* Vj = Kj + Bc * dp;       // (Bc, dp)
  float* S = Vj + Bc * dp;        // (Br, sp): S, then P in place
  float* dS = S + Br * sp;        // (Br, sp): dP, then dS in place
  float* Li = dS + Br * sp;       // (Br)
  float* Di = Li + Br;            // (Br)

  const int64_t t = blockIdx.x;
  const int64_t b = t / (p.H * Tr), h = t / Tr % p.H, r0 = t % Tr * Br;
  const int br = int(min(int64_t(Br), p.N_q - r0));
  load_rows(Qi, Q + p.q_offset(b, h, r0), br, d);
  load_rows(dOi, dO + p.q_offset(b, h, r0), br, d);
  for (int e = threadIdx.x; e < Br * dp; e += kThreads) dQi[e] = 0.f;
  for (int r = threadIdx.x; r < br; r += kThreads) {
    const float lse = LSE[p.lse_offset(b, h, r0 + r)];
    Li[r] = lse == -INFINITY ? INFINITY : lse;
    Di[r] = D[p.lse_offset(b, h, r0 + r)];
  }
  // As the forward: the keys some row of the block sees, and no others (causal: key blocks past
  // the last row's diagonal are skipped; a window: also those before the first row's band).
  const int64_t keys_from = p.key_begin(r0), keys_needed = p.key_end(r0 + br - 1);
  const bool cap = p.softcap > 0.f;

  for (int64_t c0 = keys_from; c0 < keys_needed; c0 += Bc) {
    const int bn = int(min(int64_t(Bc), keys_needed - c0));
    __syncthreads();  // everyone is done with the previous K_j (and Q_i ... are loaded)
    load_rows(Kj, K + p.kv_offset(b, h, c0), bn, d);
    load_rows(Vj, V + p.kv_offset(b, h, c0), bn, d);
    __syncthreads();
    // S = scale Q_i K_j^T and dP = dO_i V_j^T (lines 10 and 13, recomputed), br x bn.
    mm_abt(S, sp, Qi, dp, Kj, dp, br, bn, d, scale);
    mm_abt(dS, sp, dOi, dp, Vj, dp, br, bn, d, 1.f);
    __syncthreads();
    // P = exp(S - LSE_i) (0 where hidden), dS = P * (dP - D_i) (lines 11 and 14); the mask and
    // the softcap as in pass 1.
    const bool crosses = c0 + bn > p.key_end(r0) || p.key_begin(r0 + br - 1) > c0;
    for (int e = threadIdx.x; e < br * bn; e += kThreads) {
      const int r = e / bn, c = e % bn;
      float P = 0.f, slope = 1.f;
      if (!crosses || p.visible(r0 + r, c0 + c)) {
        float Sc = S[r * sp + c];
        if (cap) Sc = softcap(Sc, p.softcap), slope = softcap_slope(Sc, 1.f / p.softcap);
        P = expf(Sc - Li[r]);
      }
      dS[r * sp + c] = P * (dS[r * sp + c] - Di[r]);
      if (cap) dS[r * sp + c] *= slope;
    }
    __syncthreads();
    // dQ_i += dS K_j (line 15; scale applied at the write).
    mm_ab_acc(dQi, dp, dS, sp, Kj, dp, br, d, bn);
  }
  __syncthreads();
  T* dq = dQ + p.q_offset(b, h, r0);
  for (int e = threadIdx.x; e < br * d; e += kThreads) dq[e] = fa05::store<T>(scale * dQi[e / d * dp + e % d]);
}

}  // namespace fa06::bwd_v1
