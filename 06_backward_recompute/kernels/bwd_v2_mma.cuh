// Stage 06 on the GPU, v2: FlashAttention-2's backward (Dao 2023, Algorithm 2) on the tensor
// cores, fp16 / bf16 in HBM, fp32 accumulation. Read it beside bwd_v1_smem.cuh (the same algebra,
// scalar) and stage 05's v4_exp2.cuh (where the fragments, ldmatrix, cp.async and exp2 tricks
// used here are introduced one at a time).
//
//   v1 (bwd_v1_smem.cuh)                          v2 (this file)
//   two passes: dK, dV per key block, then dQ     one pass (Alg. 2): a thread block per key
//   per query block (S, dP computed twice)        block, dQ_i added into an fp32 buffer in HBM
//   fp32 products, one thread per element         mma.sync m16n8k16; warp w owns 16 kM keys of
//                                                 the block: its rows of S^T, dP^T, dK_j, dV_j
//   tiles loaded, then computed                   Q_i, dO_i, LSE_i, D_i of step s+1 copied (cp.async)
//                                                 while step s computes
//   expf(S - LSE)                                 ex2(S c - LSE log2 e), c = scale log2 e
//   deterministic by construction                 dQ by atomic additions (fast, the order
//                                                 varies) or, in the deterministic variant, in
//                                                 key-block order (bit-identical, slower)
//
// Per step (one query block i of Br = 64 rows, one query head), warp w computes, for its keys:
//   S^T  = K_j Q_i^T          (16 kM x 64; line 10 transposed, so that a warp owns key rows)
//   P^T  = exp(S^T - LSE_i)   (line 11; LSE indexes the columns now)
//   dP^T = V_j dO_i^T         (line 13)
//   dS^T = P^T * (dP^T - D_i) (line 14)
//   dV_j += P^T dO_i, dK_j += dS^T Q_i   (lines 12, 16: A operands straight from registers,
//                                         the C fragments of P^T / dS^T packed to 16 bits)
// and the block together: dQ_i += dS K_j (line 15), which sums over all the block's keys, so over
// all warps: dS^T goes through shared memory once, and each warp then owns 32 query rows (and a
// share of the head dims) of the 64 x d product.
//
// kM, the mma row tiles of keys a warp owns, is 1 or 2: with 2, every B fragment loaded from
// shared memory (Q_i, dO_i) serves two products instead of one, which matters because the loads,
// not the tensor cores, bound this kernel (ncu: the shared-memory pipe is the busiest). The price
// is registers: dK_j and dV_j together take kM D of them a lane, so kM = 2 only at D <= 64.
//
// Layout as in v1 (common/problem.hpp). dQacc: [B,H,N_q,d] float32, zeroed before the launch;
// dq_convert_kernel turns it into dQ = scale dQacc in T. Supports T = __half or __nv_bfloat16,
// D = 32, 64, 96 or 128 (D a multiple of 16; any other d runs the next of these with zero-padded
// columns, runner_bwd.cu), W warps of kM row tiles (Bc = 16 kM W keys per block: the shapes of
// fa06::bwd_shapes). At D = 192 and 256 dK_j and dV_j of 16 keys would take 192 and 256 registers
// a lane (ptxas: spills): v3 with 64 keys a block runs there.
//
// Variants (docs/math.md section 8; bwd_variants.hpp holds the policies): a sliding window runs a
// key block's steps over only the query blocks that see it, and masks only a tile an edge of the
// band crosses, by the band's two diagonals; a softcap turns each unmasked score into
// c tanh(scale S^T / c) as the softmax reads it (the masked ones stay -inf) and multiplies dS^T by
// its slope 1 - (S/c)^2 (8.2). Both are runtime flags, the same
// for the whole grid: the kernel without them runs the instructions it ran before, plus a branch.
#pragma once
#include <cstdint>
#include <type_traits>

#include "bwd_variants.hpp"
#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"

namespace fa06::bwd_v2 {

namespace ptx = fa05::ptx;

constexpr int Br = 64;  // query rows per step

// Tiles of T with 8 elements of padding per row, as stage 05's v2 ... v4 (the 8 rows one ldmatrix
// reads fall in 8 different bank groups): K_j, V_j (Bc rows), Q_i and dO_i (Br rows, twice: the
// step being computed and the next one in flight), dS^T (Bc x Br), then LSE_i and D_i (2 x Br
// floats each). At D = 128: 155 KiB for Bc = 128, 112 KiB for Bc = 64.
template <int D>
constexpr int kPitch = D + 8;
constexpr int kPitchS = Br + 8;
template <int D, int Bc>
constexpr int smem_bytes() {
  return (2 * Bc + 4 * Br) * kPitch<D> * 2 + Bc * kPitchS * 2 + 4 * Br * 4;
}

// Starts copying `rows` rows of D elements (global, `pitch` elements apart: D, or a packed batch's
// H D) into an (R, D + 8) shared tile, 16 bytes per cp.async; rows past `rows` are zero-filled,
// never read from global memory.
template <int D, int R, int kThreads, class T>
__device__ __forceinline__ void copy_rows_async(T* dst, const T* src, int rows, int64_t pitch = D) {
  constexpr int kVecs = D / 8;
  for (int e = threadIdx.x; e < R * kVecs; e += kThreads) {
    const int r = e / kVecs, col = e % kVecs * 8;
    ptx::cp_async_16(dst + r * kPitch<D> + col, src + min(r, rows - 1) * pitch + col, r < rows);
  }
}

// Release / acquire at GPU scope: the deterministic variant's turn counters.
__device__ __forceinline__ int load_acquire(const int* x) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(x) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(int* x, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(x), "r"(v) : "memory");
}

// The thread block's task number. The deterministic variants number the blocks in the order they
// start (an atomic counter, dq_turn[n_turns], zeroed with the turns) instead of by blockIdx: a
// block then only ever waits (add_dq) for tasks of blocks that have already started, whatever
// order the GPU starts blocks in, so the chain of turns cannot hang.
template <bool kDeterministic>
__device__ __forceinline__ int64_t task_index(int* dq_turn, int64_t n_turns) {
  if constexpr (!kDeterministic) {
    return blockIdx.x;
  } else {
    __shared__ int started;
    if (threadIdx.x == 0) started = atomicAdd(dq_turn + n_turns, 1);
    __syncthreads();
    return started;
  }
}

// Adds the pair `add` into dQacc at `at` (8 bytes): one atomic 8-byte reduction (sm_90; two 4-byte
// ones before), or, in the deterministic variants, whose caller holds the turn, a plain
// read-add-write through L2 (__ldcg, __stcg: an SM's L1 is not kept coherent with other SMs' writes).
template <bool kDeterministic>
__device__ __forceinline__ void add_to_dq(float2* at, float2 add) {
  if constexpr (kDeterministic) {
    float2 v = __ldcg(at);
    v.x += add.x, v.y += add.y;
    __stcg(at, v);
  } else {
#if __CUDA_ARCH__ >= 900
    atomicAdd(at, add);
#else
    atomicAdd(&at->x, add.x), atomicAdd(&at->y, add.y);
#endif
  }
}

// dQ_i += dS K_j (FA2 Alg. 2 line 15) for one step of one thread block: 64 query rows x D, summed
// over the block's Bc keys, added to dQacc. dS^T (Bc x Br, pitch kPitchS) and K_j (Bc x D, pitch
// kPitch) are in shared memory; all W warps call it (v2 and v3 alike). The warps tile the
// product kRowGroups x (W / kRowGroups): warp w takes query rows kRows (w % kRowGroups) .. +kRows-1
// and kDims = D / (W / kRowGroups) head dims, in chunks of kC. Two row groups of 32 rows where the
// dims divide evenly (each K_j fragment loaded then serves two mma row tiles), else four of 16
// (d = 32 or 96 over 8 warps: 8 or 24 dims a warp would not make whole 16-dim pairs). A = dS
// (query x key) is dS^T read by a transposing ldmatrix; B = K_j with the key as k, transposing as
// V_j in the forward. br: the step's valid query rows; (b, h, r0): its head and first row; turn:
// this key block's place in the order of those that see the query block, j - first_key_block()
// (the deterministic variants add in that order; with no window the first is block 0: turn = j).
// dq_row0: dQacc's offset of row r0 (p.q_offset(b, h, r0)), dq_pitch: between its rows (p.d, or
// a packed batch's H d: gpu_v3's token-major dQacc).
template <int D, int W>
constexpr int kDqRowGroups = (D / (W / 2)) % 16 == 0 ? 2 : 4;
template <class T, int D, int W, int Bc, bool kDeterministic>
__device__ __forceinline__ void add_dq(const T* dSt, const T* Kj, float* dQacc, int* dq_turn, const fa::AttnProblem& p,
                                       int64_t b, int64_t h, int64_t r0, int br, int64_t Tr, int64_t turn_no,
                                       int64_t dq_row0, int64_t dq_pitch) {
  constexpr int kRowGroups = kDqRowGroups<D, W>, kRows = Br / kRowGroups, kMM = kRows / 16;
  constexpr int kDims = D / (W / kRowGroups), kC = kDims % 32 == 0 ? 32 : kDims % 48 == 0 ? 48 : 16;
  static_assert(W % kRowGroups == 0 && kDims % 16 == 0 && kDims % kC == 0, "dQ's warp tiling must cover D");
  constexpr int P = kPitch<D>, PS = kPitchS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int q_w = warp % kRowGroups * kRows, d0 = warp / kRowGroups * kDims;
  int* turn = dq_turn + (b * p.H + h) * Tr + r0 / Br;
  if constexpr (kDeterministic) {
    // Wait until the key blocks before this one that see query block i (its first .. j-1) have
    // added their share of dQ_i: the additions happen in key-block order, the same every run.
    // Tasks are numbered as blocks start (task_index), so the blocks holding j-1, j-2, ... have
    // started and will get here: no hang.
    if (threadIdx.x == 0)
      while (load_acquire(turn) != turn_no) {
      }
    __syncthreads();
  }
  for (int dc = d0; dc < d0 + kDims; dc += kC) {
    float dq[kMM][kC / 8][4] = {};
    for (int k = 0; k < Bc / 16; ++k) {
      uint32_t sf[kMM][4];  // lane -> key 16k + 8 (lane / 16) + lane % 8, queries q_w + 16mm + 8 ((lane / 8) % 2)
      for (int mm = 0; mm < kMM; ++mm)
        ptx::ldmatrix_x4_trans(sf[mm], dSt + (k * 16 + lane / 16 * 8 + lane % 8) * PS + q_w + mm * 16 + (lane / 8 % 2) * 8);
      for (int n = 0; n < kC / 8; n += 2) {
        uint32_t kf[4];  // lane -> key 16k + 8 ((lane / 8) % 2) + lane % 8, dims dc + 8n + 8 (lane / 16)
        ptx::ldmatrix_x4_trans(kf, Kj + (k * 16 + (lane / 8 % 2) * 8 + lane % 8) * P + dc + n * 8 + lane / 16 * 8);
        for (int mm = 0; mm < kMM; ++mm) {
          ptx::mma_m16n8k16<T>(dq[mm][n], sf[mm], kf[0], kf[1]);
          ptx::mma_m16n8k16<T>(dq[mm][n + 1], sf[mm], kf[2], kf[3]);
        }
      }
    }
    for (int mm = 0; mm < kMM; ++mm)
      for (int r = 0; r < 2; ++r) {
        const int q = q_w + mm * 16 + g + r * 8;
        if (q >= br) continue;  // rows past N_q: nothing to add, and no memory there
        float* out = dQacc + dq_row0 + q * dq_pitch + dc + 2 * t4;
        for (int n = 0; n < kC / 8; ++n)  // in the deterministic variants: our turn
          add_to_dq<kDeterministic>(reinterpret_cast<float2*>(out + n * 8),
                                    make_float2(dq[mm][n][2 * r], dq[mm][n][2 * r + 1]));
      }
  }
  if constexpr (kDeterministic) {
    __threadfence();  // this block's additions are visible GPU-wide before the turn passes on
    __syncthreads();
    if (threadIdx.x == 0) store_release(turn, int(turn_no + 1));
  }
}

// One thread block per (b, kv head hk, key block j): FA2 Algorithm 2, lines 5-19. W warps, each
// owning kM mma row tiles of keys (16 kM keys): Bc = 16 kM W. Tc key blocks per head.
// kDeterministic: dQ_i is added in the order j = 0, 1, ... (add_dq); dq_turn then holds one zeroed
// int per (b, h, query block) and the start counter of task_index, else it is unused.
template <class T, int D, int W, int kM, bool kDeterministic>
__global__ void __launch_bounds__(32 * W, 1)
dk_dv_dq_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
                const T* __restrict__ dO, const float* __restrict__ LSE, const float* __restrict__ Dv,
                T* __restrict__ dK, T* __restrict__ dV, float* __restrict__ dQacc, int* __restrict__ dq_turn,
                const fa::AttnProblem p, const float scale, const int64_t Tc) {
  constexpr int kThreads = 32 * W, Bc = 16 * kM * W, P = kPitch<D>, PS = kPitchS;
  extern __shared__ __align__(16) unsigned char sram[];
  T* Kj = reinterpret_cast<T*>(sram);                   // (Bc, P)
  T* Vj = Kj + Bc * P;                                  // (Bc, P)
  T* Qs = Vj + Bc * P;                                  // (2, Br, P): Q_i of step s in buffer s % 2
  T* dOs = Qs + 2 * Br * P;                             // (2, Br, P)
  T* dSt = dOs + 2 * Br * P;                            // (Bc, PS): dS^T of the step, for dQ
  float* Ls = reinterpret_cast<float*>(dSt + Bc * PS);  // (2, Br): LSE_i
  float* Ds = Ls + 2 * Br;                              // (2, Br): D_i
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;         // fragment coordinates (ptx.cuh)
  const int kw0 = warp * 16 * kM;                // this warp's first key in the block
  const bool cap = p.softcap > 0.f;  // (8.2)

  const int64_t Tr = (p.N_q + Br - 1) / Br;
  const int64_t t = task_index<kDeterministic>(dq_turn, p.B * p.H * Tr), G = p.H / p.H_kv;
  const int64_t b = t / (p.H_kv * Tc), hk = t / Tc % p.H_kv, j = t % Tc, c0 = j * Bc;
  const int bc = int(min(int64_t(Bc), p.N_k - c0));
  // The steps: every query head of the group (GQA: dK_j, dV_j sum over them) times the query
  // blocks that see any of these keys (bwd_variants.hpp: causal skips the blocks above the
  // diagonal whole, a window also those its band has passed).
  const QueryBlocks qb = query_blocks(p, c0, bc, Br);
  const int64_t i_first = qb.first;
  const int64_t blocks_per_head = max(int64_t(0), qb.last - i_first), steps = G * blocks_per_head;
  auto step_head = [&](int64_t s) { return hk * G + s / blocks_per_head; };
  auto step_row0 = [&](int64_t s) { return (i_first + s % blocks_per_head) * Br; };
  // Starts the copies of step s's Q_i, dO_i, LSE_i, D_i (line 9) into buffer s % 2. Rows past N_q
  // are zeros (LSE = D = 0 too) and are masked below.
  auto load_step = [&](int64_t s) {
    const int64_t h = step_head(s), r0 = step_row0(s);
    const int br = int(min(int64_t(Br), p.N_q - r0)), buf = int(s % 2);
    copy_rows_async<D, Br, kThreads>(Qs + buf * Br * P, Q + p.q_offset(b, h, r0), br);
    copy_rows_async<D, Br, kThreads>(dOs + buf * Br * P, dO + p.q_offset(b, h, r0), br);
    for (int r = threadIdx.x; r < Br; r += kThreads) {
      const int64_t at = p.lse_offset(b, h, r0 + min(r, br - 1));
      ptx::cp_async_4(Ls + buf * Br + r, LSE + at, r < br);
      ptx::cp_async_4(Ds + buf * Br + r, Dv + at, r < br);
    }
  };

  // K_j, V_j once (line 6), with step 0's tiles; dK_j = dV_j = 0 in registers (line 7). In row
  // tile m the lane holds keys kw0 + 16m + g (index 0) and + 8 (index 1); dk[m][n] is the
  // fragment of dims 8n .. 8n+7.
  copy_rows_async<D, Bc, kThreads>(Kj, K + p.kv_offset(b, hk * G, c0), bc);
  copy_rows_async<D, Bc, kThreads>(Vj, V + p.kv_offset(b, hk * G, c0), bc);
  if (steps > 0) load_step(0);
  ptx::cp_async_commit();
  float dk[kM][D / 8][4] = {}, dv[kM][D / 8][4] = {};

  for (int64_t s = 0; s < steps; ++s) {  // line 8
    // Step s's tiles have arrived (the wait: this thread's copies; the barrier: everyone's), and
    // every warp is done with step s-1, so its buffers (and dS^T) can be refilled.
    ptx::cp_async_wait<0>();
    __syncthreads();
    if (s + 1 < steps) load_step(s + 1);
    ptx::cp_async_commit();  // an empty group on the last step keeps the wait uniform
    const int64_t h = step_head(s), r0 = step_row0(s);
    const int br = int(min(int64_t(Br), p.N_q - r0));
    const T* Qi = Qs + (s % 2) * Br * P;
    const T* dOi = dOs + (s % 2) * Br * P;
    const float* Li = Ls + (s % 2) * Br;
    const float* Di = Ds + (s % 2) * Br;

    // The step's 64 queries in two halves of kQh = 32: S^T and dP^T of a half (16 kM registers
    // each) fit beside dK_j and dV_j (64 kM at D = 64, 128 at D = 128) without spilling.
    constexpr int kQh = 32;
    for (int q0 = 0; q0 < Br; q0 += kQh) {
      // S^T = K_j Q_i^T (line 10) and dP^T = V_j dO_i^T (line 13) for this warp's keys: the A
      // operands are its rows of K_j (V_j), row-major; Q_i (dO_i), row-major [query][dim], is
      // the "col" B operand as K_j is in the forward. Each B fragment loaded serves kM row
      // tiles. st[m][n], dpt[m][n]: the fragments of queries q0 + 8n ... q0 + 8n + 7.
      float st[kM][kQh / 8][4] = {}, dpt[kM][kQh / 8][4] = {};
      for (int k = 0; k < D / 16; ++k) {
        uint32_t kf[kM][4], vf[kM][4];  // lane -> key kw0 + 16m + lane % 8 + 8 ((lane / 8) % 2), dims 16k + 8 (lane / 16)
        for (int m = 0; m < kM; ++m) {
          const int a_at = (kw0 + m * 16 + lane % 8 + (lane / 8 % 2) * 8) * P + k * 16 + lane / 16 * 8;
          ptx::ldmatrix_x4(kf[m], Kj + a_at);
          ptx::ldmatrix_x4(vf[m], Vj + a_at);
        }
        for (int n = 0; n < kQh / 8; n += 2) {
          uint32_t qf[4], of[4];  // lane -> query q0 + 8n + 8 (lane / 16) + lane % 8, dims 16k + 8 ((lane / 8) % 2)
          const int b_at = (q0 + n * 8 + lane / 16 * 8 + lane % 8) * P + k * 16 + (lane / 8 % 2) * 8;
          ptx::ldmatrix_x4(qf, Qi + b_at);
          ptx::ldmatrix_x4(of, dOi + b_at);
          for (int m = 0; m < kM; ++m) {
            ptx::mma_m16n8k16<T>(st[m][n], kf[m], qf[0], qf[1]);
            ptx::mma_m16n8k16<T>(st[m][n + 1], kf[m], qf[2], qf[3]);
            ptx::mma_m16n8k16<T>(dpt[m][n], vf[m], of[0], of[1]);
            ptx::mma_m16n8k16<T>(dpt[m][n + 1], vf[m], of[2], of[3]);
          }
        }
      }

      // Mask where needed (keys past N_k, queries past N_q, a tile an edge of the band crosses:
      // the causal diagonal, a window's two): -inf, which ex2() turns into exactly 0. Key kr sees
      // query qc iff band.lo <= kr - qc <= band.hi (bwd_variants.hpp, (8.1)).
      const BandTile band = band_tile(p, r0, c0, Br, Bc);
      const bool mask = c0 + Bc > p.N_k || r0 + Br > p.N_q || band.crosses(Br, Bc);
      if (mask) {
        for (int m = 0; m < kM; ++m)
          for (int n = 0; n < kQh / 8; ++n)
            for (int e = 0; e < 4; ++e) {
              const int kr = kw0 + m * 16 + g + e / 2 * 8, qc = q0 + n * 8 + 2 * t4 + e % 2;
              if (kr >= bc || qc >= br || !band.sees(kr - qc)) st[m][n][e] = -INFINITY;
            }
      }

      // P^T = exp(S^T - LSE_i) = 2^(S^T c - LSE_i log2 e) (line 11) and dS^T = P^T (dP^T - D_i)
      // (line 14), in place; softcap: each unmasked score capped first (capping a masked one would
      // turn its -inf into -c) and dS^T times its slope (8.2). A row that sees no key has
      // LSE = -inf: +inf instead makes its P exactly 0 (all its scores are masked:
      // 2^(-inf - inf)), never inf - inf.
      // The loop is written once and compiled twice, for the two values of the runtime flag cap:
      // without a softcap the kernel runs the loop it ran before it had one (with one loop that
      // tests the flag, ptxas -v showed new spills in gpu_v2 at d = 64 and gpu_v3 at d = 128).
      // exp(scale x) = 2^(c x) with c = scale log2(e); softcap: S is capped and scaled, c = log2(e).
      const auto softmax = [&](auto capped) {
        constexpr bool kCap = decltype(capped)::value;
        const float c = (kCap ? 1.f : scale) * 1.4426950408889634f;
        for (int n = 0; n < kQh / 8; ++n) {
          const float2 lse = *reinterpret_cast<const float2*>(Li + q0 + n * 8 + 2 * t4);
          const float2 dd = *reinterpret_cast<const float2*>(Di + q0 + n * 8 + 2 * t4);
          const float l2[2] = {lse.x == -INFINITY ? INFINITY : lse.x * 1.4426950408889634f,
                               lse.y == -INFINITY ? INFINITY : lse.y * 1.4426950408889634f};
          for (int m = 0; m < kM; ++m)
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

      // dV_j += P^T dO_i (line 12), dK_j += dS^T Q_i (line 16; scale applied at the write). The
      // C fragments of query tiles 2k, 2k+1 are, lane for lane, the A fragment of the 16 x 16
      // slice k (stage 05 v2's P trick); dO_i and Q_i, row-major [query][dim] with the query as
      // k here, are read by a transposing ldmatrix, as V_j in the forward.
      for (int k = 0; k < kQh / 16; ++k) {
        uint32_t pa[kM][4], sa[kM][4];
        for (int m = 0; m < kM; ++m) {
          const float(&p0)[4] = st[m][2 * k];
          const float(&p1)[4] = st[m][2 * k + 1];
          const float(&s0)[4] = dpt[m][2 * k];
          const float(&s1)[4] = dpt[m][2 * k + 1];
          pa[m][0] = ptx::pack2<T>(p0[0], p0[1]), pa[m][1] = ptx::pack2<T>(p0[2], p0[3]);
          pa[m][2] = ptx::pack2<T>(p1[0], p1[1]), pa[m][3] = ptx::pack2<T>(p1[2], p1[3]);
          sa[m][0] = ptx::pack2<T>(s0[0], s0[1]), sa[m][1] = ptx::pack2<T>(s0[2], s0[3]);
          sa[m][2] = ptx::pack2<T>(s1[0], s1[1]), sa[m][3] = ptx::pack2<T>(s1[2], s1[3]);
          // dS^T to shared memory for the dQ product (row = key, 4-byte stores: the 32 lanes of
          // a store hit 32 different banks with the pitch Br + 8).
          for (int e = 0; e < 4; ++e)
            *reinterpret_cast<uint32_t*>(dSt + (kw0 + m * 16 + g + (e % 2) * 8) * PS + q0 + k * 16 + (e / 2) * 8 +
                                         2 * t4) = sa[m][e];
        }
        for (int n = 0; n < D / 8; n += 2) {
          uint32_t of[4], qf[4];  // lane -> query q0 + 16k + 8 ((lane / 8) % 2) + lane % 8, dims 8n + 8 (lane / 16)
          const int b_at = (q0 + k * 16 + (lane / 8 % 2) * 8 + lane % 8) * P + n * 8 + lane / 16 * 8;
          ptx::ldmatrix_x4_trans(of, dOi + b_at);
          ptx::ldmatrix_x4_trans(qf, Qi + b_at);
          for (int m = 0; m < kM; ++m) {
            ptx::mma_m16n8k16<T>(dv[m][n], pa[m], of[0], of[1]);
            ptx::mma_m16n8k16<T>(dv[m][n + 1], pa[m], of[2], of[3]);
            ptx::mma_m16n8k16<T>(dk[m][n], sa[m], qf[0], qf[1]);
            ptx::mma_m16n8k16<T>(dk[m][n + 1], sa[m], qf[2], qf[3]);
          }
        }
      }
    }
    __syncthreads();  // all of dS^T is in shared memory

    add_dq<T, D, W, Bc, kDeterministic>(dSt, Kj, dQacc, dq_turn, p, b, h, r0, br, Tr, j - first_key_block(p, r0, Bc),
                                        p.q_offset(b, h, r0), p.d);
  }

  // dK_j = scale dK_j, dV_j to HBM, once (line 18); rows past N_k are not written.
  for (int m = 0; m < kM; ++m)
    for (int r = 0; r < 2; ++r) {
      const int key = kw0 + m * 16 + g + r * 8;
      if (key >= bc) continue;
      T* dk_out = dK + p.kv_offset(b, hk * G, c0 + key) + 2 * t4;
      T* dv_out = dV + p.kv_offset(b, hk * G, c0 + key) + 2 * t4;
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dk_out + n * 8) =
            ptx::pack2<T>(scale * dk[m][n][2 * r], scale * dk[m][n][2 * r + 1]);
        *reinterpret_cast<uint32_t*>(dv_out + n * 8) = ptx::pack2<T>(dv[m][n][2 * r], dv[m][n][2 * r + 1]);
      }
    }
}

// dQ = scale dQacc, rounded to T (the last step of line 15's accumulation): rows x d elements of
// dQ from rows of D >= d floats of dQacc. D > d where the kernel ran on head dims padded with zero
// columns (runner_bwd.cu): their gradient columns are dropped here, so dQ needs no padded copy.
template <class T>
__global__ void dq_convert_kernel(const float* __restrict__ dQacc, T* __restrict__ dQ, int64_t rows, int d, int D,
                                  float scale) {
  const int64_t n = rows * d;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    dQ[e] = fa05::store<T>(scale * (D == d ? dQacc[e] : dQacc[e / d * D + e % d]));
}

}  // namespace fa06::bwd_v2
