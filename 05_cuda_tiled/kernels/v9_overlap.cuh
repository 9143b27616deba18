// v9: v7 with the softmax overlapped with the tensor cores' work (FlashAttention-3, Shah et al. 2024,
// Section 3.2, "intra-warpgroup overlapping of GEMMs and softmax"). Read it beside v7_wgmma.cuh:
// the tile layouts, the copy helpers, both products and the softmax arithmetic are v7's; what
// changes is the order in which a warpgroup issues them (and with it when V_j is copied). The
// steps are small lambdas so that block 0, the loop and the last P V share them.
//
//   v7, block j                                     v9, iteration j
//   S_j = Q K_j^T, wait                             rescale O by alpha_{j-1}; issue S_j = Q K_j^T,
//   softmax of S_j (tensor cores idle)                then O += P_{j-1} V_{j-1}
//   O += P_j V_j, wait (special-function and        wait for S_j only; softmax of S_j while the
//   FP32 units idle)                                  tensor cores still run P_{j-1} V_{j-1}
//                                                   wait for P V; pack P_j to 16 bits
//
// Why: v7 issues its products and waits for each (wgmma_wait<0>), so within a warpgroup the
// tensor cores and the exp/FFMA units take turns; ncu found v7 issuing in only 41 % of cycles at
// N = 8192, d = 128 (lab notebook, "Small N at d = 128"), with one block of two warpgroups per SM to hide
// the waits. Here P V of the previous block is in flight while this block's softmax runs. The
// price: registers (P_{j-1} in 16 bits and P_j in fp32 are both live through the softmax: about
// 225 a thread at d = 128 against v7's 207), block 0 peeled off before the loop, the last P V after it.
//
// ptxas decides whether the overlap happens: when, between a wgmma's wgmma.fence and the wait
// that ends it, another instruction writes a register the wgmma reads (its A or its
// accumulators) or reads its accumulators, it serialises the wgmma and only says so in an
// info message (C7513/C7514 in the -v output; gpu_check.sh keeps them in ptxas.txt). So O is
// rescaled before the fence, not between the two issues, and P_j is packed into a only after the
// P V that reads a has finished (packing into a second array and copying it over a also drew
// C7513).
//
// And ptxas may wait earlier than the source says, without a message: in the SASS (CUDA 13.0) the
// wait for P V (wgmma_wait<0>) sits before the softmax's first exp, not after its last, so both
// products run as one batch and the softmax waits for them (lab notebook, v9; tools/sass_overlap.py
// counts the exps between the two waits: 0 here). Moving the wait where ptxas keeps it, tried
// on v11, was measured slower (lab notebook, "Tried after v11").
//
// The online softmax invariant (FA2 Algorithm 1, lines 9-10), shifted by one block: at the start of
// iteration j, O holds sum_{k < j-1} P~_k V_k relative to m_{j-2}, and P~_{j-1} (relative to
// m_{j-1}) waits in registers. O *= alpha_{j-1} = exp(m_{j-2} - m_{j-1}) first makes O relative
// to m_{j-1}; then O += P~_{j-1} V_{j-1} is issued; the softmax of S_j gives m_j, alpha_j and
// P~_j relative to m_j. The sum l is rescaled at once, as in v7. v7 does the same operations on
// the same values in the same order (rescale O, then add P V): only when they are issued changes.
//
// Copies: at iteration j, K_{j+1} and V_j are copied (V one block behind K, since P V is). Both
// were issued one iteration before they are needed, as in v7; two buffers each still suffice:
// K_{j+1} overwrites K_{j-1} (its S finished in iteration j-1) and V_j overwrites V_{j-2} (its P V
// finished in iteration j-1).
//
// Compiles for what v7 does (T = __half or __nv_bfloat16, D = 64 or 128, kWarps a multiple of 4,
// Bc = 64 or 128); only on sm_90a (elsewhere the runner runs v5).
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"
#include "v7_wgmma.cuh"  // smem_bytes, the swizzle and the two copies

namespace fa05::v9 {

using v7::copy_tile_async;
using v7::copy_tile_swizzled;
using v7::kPitch;
using v7::smem_bytes;

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

  // Start the copies of Q_i (line 4) and of K_0 (line 7 for j = 0); V_0 follows in iteration 0.
  const int64_t keys_needed = p.keys_seen(r0 + br - 1);  // causal: key blocks past it are skipped
  const int64_t Tc = (keys_needed + Bc - 1) / Bc;       // key blocks this query block sees
  if (Tc > 0) copy_tile_async<D, Br, kThreads>(Qi, Q + p.q_offset(b, h, r0), br);  // else no copy is left in flight
  if (Tc > 0) copy_tile_swizzled<D, Bc, kThreads>(Ks, K + p.kv_offset(b, h, 0), int(min(int64_t(Bc), p.N_k)));
  ptx::cp_async_commit();

  // O_i, m, l on chip (line 5), in registers. This lane holds two rows of the warp's 16:
  // row g (index 0) and row g + 8 (index 1); o[n] is the 16 x 8 fragment of columns 8n .. 8n+7.
  float o[D / 8][4] = {};
  float m2[2] = {neg_inf, neg_inf};  // the row max so far times c (v7)
  float l[2] = {0.f, 0.f};  // this lane's share of the row sum; the quad's 4 shares add up at the end
  float alpha[2] = {1.f, 1.f};       // exp(m_{j-1} - m_j) per row: O's rescaling, applied one block late
  uint32_t a[Bc / 16][4];            // P~ of the last softmax as P V's A registers (a[k]: keys 16k .. 16k+15)
  float(*o64)[8][4] = reinterpret_cast<float(*)[8][4]>(o);  // o64[sl]: dims 64 sl .. 64 sl + 63

  // The steps of iteration j, each v7's code. Block j's tiles: K_j in buffer j % 2, V_j too.
  // Wait for this thread's copies, make them visible to the tensor cores (v7), then the barrier:
  // everyone's copies have landed and every warp has finished the previous iteration.
  const auto wait_tiles = [&] {
    ptx::cp_async_wait<0>();
    ptx::fence_proxy_async();
    __syncthreads();
  };
  // Line 7, one block ahead: K_{j+1} (over K_{j-1}: its S finished in iteration j-1) and V_j (over
  // V_{j-2}: its P V finished in iteration j-1). Rows past N_k are zero-filled (masked below).
  const auto start_copies = [&](int64_t j) {
    const int64_t c0 = j * Bc;
    if (j + 1 < Tc)
      copy_tile_swizzled<D, Bc, kThreads>(Ks + ((j + 1) % 2) * Bc * D, K + p.kv_offset(b, h, c0 + Bc),
                                          int(min(int64_t(Bc), p.N_k - c0 - Bc)));
    copy_tile_swizzled<D, Bc, kThreads>(Vs + (j % 2) * Bc * D, V + p.kv_offset(b, h, c0), int(min(int64_t(Bc), p.N_k - c0)));
    ptx::cp_async_commit();
  };
  // Q's A registers into q (read again every block: v7 says why).
  const auto load_q = [&](uint32_t(&q)[D / 16][4]) {
    for (int k = 0; k < D / 16; ++k)
      ptx::ldmatrix_x4(q[k], Qi + (warp * 16 + lane % 8 + (lane / 8 % 2) * 8) * P + k * 16 + lane / 16 * 8);
  };
  // O_i = diag(alpha) O_i (line 10, first half: the rescaling of the last softmax).
  const auto rescale_o = [&] {
    for (int r = 0; r < 2; ++r)
      for (int n = 0; n < D / 8; ++n) o[n][2 * r] *= alpha[r], o[n][2 * r + 1] *= alpha[r];
  };
  // Issue S = Q_i K_j^T (line 8) into s, and O_i += P~ V_j from a (line 10, second half): each its
  // own group, committed, not waited for. Both after one wgmma_fence: every register either
  // reads is written before it (ptxas serialises the wgmma otherwise, its info C7513).
  const auto issue_s = [&](float(&s)[Bc / 8][4], const uint32_t(&q)[D / 16][4], int64_t j) {
    const T* Kj = Ks + (j % 2) * Bc * D;
    for (int k = 0; k < D / 16; ++k)
      ptx::wgmma_m64nNk16<T, Bc, 0>(s, q[k], ptx::smem_desc_sw128(Kj + (k / 4) * Bc * 64 + (k % 4) * 16));
    ptx::wgmma_commit();
  };
  const auto issue_pv = [&](int64_t j) {
    const T* Vj = Vs + (j % 2) * Bc * D;
    for (int k = 0; k < Bc / 16; ++k)
      for (int sl = 0; sl < D / 64; ++sl)
        ptx::wgmma_m64nNk16<T, 64, 1>(o64[sl], a[k], ptx::smem_desc_sw128(Vj + sl * Bc * 64 + k * 16 * 64));
    ptx::wgmma_commit();
  };
  const auto pin_pv = [&] {  // O's accumulators and P's A registers, at a fence or a wait (ptx.cuh)
    for (int sl = 0; sl < D / 64; ++sl) ptx::wgmma_pin(o64[sl]);
    for (int k = 0; k < Bc / 16; ++k) ptx::wgmma_pin(a[k]);
  };
  // Masks S_j where needed (v7) and runs the online softmax (line 9, v7's arithmetic): S_j becomes
  // P~_j in place (fp32), m2, l and alpha are updated.
  const auto softmax = [&](float(&s)[Bc / 8][4], int64_t j) {
    const int64_t c0 = j * Bc;
    const bool mask = c0 + Bc > p.N_k || (p.causal && c0 + Bc > p.keys_seen(r0));
    if (mask)
      for (int r = 0; r < 2; ++r) {
        const int seen = int(max(int64_t(0), min(int64_t(Bc), p.keys_seen(r0 + warp * 16 + g + r * 8) - c0)));
        for (int n = 0; n < Bc / 8; ++n)
          for (int e = 2 * r; e < 2 * r + 2; ++e)
            if (n * 8 + 2 * t4 + e % 2 >= seen) s[n][e] = neg_inf;
      }
    for (int r = 0; r < 2; ++r) {
      float mx = neg_inf;  // this block's largest raw score in row r
      for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m2_new = fmaxf(m2[r], mx * c);
      const float m2_use = m2_new == neg_inf ? 0.f : m2_new;  // no -inf - -inf (v1, stage 03)
      alpha[r] = ptx::ex2(m2[r] - m2_use);
      float rowsum = 0.f;
      for (int n = 0; n < Bc / 8; ++n)
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[n][e] = ptx::ex2(fmaf(s[n][e], c, -m2_use));  // S becomes P~ in place: FFMA + MUFU.EX2
          rowsum += s[n][e];
        }
      l[r] = fmaf(alpha[r], l[r], rowsum);
      m2[r] = m2_new;
    }
  };
  // P~ to 16 bits into a, P V's A registers (v7); only once no P V reads a (header: C7513).
  const auto pack_p = [&](const float(&s)[Bc / 8][4]) {
    for (int k = 0; k < Bc / 16; ++k) {
      a[k][0] = ptx::pack2<T>(s[2 * k][0], s[2 * k][1]), a[k][1] = ptx::pack2<T>(s[2 * k][2], s[2 * k][3]);
      a[k][2] = ptx::pack2<T>(s[2 * k + 1][0], s[2 * k + 1][1]);
      a[k][3] = ptx::pack2<T>(s[2 * k + 1][2], s[2 * k + 1][3]);
    }
  };

  if (Tc > 0) {
    // Block 0: S_0 and its softmax, nothing to overlap yet.
    {
      wait_tiles();
      start_copies(0);
      uint32_t q[D / 16][4];
      float s[Bc / 8][4] = {};
      load_q(q);
      ptx::wgmma_pin(s);
      ptx::wgmma_fence();
      issue_s(s, q, 0);
      ptx::wgmma_wait<0>();
      ptx::wgmma_pin(s);
      softmax(s, 0);
      pack_p(s);
    }
    // Blocks 1 .. Tc-1 (line 6): S_j and P~_{j-1} V_{j-1} in flight together; the softmax of S_j
    // runs while the tensor cores finish P V.
    for (int64_t j = 1; j < Tc; ++j) {
      wait_tiles();  // K_j and V_{j-1} are in
      start_copies(j);
      uint32_t q[D / 16][4];
      float s[Bc / 8][4] = {};
      load_q(q);
      rescale_o();  // by alpha of block j-1: O_i relative to m_{j-1}, as P~_{j-1} is
      ptx::wgmma_pin(s);
      pin_pv();
      ptx::wgmma_fence();
      issue_s(s, q, j);
      issue_pv(j - 1);
      // Wait for S_j only: wgmma groups finish in order, so "at most 1 in flight" leaves P V's.
      ptx::wgmma_wait<1>();
      ptx::wgmma_pin(s);
      softmax(s, j);
      ptx::wgmma_wait<0>();
      pin_pv();  // P V's A registers live until it is done
      pack_p(s);
    }
    // The last block's P V, after the loop.
    wait_tiles();  // V_{Tc-1} is in
    rescale_o();
    pin_pv();
    ptx::wgmma_fence();
    issue_pv(Tc - 1);
    ptx::wgmma_wait<0>();
    pin_pv();
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

}  // namespace fa05::v9
