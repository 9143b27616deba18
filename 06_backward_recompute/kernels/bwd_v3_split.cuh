// Stage 06 on the GPU, v3: gpu_v2 with P^T and dS^T passed through shared memory, so that the
// products before it (S^T, dP^T) and after it (dV_j, dK_j) can split the work among the warps in
// two different ways. Read it beside bwd_v2_mma.cuh: the loads, the mask, the softmax and the dQ
// step are v2's; what changes is who owns what.
//
// Why: ncu on v2 (d = 128) shows the shared-memory pipe at 79% and the tensor pipe at 35%: the
// kernel waits on ldmatrix, not on the matrix units. A warp that owns 16 keys reloads all of Q_i
// and dO_i for every 16 x 8 product it makes; owning 32 keys (two mma row tiles) would halve
// those loads, as v2's 32-keys-a-warp shape does at d = 64. At d = 128 it cannot: dK_j and dV_j
// of 32 keys x 128 dims are 256 registers a lane. The way out is to stop tying the two halves of
// the step to one tiling:
//
//   v2: warp w owns keys [16 kM w, +16 kM) for everything    v3 (8 warps, Bc = 128 keys)
//   S^T, dP^T: 16 kM keys x all 64 queries                  32 keys x 32 queries (a 4 x 2 grid)
//   P^T, dS^T: stay in registers, packed into A operands    written to shared memory (16 bits)
//   dV_j, dK_j: 16 kM keys x all D dims (kM D registers)      32 keys x D/2 dims (a 4 x 2 grid):
//                                                            128 registers at D = 128
// Every A fragment (K_j, V_j, then P^T, dS^T) and every B fragment (Q_i, dO_i) a warp loads now
// serves two mma tiles: per 16 x 8 x 16 product, S^T and dP^T load 0.5 ldmatrix.x4 (v2 at
// d = 128: 0.75), dV_j and dK_j 0.375 (v2: 0.5). The price: P^T is stored in shared memory and read back
// (dS^T was already, for dQ), and one more barrier per step.
//
// Layout, dQacc and supported types as v2; always 8 warps. D = 32, 64, 96, 128 (Bc = 128), 192
// and 256 (Bc = 64: see Shape). kStages Q_i / dO_i buffers: 2 (the next step's tiles copied while
// this one computes) or 1 (copy, then compute: the shared memory of D >= 128 on an A100's 163 KiB).
// The window and the softcap (docs/math.md section 8) as v2's: the steps over the query blocks
// that see the key block, the band's mask on the tiles it crosses, dS^T times the slope.
//
// A packed variable-length batch (common/varlen.hpp; pk.cu_q set), as stage 05's v13 reads one:
// the grid is the longest sequence's (b, kv head, key block) tasks; each block reads its
// sequence's offsets (fa05::packed_span), asks the problem as that sequence sees it (sp: its N_q,
// N_k, so causal and the window follow them), and addresses token-major rows: Q, dO, dQacc
// [total_q, H, d], K, V, dK, dV [total_k, H_kv, d], LSE and D [H, total_q]. A key block past its
// sequence's last key returns at once. Compiled apart (kPacked), so that the plain kernel stays the
// code measured: as one kernel with a runtime test, ptxas spilled 24 bytes at D = 96 and 48 in the
// deterministic D = 256 (CUDA 13.0). Not with the deterministic variant (runner_bwd refuses it).
#pragma once
#include <cstdint>
#include <type_traits>

#include "bwd_v2_mma.cuh"

namespace fa06::bwd_v3 {

namespace ptx = fa05::ptx;
using bwd_v2::Br;
using bwd_v2::kPitch;
using bwd_v2::kPitchS;

constexpr int kWarps = 8, kThreads = 32 * kWarps;

// Who owns what at head dim D. Both tilings put kKeyWarps warps along the keys, 32 keys each, and
// kSplit along the other side: kQw queries each in S^T and dP^T, kDw head dims each in dV_j and
// dK_j. The accumulators dK_j, dV_j of a block take 2 Bc D floats, 2 Bc D / 256 registers a lane
// whatever the tiling: 128 keys a block up to D = 128 (128 registers at D = 128), 64 keys above
// it, with the head dims split four ways (D = 192: 96 registers, D = 256: 128; 128 keys there
// would need 192 and 256: ptxas spills).
template <int D>
struct Shape {
  static constexpr int Bc = D <= 128 ? 128 : 64;
  static constexpr int kKeyWarps = Bc / 32, kSplit = kWarps / kKeyWarps;
  static constexpr int kQw = Br / kSplit, kDw = D / kSplit;
  static_assert(D % 16 == 0 && kDw % 16 == 0, "a warp's head dims must make whole 16-dim pairs");
};

// v2's tiles (with kStages buffers of Q_i, dO_i, LSE_i, D_i) plus P^T (Bc x Br, pitch Br + 8):
// 173 KiB at D = 128 with two stages, 139 KiB with one; D = 256: 217 KiB and 151 KiB.
template <int D, int kStages = 2>
constexpr int smem_bytes() {
  constexpr int Bc = Shape<D>::Bc;
  return (2 * Bc + 2 * kStages * Br) * kPitch<D> * 2 + 2 * Bc * kPitchS * 2 + 2 * kStages * Br * 4;
}

template <class T, int D, bool kDeterministic, int kStages = 2, bool kPacked = false>
__global__ void __launch_bounds__(kThreads, 1)
dk_dv_dq_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                const T* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ Dv,
                T* __restrict__ dK, T* __restrict__ dV, float* __restrict__ dQacc, int* __restrict__ dq_turn,
                const fa::AttnProblem p, const float scale, const int64_t Tc, const fa05::Packed pk) {
  constexpr int P = kPitch<D>, PS = kPitchS, Bc = Shape<D>::Bc, kKeyWarps = Shape<D>::kKeyWarps;
  constexpr int kQw = Shape<D>::kQw, kDw = Shape<D>::kDw;
  static_assert(kStages == 1 || kStages == 2, "one or two buffers of Q_i, dO_i");
  extern __shared__ __align__(16) unsigned char sram[];
  T* Kj = reinterpret_cast<T*>(sram);                   // (Bc, P)
  T* Vj = Kj + Bc * P;                                  // (Bc, P)
  T* Qs = Vj + Bc * P;                                  // (kStages, Br, P): Q_i of step s in buffer s % kStages
  T* dOs = Qs + kStages * Br * P;                       // (kStages, Br, P)
  T* dSt = dOs + kStages * Br * P;                      // (Bc, PS): dS^T of the step
  float* Ls = reinterpret_cast<float*>(dSt + Bc * PS);  // (kStages, Br): LSE_i
  float* Ds = Ls + kStages * Br;                        // (kStages, Br): D_i
  T* Pt = reinterpret_cast<T*>(Ds + kStages * Br);      // (Bc, PS): P^T of the step
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;        // fragment coordinates (ptx.cuh)
  const int kr0 = warp % kKeyWarps * 32;        // this warp's 32 keys, in both tilings
  const int qa0 = warp / kKeyWarps * kQw;       // its kQw queries in S^T, dP^T
  const int db0 = warp / kKeyWarps * kDw;       // its kDw dims in dV_j, dK_j
  const bool cap = p.softcap > 0.f;  // (8.2)

  // The task, the steps and their loads: as v2.
  const int64_t Tr = (p.N_q + Br - 1) / Br;
  const int64_t t = bwd_v2::task_index<kDeterministic>(dq_turn, p.B * p.H * Tr), G = p.H / p.H_kv;
  const int64_t b = t / (p.H_kv * Tc), hk = t / Tc % p.H_kv, j = t % Tc, c0 = j * Bc;
  // The problem as sequence b sees it, and where its rows are: [B, H, N, d] or token-major.
  fa::AttnProblem sp = p;
  int q0 = 0, k0 = 0;
  if constexpr (kPacked) {
    int nq, nk;
    fa05::packed_span(pk.cu_q, b, pk.total_q, int(p.N_q), q0, nq);
    fa05::packed_span(pk.cu_k, b, pk.total_k, int(p.N_k), k0, nk);
    sp.N_q = nq, sp.N_k = nk;
  }
  const int64_t q_pitch = kPacked ? p.H * p.d : p.d, kv_pitch = kPacked ? p.H_kv * p.d : p.d;
  const auto q_at = [&](int64_t h, int64_t r) { return kPacked ? ((q0 + r) * p.H + h) * p.d : p.q_offset(b, h, r); };
  const auto kv_at = [&](int64_t c) { return kPacked ? ((k0 + c) * p.H_kv + hk) * p.d : p.kv_offset(b, hk * G, c); };
  const auto lse_at = [&](int64_t h, int64_t r) { return kPacked ? h * pk.total_q + q0 + r : p.lse_offset(b, h, r); };
  const int bc = int(min(int64_t(Bc), sp.N_k - c0));
  if (bc <= 0) return;  // packed: past the sequence's last key (a plain problem's blocks all have keys)
  const QueryBlocks qb = query_blocks(sp, c0, bc, Br);
  const int64_t i_first = qb.first;
  const int64_t blocks_per_head = max(int64_t(0), qb.last - i_first), steps = G * blocks_per_head;
  auto step_head = [&](int64_t s) { return hk * G + s / blocks_per_head; };
  auto step_row0 = [&](int64_t s) { return (i_first + s % blocks_per_head) * Br; };
  auto load_step = [&](int64_t s) {
    const int64_t h = step_head(s), r0 = step_row0(s);
    const int br = int(min(int64_t(Br), sp.N_q - r0)), buf = int(s % kStages);
    bwd_v2::copy_rows_async<D, Br, kThreads>(Qs + buf * Br * P, Q + q_at(h, r0), br, q_pitch);
    bwd_v2::copy_rows_async<D, Br, kThreads>(dOs + buf * Br * P, dO + q_at(h, r0), br, q_pitch);
    for (int r = threadIdx.x; r < Br; r += kThreads) {
      const int64_t at = lse_at(h, r0 + min(r, br - 1));
      ptx::cp_async_4(Ls + buf * Br + r, LSE + at, r < br);
      ptx::cp_async_4(Ds + buf * Br + r, Dv + at, r < br);
    }
  };

  bwd_v2::copy_rows_async<D, Bc, kThreads>(Kj, K + kv_at(c0), bc, kv_pitch);
  bwd_v2::copy_rows_async<D, Bc, kThreads>(Vj, V + kv_at(c0), bc, kv_pitch);
  if (kStages == 2 && steps > 0) load_step(0);
  ptx::cp_async_commit();
  // dK_j, dV_j (line 7) in the second tiling: row tile m holds keys kr0 + 16m + g (+ 8), dk[m][n]
  // the fragment of dims db0 + 8n .. +7.
  float dk[2][kDw / 8][4] = {}, dv[2][kDw / 8][4] = {};

  for (int64_t s = 0; s < steps; ++s) {  // line 8
    if constexpr (kStages == 2) {
      ptx::cp_async_wait<0>();
      __syncthreads();  // step s's tiles are in; everyone is done with step s-1's (and P^T, dS^T)
      if (s + 1 < steps) load_step(s + 1);
      ptx::cp_async_commit();
    } else {
      __syncthreads();  // everyone is done with step s-1's tiles (and P^T, dS^T): refill the one buffer
      load_step(s);
      ptx::cp_async_commit();
      ptx::cp_async_wait<0>();
      __syncthreads();  // step s's tiles are in
    }
    const int64_t h = step_head(s), r0 = step_row0(s);
    const int br = int(min(int64_t(Br), sp.N_q - r0)), buf = int(s % kStages);
    const T* Qi = Qs + buf * Br * P;
    const T* dOi = dOs + buf * Br * P;
    const float* Li = Ls + buf * Br;
    const float* Di = Ds + buf * Br;

    {  // First tiling: S^T and dP^T (lines 10, 13) for keys kr0 .. +31 x queries qa0 .. +kQw-1.
      float st[2][kQw / 8][4] = {}, dpt[2][kQw / 8][4] = {};
      for (int k = 0; k < D / 16; ++k) {
        uint32_t kf[2][4], vf[2][4];  // lane -> key kr0 + 16m + lane % 8 + 8 ((lane / 8) % 2), dims 16k + 8 (lane / 16)
        for (int m = 0; m < 2; ++m) {
          const int a_at = (kr0 + m * 16 + lane % 8 + (lane / 8 % 2) * 8) * P + k * 16 + lane / 16 * 8;
          ptx::ldmatrix_x4(kf[m], Kj + a_at);
          ptx::ldmatrix_x4(vf[m], Vj + a_at);
        }
        for (int n = 0; n < kQw / 8; n += 2) {
          uint32_t qf[4], of[4];  // lane -> query qa0 + 8n + 8 (lane / 16) + lane % 8, dims 16k + 8 ((lane / 8) % 2)
          const int b_at = (qa0 + n * 8 + lane / 16 * 8 + lane % 8) * P + k * 16 + (lane / 8 % 2) * 8;
          ptx::ldmatrix_x4(qf, Qi + b_at);
          ptx::ldmatrix_x4(of, dOi + b_at);
          for (int m = 0; m < 2; ++m) {
            ptx::mma_m16n8k16<T>(st[m][n], kf[m], qf[0], qf[1]);
            ptx::mma_m16n8k16<T>(st[m][n + 1], kf[m], qf[2], qf[3]);
            ptx::mma_m16n8k16<T>(dpt[m][n], vf[m], of[0], of[1]);
            ptx::mma_m16n8k16<T>(dpt[m][n + 1], vf[m], of[2], of[3]);
          }
        }
      }
      // Mask, softcap, P^T = exp(S^T - LSE_i), dS^T = P^T (dP^T - D_i) (lines 11, 14; softcap:
      // times its slope): as v2.
      const BandTile band = band_tile(sp, r0, c0, Br, Bc);
      const bool mask = c0 + Bc > sp.N_k || r0 + Br > sp.N_q || band.crosses(Br, Bc);
      if (mask) {
        for (int m = 0; m < 2; ++m)
          for (int n = 0; n < kQw / 8; ++n)
            for (int e = 0; e < 4; ++e) {
              const int kr = kr0 + m * 16 + g + e / 2 * 8, qc = qa0 + n * 8 + 2 * t4 + e % 2;
              if (kr >= bc || qc >= br || !band.sees(kr - qc)) st[m][n][e] = -INFINITY;
            }
      }
      // The loop is written once and compiled twice, for the two values of the runtime flag cap:
      // without a softcap the kernel runs the loop it ran before it had one (with one loop that
      // tests the flag, ptxas -v showed new spills in gpu_v2 at d = 64 and gpu_v3 at d = 128).
      // exp(scale x) = 2^(c x) with c = scale log2(e); softcap: S is capped and scaled, c = log2(e).
      const auto softmax = [&](auto capped) {
        constexpr bool kCap = decltype(capped)::value;
        const float c = (kCap ? 1.f : scale) * 1.4426950408889634f;
        for (int n = 0; n < kQw / 8; ++n) {
          const float2 lse = *reinterpret_cast<const float2*>(Li + qa0 + n * 8 + 2 * t4);
          const float2 dd = *reinterpret_cast<const float2*>(Di + qa0 + n * 8 + 2 * t4);
          const float l2[2] = {lse.x == -INFINITY ? INFINITY : lse.x * 1.4426950408889634f,
                               lse.y == -INFINITY ? INFINITY : lse.y * 1.4426950408889634f};
          for (int m = 0; m < 2; ++m)
            for (int e = 0; e < 4; ++e) {
              const float x = st[m][n][e];  // softcap (8.2): S = c tanh(scale x / c), masked (-inf) kept
              const float S = kCap && x != -INFINITY ? softcap(scale * x, p.softcap) : x;
              st[m][n][e] = ptx::ex2(fmaf(S, c, -l2[e % 2]));
              dpt[m][n][e] = st[m][n][e] * (dpt[m][n][e] - (e % 2 ? dd.y : dd.x));
              if constexpr (kCap) dpt[m][n][e] *= softcap_slope(S, 1.f / p.softcap);
            }
        }
      };
      if (cap) softmax(std::true_type{});
      else softmax(std::false_type{});
      // P^T and dS^T to shared memory in 16 bits (row = key; the pitch Br + 8 puts the 32 lanes
      // of each 4-byte store in 32 different banks).
      for (int m = 0; m < 2; ++m)
        for (int n = 0; n < kQw / 8; ++n)
          for (int r = 0; r < 2; ++r) {
            const int at = (kr0 + m * 16 + g + r * 8) * PS + qa0 + n * 8 + 2 * t4;
            *reinterpret_cast<uint32_t*>(Pt + at) = ptx::pack2<T>(st[m][n][2 * r], st[m][n][2 * r + 1]);
            *reinterpret_cast<uint32_t*>(dSt + at) = ptx::pack2<T>(dpt[m][n][2 * r], dpt[m][n][2 * r + 1]);
          }
    }
    __syncthreads();  // all of P^T and dS^T are in shared memory

    // Second tiling: dV_j += P^T dO_i (line 12), dK_j += dS^T Q_i (line 16) for keys kr0 .. +31
    // x dims db0 .. +kDw-1, summed over the 64 queries. A = P^T, dS^T (row-major [key][query]) by
    // a plain ldmatrix, as K_j in the first tiling; B = dO_i, Q_i transposed, as in v2.
    for (int k = 0; k < Br / 16; ++k) {
      uint32_t pa[2][4], sa[2][4];  // lane -> key kr0 + 16m + lane % 8 + 8 ((lane / 8) % 2), queries 16k + 8 (lane / 16)
      for (int m = 0; m < 2; ++m) {
        const int a_at = (kr0 + m * 16 + lane % 8 + (lane / 8 % 2) * 8) * PS + k * 16 + lane / 16 * 8;
        ptx::ldmatrix_x4(pa[m], Pt + a_at);
        ptx::ldmatrix_x4(sa[m], dSt + a_at);
      }
      for (int n = 0; n < kDw / 8; n += 2) {
        uint32_t of[4], qf[4];  // lane -> query 16k + 8 ((lane / 8) % 2) + lane % 8, dims db0 + 8n + 8 (lane / 16)
        const int b_at = (k * 16 + (lane / 8 % 2) * 8 + lane % 8) * P + db0 + n * 8 + lane / 16 * 8;
        ptx::ldmatrix_x4_trans(of, dOi + b_at);
        ptx::ldmatrix_x4_trans(qf, Qi + b_at);
        for (int m = 0; m < 2; ++m) {
          ptx::mma_m16n8k16<T>(dv[m][n], pa[m], of[0], of[1]);
          ptx::mma_m16n8k16<T>(dv[m][n + 1], pa[m], of[2], of[3]);
          ptx::mma_m16n8k16<T>(dk[m][n], sa[m], qf[0], qf[1]);
          ptx::mma_m16n8k16<T>(dk[m][n + 1], sa[m], qf[2], qf[3]);
        }
      }
    }

    // dQ_i += dS K_j (line 15): v2's step, unchanged (it only reads dS^T and K_j, so it needs no
    // barrier after the second tiling).
    bwd_v2::add_dq<T, D, kWarps, Bc, kDeterministic>(dSt, Kj, dQacc, dq_turn, p, b, h, r0, br, Tr,
                                                     j - first_key_block(sp, r0, Bc), q_at(h, r0), q_pitch);
  }

  // dK_j = scale dK_j, dV_j to HBM, once (line 18), from the second tiling.
  for (int m = 0; m < 2; ++m)
    for (int r = 0; r < 2; ++r) {
      const int key = kr0 + m * 16 + g + r * 8;
      if (key >= bc) continue;
      T* dk_out = dK + kv_at(c0 + key) + db0 + 2 * t4;
      T* dv_out = dV + kv_at(c0 + key) + db0 + 2 * t4;
      for (int n = 0; n < kDw / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dk_out + n * 8) =
            ptx::pack2<T>(scale * dk[m][n][2 * r], scale * dk[m][n][2 * r + 1]);
        *reinterpret_cast<uint32_t*>(dv_out + n * 8) = ptx::pack2<T>(dv[m][n][2 * r], dv[m][n][2 * r + 1]);
      }
    }
}

}  // namespace fa06::bwd_v3
