// v1: stage 04's loop in GPU shared memory, scalar fp32. The GPU lesson's first page.
//
// Read it beside ../../04_tiled_cpu/tiled.hpp: same names (Br, Bc, Tr, Q_i, K_j, V_j, S, m, l,
// O_i), same loop, same masking rules (stage 04 stores K_j transposed for its SIMD micro-kernels;
// here K_j keeps its rows). What changes is WHERE things live:
//
//   stage 04 (CPU)                              v1 (GPU)
//   one OpenMP task = (batch, head, q block)    one thread block = (batch, head, q block)
//   the "SRAM": per-thread std::vectors in L2   the SRAM: the block's shared memory (on chip)
//   one core does each step                     128 threads share each step, then __syncthreads()
//   O_i, m, l in the task's buffers             O_i, m, l in shared memory
//
// Each step of the key/value loop is a loop over the elements of a tile, split across the
// block's threads (element e goes to thread e % 128); a barrier separates two steps, because a
// step reads what other threads wrote in the step before. Nothing here is tuned: no tensor
// cores, no registers holding tiles, one thread per row for the softmax. v2 and later change
// that, one idea at a time; v1 is the correct, readable baseline they are all checked against.
//
// Algorithm: Dao 2023 (FlashAttention-2), Algorithm 1, with Dao et al. 2022 (FlashAttention),
// Algorithm 1's block sizes. "Line n" below is FA2 Alg. 1 unless it says FA1.
//
// Shapes (common/problem.hpp): Q, O [B,H,N_q,d]; K, V [B,H_kv,N_k,d] (query head h reads kv head
// h / (H / H_kv)); LSE [B,H,N_q] float32. T = float, __half or __nv_bfloat16 for Q, K, V, O;
// every value is converted to float32 when it is loaded and all arithmetic is float32.
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"

namespace fa05::v1 {

constexpr int kThreads = 128;  // 4 warps; each step's loops stride over the tile by this much

// The shared-memory layout, in floats. K_j's rows are padded to an odd length (d | 1): in the
// S step consecutive threads read consecutive rows (keys) of K_j at the same column, and with an
// odd pitch 32 consecutive rows fall in 32 different banks. (When Bc is not a multiple of 32, a
// warp spans two rows of S and some of its reads still share a bank: a 2-way conflict.) S rows have pitch
// Bc + 1 for the same reason in the softmax step (one thread per row).
struct Layout {
  int Br, Bc, d;
  __host__ __device__ int k_pitch() const { return d | 1; }
  __host__ __device__ int s_pitch() const { return Bc + 1; }
  __host__ __device__ int64_t floats() const {  // Q_i, K_j, V_j, S, O_i, m, l, alpha
    return int64_t(Br) * d + int64_t(Bc) * k_pitch() + int64_t(Bc) * d + int64_t(Br) * s_pitch() +
           int64_t(Br) * d + 3 * int64_t(Br);
  }
  __host__ __device__ int64_t bytes() const { return floats() * int64_t(sizeof(float)); }
};

template <class T>
__global__ void __launch_bounds__(kThreads)
forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
               T* __restrict__ O, float* __restrict__ LSE, const fa::AttnProblem p, const float scale,
               const Layout L, const int64_t Tr) {
  extern __shared__ float sram[];
  const int Br = L.Br, Bc = L.Bc, d = L.d, kp = L.k_pitch(), sp = L.s_pitch();
  float* Qi = sram;              // (Br, d)
  float* Kj = Qi + Br * d;       // (Bc, kp)   K_j, row c = key c0 + c
  float* Vj = Kj + Bc * kp;      // (Bc, d)
  float* S = Vj + Bc * d;        // (Br, sp)   S_ij, then P~_ij in place
  float* Oi = S + Br * sp;       // (Br, d)    the unnormalised running output
  float* m = Oi + Br * d;        // (Br)       running row max
  float* l = m + Br;             // (Br)       running row sum of exp
  float* alpha = l + Br;         // (Br)       e^(m_old - m_new) of the current step, per row
  const int tid = threadIdx.x;
  const float neg_inf = -INFINITY;

  // This block's task, exactly stage 04's `t`: Q is split into Tr blocks of Br rows (line 1), and
  // this thread block is one iteration i of the loop of line 3, for one (batch, head).
  const int64_t t = blockIdx.x;
  const int64_t b = t / (p.H * Tr), h = t / Tr % p.H, r0 = t % Tr * Br;
  const int br = int(min(int64_t(Br), p.N_q - r0));  // the last block may be ragged

  // Load Q_i into SRAM once; O_i = 0, l_i = 0, m_i = -inf on chip (lines 4, 5). Rows r0 .. r0+br-1
  // of this (b, h) are contiguous, so consecutive threads read consecutive elements (coalesced).
  const T* q = Q + p.q_offset(b, h, r0);
  FA_ZOO(OFFSET_32BIT, q = Q + int32_t(p.q_offset(b, h, r0)));  // zoo: the offset in 32 bits
  for (int e = tid; e < br * d; e += kThreads) {
    Qi[e] = load(q[e]);
    Oi[e] = 0.f;
  }
  for (int r = tid; r < br; r += kThreads) m[r] = neg_inf, l[r] = 0.f;

  // The keys some row of this block sees: from its first row's key_begin to its last row's
  // key_end (both rise with the row: problem.hpp). Causal: key blocks past the last row's diagonal
  // are skipped whole; a sliding window also skips those before the first row's band.
  const int64_t keys_from = p.key_begin(r0), keys_needed = p.key_end(r0 + br - 1);

  for (int64_t c0 = keys_from; c0 < keys_needed; c0 += Bc) {  // line 6: loop over K/V blocks j
    // Only the keys some row of this block sees: a block crossing the diagonal stops at
    // keys_needed, and the last block at N_k (keys_needed <= N_k), so nothing is read past
    // the end of K or V.
    const int bn = int(min(int64_t(Bc), keys_needed - c0));
    FA_ZOO_INSTEAD(MISSING_SYNC, /* no barrier */)  // zoo: the barrier below left out
    __syncthreads();  // every thread is done with the previous K_j, V_j, S before we overwrite them

    // Load K_j, V_j from HBM into SRAM (line 7). bn rows of d elements, contiguous in HBM.
    const T* k = K + p.kv_offset(b, h, c0);
    const T* v = V + p.kv_offset(b, h, c0);
    for (int e = tid; e < bn * d; e += kThreads) {
      Kj[(e / d) * kp + e % d] = load(k[e]);
      Vj[e] = load(v[e]);
    }
    __syncthreads();  // K_j, V_j complete before anyone reads them

    // S_ij = scale * Q_i K_j^T, a br x bn tile, on chip (line 8). One dot product per element.
    // Only a block that an edge of the band crosses needs a mask: its last loaded key is past what
    // the block's first row may see, or its first key before what its last row may see. Masked
    // entries become -inf, which exp() turns into exactly 0. A softcap (math.md (8.2)) replaces
    // each score by c tanh(s / c); the tiled loop does not change.
    const bool crosses = c0 + bn > p.key_end(r0) || c0 < p.key_begin(r0 + br - 1);
    for (int e = tid; e < br * bn; e += kThreads) {
      const int r = e / bn, c = e % bn;
      float s = neg_inf;
      if (!crosses || p.visible(r0 + r, c0 + c)) {
        float acc = 0.f;
        for (int x = 0; x < d; ++x) acc += Qi[r * d + x] * Kj[c * kp + x];
        s = scale * acc;
        // The softcap with CUDA's tanhf (2 ulp): v1 is the float32 reference kernel, held to
        // stage 01's error; the tensor cores' softcap() (about 1e-7 c absolute) failed that rule
        // at c = 50 (1.7e-6 against 1.4e-6, H200 run 1 of 2026-12-03).
        if (p.softcap > 0.f) s = p.softcap * tanhf(s / p.softcap);
      }
      S[r * sp + c] = s;
    }
    __syncthreads();  // S complete

    // Online softmax update, one thread per row (line 9; stage 04's update):
    //   m_new = max(m, rowmax(S)),  P~ = exp(S - m_new),  l = e^(m - m_new) l + rowsum(P~)
    // O_i is rescaled by alpha = e^(m - m_new) in the next step, together with O_i += P~ V_j.
    for (int r = tid; r < br; r += kThreads) {
      float* s = S + r * sp;
      float m_new = m[r];
      for (int c = 0; c < bn; ++c) m_new = fmaxf(m_new, s[c]);
      // A row that has seen no key yet keeps m = -inf; subtract 0 instead, so -inf - -inf never
      // makes a NaN (stage 03's exp_minus()).
      const float m_use = m_new == neg_inf ? 0.f : m_new;
      float rowsum = 0.f;
      for (int c = 0; c < bn; ++c) {
        s[c] = expf(s[c] - m_use);  // S becomes P~ in place
        rowsum += s[c];
      }
      alpha[r] = expf(m[r] - m_use);
      l[r] = alpha[r] * l[r] + rowsum;
      m[r] = m_new;
    }
    __syncthreads();  // P~, alpha complete

    // O_i = diag(alpha) O_i + P~_ij V_j (line 10). Consecutive threads own consecutive columns x
    // of one row, so they read consecutive elements of V_j (no bank conflict) and one P~ value.
    for (int e = tid; e < br * d; e += kThreads) {
      const int r = e / d, x = e % d;
      float acc = alpha[r] * Oi[e];
      for (int c = 0; c < bn; ++c) acc += S[r * sp + c] * Vj[c * d + x];
      Oi[e] = acc;
    }
  }
  __syncthreads();  // O_i, l final

  // Write O_i = diag(l)^-1 O_i and LSE_i = m_i + log(l_i) to HBM, once (lines 12-15). A row that
  // saw no key (causal, N_q > N_k) has l = 0: O = 0 and LSE = -inf, never NaN.
  T* o = O + p.q_offset(b, h, r0);
  for (int e = tid; e < br * d; e += kThreads) {
    const int r = e / d;
    o[e] = store<T>(l[r] == 0.f ? 0.f : Oi[e] / l[r]);
  }
  for (int r = tid; r < br; r += kThreads)
    LSE[p.lse_offset(b, h, r0 + r)] = l[r] == 0.f ? neg_inf : m[r] + logf(l[r]);
}

}  // namespace fa05::v1
