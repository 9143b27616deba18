// v13: v12 at every head dim up to 256. Read it beside v12_warp_specialized.cuh: the pipeline,
// the softmax and the O write are v12's; what changes is what depends on d.
//
//   v12                                             v13
//   d = 128 only (asked for d = 64, the runner      one kernel per native width Dq = 32, 64, 96,
//   ran v9; any other d, v1)                        128, 192, 256; any other d runs the next one
//   Q_i loaded into registers by ldmatrix before    the same where they fit beside O, S and P (up
//   every S = Q_i K_j^T (D / 4 registers a          to Dq = 192 at 128 x 64 blocks); else Q_i read
//   thread: 64 at D = 256, which with O, S and P    by the tensor cores from shared memory (wgmma's
//   (176, below) would make 240 of the 232 a        "SS" form: both operands in shared memory), so
//   consumer has)                                   O (D / 2 floats a thread) fits at 256
//   tiles of d = 128 columns: two 64-column slabs   tiles of D = Dq rounded up to 64 columns (the
//                                                   128-byte swizzle's row); TMA fills the columns
//                                                   past d with zeros, which add 0 to every score
//                                                   and make O columns that are never stored
//   S's k-loop over 128 dims                        over Dq dims only: at Dq = 96 the zero slab
//                                                   half costs no S work (P V still runs D wide)
//   two Q buffers                                   two where they fit in 227 KiB with the K and
//                                                   V rings, else one (D = 256: the next tile's
//                                                   Q_i waits for this tile's O write)
//   128 x 64 or 128 x 128 blocks, two consumer      the same, and where they win on long
//   warpgroups                                      sequences (measured: runner.cu, default_shape):
//                                                   three consumer warpgroups (192 rows) at Dq <=
//                                                   64, and Bc = 80 at Dq = 192, 256, where 128
//                                                   keys' K and V rings do not fit
//
// Why: real models use d = 32 (MiniLM), 64 (GPT-2, BERT), 80 (Phi-2), 96 (Phi-3-mini), 128
// (Llama), 256 (Gemma); FlashAttention-3 compiles 64, 96, 128, 192 and 256, FlashAttention-2 a
// set of widths up to 256 that every d rounds up to. The registers of a consumer thread hold O
// (D / 2 floats), S (Bc / 2) and P (Bc / 4): at D = 256 and Bc = 64 that is 128 + 32 + 16 = 176
// of its 232, and v12's Q fragments (64 more) would not fit; shared memory holds two K and two V
// buffers (4 Bc D elements) and the Q ring (Br D each): at D = 256, two Q buffers with the K and
// V rings would make 256 KiB, more than the 227 a block may have.
//
// Measured on the H200 (lab notebook, v13): SS at every width ran d = 128 at 0.79x of v12 (N =
// 16384, bf16). Our reading, not profiled: the A operand read from shared memory by every wgmma
// costs more than v12's ldmatrix of the fragments, so the registers stay where they fit. At Dq =
// 192 they do (O 96 + S 32 + P 16 + Q 48 = 192 of 232, with Bc = 64): registers there ran
// 1.07-1.15x SS (N = 1024 ... 16384, bf16, not causal; 1.01-1.15x causal or not: lab notebook
// "v13 at d = 192").
//
// The head dim d reaches the kernel only through the problem (p.d: the row pitch of Q, K, V, O)
// and the tensor maps (whose rows are d wide: TMA reads nothing past them). d must be a multiple of
// 8 (a tensor map's rows are 16-byte multiples); the runner copies any other d into a padded
// buffer first (common/cuda/pad_columns.hpp).
//
// The variants (math.md section 8) are policies at the two places a mask already lived, not a new
// loop: a sliding window moves the first key block a tile reads (Tile::j0; the producer copies
// only the band's blocks, so the work grows as N w, not N^2), the mask of a block the band's edges
// cross tests both ends of each row's key_range(); a softcap transforms S in softmax() before the
// mask. v13 and v1 are the kernels that take them (plan() refuses the others).
//
// A packed variable-length batch (common/varlen.hpp: sequences of different lengths concatenated
// along the token axis, Q [total_q, H, d], K and V [total_k, H_kv, d], LSE [H, total_q]) is one
// launch, as FlashAttention's varlen call: the tiles are those of the longest sequence's padded
// problem, numbered (b, query block, h), and each tile reads its sequence's first token and
// lengths from the offsets cu_q, cu_k (fa05::Packed, kernel_common.cuh). Nothing else changes: the tensor maps read rows H d apart
// (runner.cu), a tile past its sequence's last row does nothing, and the keys a block reads past
// the sequence's end (the next sequence's first keys) lie past its N_k, where the mask already was.
#pragma once
#include <cuda.h>  // CUtensorMap

#include <cstdint>
#include <type_traits>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"
#include "v7_wgmma.cuh"  // the swizzled layout (swz)
#include "v12_warp_specialized.cuh"  // the producer's register budget and the TMA box width

namespace fa05::v13 {

using v7::slab_width;
using v7::swz;
using v12::kBoxCols, v12::kProducerThreads;

// The register split of a block of kWarps consumer warps and the producer warpgroup, a thread
// each (setmaxnreg): v12's 40 / 232 with two consumer warpgroups; with three (Br = 192, at Dq <=
// 64 only) 32 / 160, FlashAttention-3's split for three consumer warpgroups (read in its
// hopper/flash_fwd_kernel_sm90.h, not copied): 32 x 128 + 160 x 384 = 65,536, the whole file.
FA_HOST_DEVICE constexpr int producer_regs(int warps) { return warps == 8 ? v12::kProducerRegs : 32; }
FA_HOST_DEVICE constexpr int consumer_regs(int warps) { return warps == 8 ? v12::kConsumerRegs : 160; }
// Q_i's fragments stay in registers (v12's form) where the tile's big arrays fit the consumers'
// registers with 40 to spare: O (D / 2 floats a thread), S (Bc / 2), P (Bc / 4) and Q (Dq / 4).
// That is v12's own total at 128 x 128, d = 128 (64 + 64 + 32 + 32 = 192 of 232) and v13's at
// Dq = 192, Bc = 64; above it the tensor cores read Q_i from shared memory (the SS form).
FA_HOST_DEVICE constexpr bool q_in_registers(int Dq, int warps, int Bc) {
  return slab_width(Dq) / 2 + Bc / 2 + Bc / 4 + Dq / 4 <= consumer_regs(warps) - 40;
}

// The tile width in shared memory, slab_width(Dq) (v7_wgmma.cuh): Dq rounded up to the 64-column
// slab of the 128-byte swizzle, one TMA box wide.
static_assert(slab_width(1) == kBoxCols, "a slab is one TMA box");
constexpr int kMaxSmem = 227 * 1024;  // a thread block's shared memory on sm_90 (opt-in)
// The Q ring: two tiles (v12's) where they fit beside the K and V rings, else one.
FA_HOST_DEVICE constexpr int q_buffers(int Dq, int warps, int Bc) {
  return (4 * Bc + 2 * 16 * warps) * slab_width(Dq) * 2 + 1024 <= kMaxSmem ? 2 : 1;
}
// Two K and two V buffers (Bc x D each), the Q ring (Br x D each), 1024 bytes to align the swizzle.
FA_HOST_DEVICE constexpr int smem_bytes(int Dq, int warps, int Bc) {
  return (4 * Bc + q_buffers(Dq, warps, Bc) * 16 * warps) * slab_width(Dq) * 2 + 1024;
}

using fa05::Packed;  // a packed batch's offsets (kernel_common.cuh)

// As v12, at native width Dq (32, 64, 96, 128, 192 or 256) for any head dim p.d <= Dq that is a
// multiple of 8 (the tensor maps' rows are p.d wide: columns p.d .. D - 1 of every box arrive as
// zeros). Shapes: kWarps = 8 (two consumer warpgroups, Br = 128) or, at Dq <= 64, 12 (three, Br
// = 192, each consumer thread 160 registers instead of 232); Bc = 64, 80 or 128 (an S width that
// wgmma has, ptx.cuh).
template <class T, int Dq, int kWarps, int Bc>
__global__ void __launch_bounds__(32 * kWarps + kProducerThreads, 1)
forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
               T* __restrict__ O, float* __restrict__ LSE, const fa::AttnProblem p, const float scale,
               const int64_t Tr, unsigned* __restrict__ tile_counter, const __grid_constant__ CUtensorMap tm_q,
               const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
               const Packed packed) {
  constexpr int Br = 16 * kWarps;  // 16 query rows per consumer warp, one mma row-tile each
  constexpr int D = slab_width(Dq);  // the tiles' width in shared memory, and O's in registers
  constexpr int kQ = q_buffers(Dq, kWarps, Bc);  // Q ring size: tile number k in buffer k % kQ
  // S's A operand: Q_i's fragments in registers (v12's form) where they fit beside O, S and P
  // (q_in_registers: up to Dq = 192 at 128 x 64, 128 at 128 x 128, none at 192 x 128); else the
  // tensor cores read Q_i from shared memory. (Measured: SS ran 0.79x of the registers at Dq =
  // 128 and 0.87-0.94x at 192, lab notebook v13.)
  constexpr bool kQInRegisters = q_in_registers(Dq, kWarps, Bc);
  constexpr int kQRegs = kQInRegisters ? Dq / 16 : 1;  // fragments of 16 dims (1: unused)
  constexpr int kConsumers = 32 * kWarps;
  static_assert((kWarps == 8 || (kWarps == 12 && Dq <= 64)) && (Bc == 64 || Bc == 80 || Bc == 128),
                "two (or, up to Dq = 64, three) consumer warpgroups; a wgmma width for S");
  constexpr int kProducerRegs = producer_regs(kWarps), kConsumerRegs = consumer_regs(kWarps);
  constexpr int kThreads = kProducerThreads + kConsumers, kPool = kThreads * (65536 / kThreads / 8 * 8);
  static_assert(kProducerThreads * kProducerRegs + kConsumers * kConsumerRegs <= kPool, "the block's registers");
  static_assert(Dq % 16 == 0 && Dq <= 256, "whole k16 steps of S");
  static_assert(smem_bytes(Dq, kWarps, Bc) <= kMaxSmem, "the rings fit");
  (void)Q, (void)K, (void)V;
  extern __shared__ __align__(16) unsigned char sram[];
  // The rings' barriers: full_*[s] expects the producer's one arrival and the bytes of its copies,
  // empty_*[s] every consumer thread.
  __shared__ uint64_t full_q[kQ], full_k[2], full_v[2], empty_q[kQ], empty_k[2], empty_v[2];
  __shared__ int64_t tile_of[kQ];  // the tile whose Q_i is in Q buffer s; n_tiles or more: no more tiles
  // 1024-aligned for the swizzle (v9 says how).
  T* Ks = reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(sram) + 1023) / 1024 * 1024);  // (2, Bc x D)
  T* Vs = Ks + 2 * Bc * D;  // (2, Bc x D): key block n in buffer n % 2, swizzled
  T* Qs = Vs + 2 * Bc * D;  // (kQ, Br x D): this block's tile number k in buffer k % kQ, swizzled
  const float neg_inf = -INFINITY;
  const int64_t BH = p.B * p.H, n_tiles = BH * Tr;

  // Tile t: (b, h, query block starting at row r0) in v9's order, and the key blocks it sees:
  // Tc of them from block j0. Causal skips the blocks past its last row's diagonal; a sliding
  // window (math.md (8.1)) also those before its first row's band: the tile reads the keys from
  // key_begin(r0) to key_end(last row), as v1 and stage 04 do.
  struct Tile {  // 32-bit where the plan bounds it (B, H, key blocks, rows, tokens), to spare registers
    int64_t r0;
    int b, h, j0, Tc, br;
    int q0, k0, nq, nk;  // the sequence's first query and key token (0 unpacked), its N_q and N_k
  };
  // The problem as tile x's sequence sees it: its own N_q and N_k (the causal diagonal and the
  // window follow them), as v14's does for a KV cache's lengths.
  const auto seq = [&](const Tile& x) {
    fa::AttnProblem s = p;
    s.N_q = x.nq, s.N_k = x.nk;
    return s;
  };
  // A packed batch's tiles are numbered sequence by sequence, each sequence's query blocks last
  // first (the heaviest under causal), heads inside: a sequence shorter than the longest has its
  // empty tiles (blocks past its last row) at the start of its range, which the producer skips in
  // one jump (next_with_rows below).
  const auto tile = [&](int64_t t) {
    const int64_t per_seq = Tr * p.H;
    const int64_t bh = packed.cu_q ? t / per_seq * p.H + t % p.H : p.causal ? t % BH : t / Tr;
    const int64_t qb = packed.cu_q ? Tr - 1 - t % per_seq / p.H : p.causal ? Tr - 1 - t / BH : t % Tr;
    Tile x{qb * Br, int(bh / p.H), int(bh % p.H), 0, 0, 0, 0, 0, int(p.N_q), int(p.N_k)};
    if (packed.cu_q) {  // sequence b's tokens (clamped: kernel_common.cuh)
      packed_span(packed.cu_q, x.b, packed.total_q, int(p.N_q), x.q0, x.nq);
      packed_span(packed.cu_k, x.b, packed.total_k, int(p.N_k), x.k0, x.nk);
    }
    const fa::AttnProblem s = seq(x);
    x.br = int(min(int64_t(Br), s.N_q - x.r0));  // <= 0: past the sequence's last row, no work
    if (x.br > 0) {
      const int64_t end = s.key_end(x.r0 + x.br - 1);
      x.j0 = int(s.key_begin(x.r0) / Bc);
      x.Tc = int(max(int64_t(0), (end + Bc - 1) / Bc - x.j0));
    }
    return x;
  };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kQ; ++s) ptx::mbar_init(&full_q[s], 1), ptx::mbar_init(&empty_q[s], kConsumers);
    for (int s = 0; s < 2; ++s) {
      ptx::mbar_init(&full_k[s], 1), ptx::mbar_init(&full_v[s], 1);
      ptx::mbar_init(&empty_k[s], kConsumers), ptx::mbar_init(&empty_v[s], kConsumers);
    }
    ptx::mbar_init_fence();  // the copy engine sees them initialised too
  }
  __syncthreads();  // the barriers exist before anyone waits on them; no block-wide barrier after this

  if (threadIdx.x < kProducerThreads) {
    // ---- The producer: one thread walks the tiles and copies every Q_i, K_j, V_j into its ring.
    ptx::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x != 0) return;  // the rest of the warpgroup only handed its registers back
    // A (rows x D) tile: D / 64 boxes of 64 columns, each into its column slab (v7's layout). The
    // columns past p.d arrive as zeros, and count among the bytes the barrier waits for.
    const auto copy = [&](T* dst, int slab_rows, const CUtensorMap& map, int row, int64_t slice, uint64_t* full) {
      ptx::mbar_arrive_expect_tx(full, uint32_t(slab_rows * D * sizeof(T)));
      for (int x = 0; x < D; x += kBoxCols)
        ptx::tma_load_3d(dst + x * slab_rows, &map, x, row, int(slice), full);
    };
    // A packed batch: tile t, or, if it has no row (past its sequence's end), the next claimed tile
    // that has. The empty tiles of sequence b are the first (Tr - ceil(N_q(b) / Br)) H of its Tr H:
    // one atomicMax moves the counter past those not yet claimed, so a batch of short sequences
    // costs a claim or two per sequence, not one per empty tile (measured: one handshake per empty
    // tile cost 2.9 ms of 4.9 with one 16k sequence among 96 short ones, lab notebook).
    const auto next_with_rows = [&](int64_t t) {
      while (packed.cu_q && t < n_tiles) {
        const Tile x = tile(t);
        if (x.br > 0) break;
        const int64_t first = (int64_t(x.b) * Tr + Tr - (x.nq + Br - 1) / Br) * p.H;  // b's first tile with rows
        if (first > int64_t(gridDim.x)) atomicMax(tile_counter, unsigned(first - gridDim.x));
        t = gridDim.x + int64_t(atomicAdd(tile_counter, 1u));
      }
      return t;
    };
    int64_t t = next_with_rows(blockIdx.x);  // as v10: the block's own first tile, the next ones are claimed
    uint32_t n = 0;          // key blocks copied so far: buffer n % 2 of the K and V rings
    for (uint32_t step = 0;; ++step) {  // step: this block's tile number k, in Q buffer k % kQ
      const int qs = step % kQ;
      ptx::mbar_wait(&empty_q[qs], (step / kQ + 1) % 2);  // the tile kQ before has written its O
      tile_of[qs] = t;
      if (t >= n_tiles) {  // no more tiles: the consumers read that from tile_of and stop
        ptx::mbar_arrive(&full_q[qs]);
        break;
      }
      const Tile x = tile(t);
      // The maps' coordinates: (row, slice) = (query row, b H + h) of [B H, N_q, d], or, packed,
      // (token, head) of [total_q, H, d] (runner.cu makes the maps of each layout).
      const int64_t q_slice = packed.cu_q ? x.h : int64_t(x.b) * p.H + x.h;
      const int64_t kv_slice = packed.cu_q ? p.kv_head(x.h) : int64_t(x.b) * p.H_kv + p.kv_head(x.h);
      if (x.Tc > 0)
        copy(Qs + qs * Br * D, Br, tm_q, x.q0 + int(x.r0), q_slice, &full_q[qs]);
      else
        ptx::mbar_arrive(&full_q[qs]);  // a tile that sees no key copies nothing: its O is 0
      for (int j = 0; j < x.Tc; ++j, ++n) {
        const uint32_t free = (n / 2 + 1) % 2;  // the buffer's previous use has been released
        ptx::mbar_wait(&empty_k[n % 2], free);
        copy(Ks + (n % 2) * Bc * D, Bc, tm_k, x.k0 + (x.j0 + j) * Bc, kv_slice, &full_k[n % 2]);
        ptx::mbar_wait(&empty_v[n % 2], free);
        copy(Vs + (n % 2) * Bc * D, Bc, tm_v, x.k0 + (x.j0 + j) * Bc, kv_slice, &full_v[n % 2]);
      }
      t = next_with_rows(gridDim.x + int64_t(atomicAdd(tile_counter, 1u)));
    }
  } else {
    // ---- The consumers: v12's tile; where Q's fragments do not fit (q_in_registers), S reads Q_i
    // from shared memory (SS).
    ptx::setmaxnreg_inc<kConsumerRegs>();
    const int warp = threadIdx.x / 32 - kProducerThreads / 32, lane = threadIdx.x % 32;  // warp: rows 16 warp ...
    const int wg = warp / 4;  // consumer warpgroup: rows 64 wg .. 64 wg + 63 of the tile
    const int g = lane / 4, t4 = lane % 4;  // fragment coordinates (ptx.cuh): row group, lane in quad
    // scale * log2(e): exp(scale x) = 2^(c x). With a softcap, the scores are scaled and capped
    // before the softmax sees them (softmax() below), which then only multiplies by log2(e).
    const float c = p.softcap > 0.f ? 1.4426950408889634f : scale * 1.4426950408889634f;
    // Buffer n of a ring: wait until its copy has landed; release it once this thread is done with
    // it (for K and V: after the wgmma_wait that covers its reads).
    // A ring of R buffers: buffer n is slot n % R, in its (n / R)-th use.
    const auto ready = [&](auto& full, uint32_t n) {
      constexpr uint32_t R = std::extent_v<std::remove_reference_t<decltype(full)>>;
      ptx::mbar_wait(&full[n % R], (n / R) % 2);
    };
    const auto release = [&](auto& empty, uint32_t n) {
      ptx::mbar_arrive(&empty[n % std::extent_v<std::remove_reference_t<decltype(empty)>>]);
    };
    uint32_t n0 = 0;  // key blocks consumed so far by this block: this tile's block j is n0 + j
    for (uint32_t step = 0;; ++step) {  // step: this block's tile number k in the comments
      const int qbuf = step % kQ;
      ready(full_q, step);
      const int64_t t = tile_of[qbuf];
      if (t >= n_tiles) break;
      const Tile cur = tile(t);
      const fa::AttnProblem sp = seq(cur);  // N_q, N_k: this tile's sequence's
      const int64_t b = cur.b, h = cur.h, r0 = cur.r0;
      const int j0 = cur.j0, Tc = cur.Tc;  // key blocks j0 ... j0 + Tc - 1; the j below count from j0
      const T* Qi = Qs + qbuf * Br * D;

      float o[D / 8][4] = {};
      float m2[2] = {neg_inf, neg_inf};  // the row max so far times c (v7)
      float l[2] = {0.f, 0.f};  // this lane's share of the row sum; the quad's 4 shares add up at the end
      float alpha[2] = {1.f, 1.f};       // exp(m_{j-1} - m_j) per row: O's rescaling, applied one block late
      uint32_t a[Bc / 16][4];            // P~ of the last softmax as P V's A registers (a[k]: keys 16k .. 16k+15)
      float(*o64)[8][4] = reinterpret_cast<float(*)[8][4]>(o);  // o64[sl]: dims 64 sl .. 64 sl + 63

      // v12's steps, with block j of this tile in buffers (n0 + j) % 2.
      const auto rescale_o = [&] {
        for (int r = 0; r < 2; ++r)
          for (int n = 0; n < D / 8; ++n) o[n][2 * r] *= alpha[r], o[n][2 * r + 1] *= alpha[r];
      };
      // Where they fit (kQInRegisters), Q_i's fragments are loaded into registers for each S, as
      // v12 does (Dq / 4 registers); else S reads Q_i from shared memory.
      const auto load_q = [&](uint32_t(&q)[kQRegs][4]) {
        if constexpr (kQInRegisters)
          for (int k = 0; k < Dq / 16; ++k)
            ptx::ldmatrix_x4(q[k], Qi + swz<Br>(warp * 16 + lane % 8 + (lane / 8 % 2) * 8, 2 * k + lane / 16));
      };
      // S = Q_i K_j^T over the first Dq dims: step k reads dims 16k .. 16k + 15 of this
      // warpgroup's 64 rows of Q_i and of K_j's Bc rows, both in slab k / 4 (v7's layout).
      const auto issue_s = [&](float(&s)[Bc / 8][4], const uint32_t(&q)[kQRegs][4], int j) {
        const T* Kj = Ks + ((n0 + j) % 2) * Bc * D;
        for (int k = 0; k < Dq / 16; ++k) {
          const uint64_t desc_k = ptx::smem_desc_sw128(Kj + (k / 4) * Bc * 64 + (k % 4) * 16);
          if constexpr (kQInRegisters)
            ptx::wgmma_m64nNk16<T, Bc, 0>(s, q[k], desc_k);
          else
            ptx::wgmma_m64nNk16_ss<T, Bc>(s, ptx::smem_desc_sw128(Qi + (k / 4) * Br * 64 + wg * 64 * 64 + (k % 4) * 16), desc_k);
        }
        ptx::wgmma_commit();
      };
      const auto issue_pv = [&](int j) {
        const T* Vj = Vs + ((n0 + j) % 2) * Bc * D;
        for (int k = 0; k < Bc / 16; ++k)
          for (int sl = 0; sl < D / 64; ++sl)
            ptx::wgmma_m64nNk16<T, 64, 1>(o64[sl], a[k], ptx::smem_desc_sw128(Vj + sl * Bc * 64 + k * 16 * 64));
        ptx::wgmma_commit();
      };
      const auto pin_pv = [&] {
        for (int sl = 0; sl < D / 64; ++sl) ptx::wgmma_pin(o64[sl]);
        for (int k = 0; k < Bc / 16; ++k) ptx::wgmma_pin(a[k]);
      };
      const auto softmax = [&](float(&s)[Bc / 8][4], int64_t j) {
        const int64_t c0 = (j0 + j) * Bc;
        // The softcap (math.md (8.2)), before the mask: a uniform branch, the same for the block.
        if (p.softcap > 0.f)
          for (int n = 0; n < Bc / 8; ++n)
            for (int e = 0; e < 4; ++e) s[n][e] = softcap(s[n][e] * scale, p.softcap);
        // Only a block that an edge of the band crosses is masked: past the tile's first row's
        // key_end (the diagonal, the window's right side, N_k), or before its last row's key_begin.
        const bool mask = c0 + Bc > sp.key_end(r0) || c0 < sp.key_begin(r0 + Br - 1);
        // The window's sides as the mask below reads them: -1 unbounded, a side wider than N_q + N_k too
        // (problem.hpp), causal's right side 0. Uniform across the block.
        const int64_t wl = p.window_left > sp.N_q + sp.N_k ? -1 : p.window_left;
        const int64_t wr = p.causal ? 0 : p.window_right > sp.N_q + sp.N_k ? -1 : p.window_right;
        if (mask)
          for (int r = 0; r < 2; ++r) {
            // key_range() of the row, relative to c0 and clamped to the block: from the row's
            // diagonal key dg, the band [dg - left, dg + right], the keys below N_k. Written out,
            // with one unsigned compare per score: through key_range() and two compares, ptxas
            // spilled 108 bytes at Dq = 256 (CUDA 13.0; this form 16, v13 before the variants 32).
            const int64_t dg = r0 + warp * 16 + g + r * 8 + (sp.N_k - sp.N_q) - c0;
            const int lo = wl < 0 ? 0 : int(max(int64_t(0), min(int64_t(Bc), dg - wl)));
            const int hi = int(max(int64_t(lo), min(min(int64_t(Bc), sp.N_k - c0), wr < 0 ? int64_t(Bc) : dg + wr + 1)));
            for (int n = 0; n < Bc / 8; ++n)
              for (int e = 2 * r; e < 2 * r + 2; ++e) {
                // lo <= col < hi in one unsigned compare (col - lo wraps when col < lo)
                if (unsigned(n * 8 + 2 * t4 + e % 2 - lo) >= unsigned(hi - lo)) s[n][e] = neg_inf;
              }
          }
        for (int r = 0; r < 2; ++r) {
          float mx = neg_inf;
          for (int n = 0; n < Bc / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m2_new = fmaxf(m2[r], mx * c);
          const float m2_use = m2_new == neg_inf ? 0.f : m2_new;
          alpha[r] = ptx::ex2(m2[r] - m2_use);
          float rowsum = 0.f;
          for (int n = 0; n < Bc / 8; ++n)
            for (int e = 2 * r; e < 2 * r + 2; ++e) {
              s[n][e] = ptx::ex2(fmaf(s[n][e], c, -m2_use));
              rowsum += s[n][e];
            }
          l[r] = fmaf(alpha[r], l[r], rowsum);
          m2[r] = m2_new;
        }
      };
      const auto pack_p = [&](const float(&s)[Bc / 8][4]) {
        for (int k = 0; k < Bc / 16; ++k) {
          a[k][0] = ptx::pack2<T>(s[2 * k][0], s[2 * k][1]), a[k][1] = ptx::pack2<T>(s[2 * k][2], s[2 * k][3]);
          a[k][2] = ptx::pack2<T>(s[2 * k + 1][0], s[2 * k + 1][1]);
          a[k][3] = ptx::pack2<T>(s[2 * k + 1][2], s[2 * k + 1][3]);
        }
      };

      if (Tc > 0) {
        {  // block 0, as in v12
          // (Q_i is in: its "full" came first.)
          ready(full_k, n0);
          uint32_t q[kQRegs][4];
          float s[Bc / 8][4] = {};
          load_q(q);
          ptx::wgmma_pin(s);
          ptx::wgmma_fence();
          issue_s(s, q, 0);
          ptx::wgmma_wait<0>();
          ptx::wgmma_pin(s);
          release(empty_k, n0);  // S_0 is done, so K_0 is read
          softmax(s, 0);
          pack_p(s);
        }
        for (int j = 1; j < Tc; ++j) {  // as in v12
          ready(full_k, n0 + j);
          ready(full_v, n0 + j - 1);
          uint32_t q[kQRegs][4];
          float s[Bc / 8][4] = {};
          load_q(q);
          rescale_o();
          ptx::wgmma_pin(s);
          pin_pv();
          ptx::wgmma_fence();
          issue_s(s, q, j);
          issue_pv(j - 1);
          ptx::wgmma_wait<1>();
          ptx::wgmma_pin(s);
          release(empty_k, n0 + j);  // S_j is done, so K_j is read
          softmax(s, j);
          ptx::wgmma_wait<0>();
          pin_pv();
          release(empty_v, n0 + j - 1);
          pack_p(s);
        }
        ready(full_v, n0 + Tc - 1);  // the last block's P V
        rescale_o();
        pin_pv();
        ptx::wgmma_fence();
        issue_pv(Tc - 1);
        ptx::wgmma_wait<0>();
        pin_pv();
        release(empty_v, n0 + Tc - 1);
      }

      // Write O_i = O_i / l and LSE = m + log(l) (lines 12-15), through this tile's Q buffer, as
      // v12. With Q in registers the __syncwarp orders every lane's ldmatrix of these rows before
      // the staging overwrites them (as in v12); with SS, the tensor cores' reads of a warpgroup's
      // 64 rows ended with its last S's wgmma_wait, which every warp passed before the last P V it
      // issued with the others.
      T* Os = Qs + qbuf * Br * D;
      // Row i of this tile in O (rows of p.d) and in LSE: [B, H, N_q, d] and [B, H, N_q], or,
      // packed, token q0 + i of [total_q, H, d] and of head h's row of LSE [H, total_q].
      const auto o_row = [&](int64_t i) { return packed.cu_q ? (cur.q0 + i) * p.H + h : (b * p.H + h) * p.N_q + i; };
      const auto lse_at = [&](int64_t i) { return packed.cu_q ? h * packed.total_q + cur.q0 + i : (b * p.H + h) * p.N_q + i; };
      __syncwarp();
      for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        const int row = warp * 16 + g + r * 8;
        const float inv = l[r] == 0.f ? 0.f : 1.f / l[r];
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<uint32_t*>(Os + swz<Br>(row, n) + 2 * t4) = ptx::pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        const int64_t i = r0 + row;
        if (t4 == 0 && i < sp.N_q) LSE[lse_at(i)] = l[r] == 0.f ? neg_inf : fmaf(m2[r], 0.6931471805599453f, logf(l[r]));
      }
      __syncwarp();  // this warp's 16 rows are in; no other warp touches them
      // The 16 rows' first p.d columns, 16 bytes a lane (p.d is a multiple of 8): the zero columns
      // past p.d stay in shared memory.
      const int pieces = int(p.d) / 8;  // per row
      for (int e = lane; e < 16 * pieces; e += 32) {
        const int rr = e / pieces, cv = e % pieces;
        const int64_t i = r0 + warp * 16 + rr;
        // Ragged N_q: rows past it are not written, and no pointer to them is formed.
        if (i < sp.N_q)
          *reinterpret_cast<uint4*>(O + o_row(i) * p.d + cv * 8) = *reinterpret_cast<const uint4*>(Os + swz<Br>(warp * 16 + rr, cv));
      }
      // The Q buffer may take the tile kQ after this one. TMA writes it next, through the async
      // proxy: this thread's reads and writes of it (the ldmatrix of Q's fragments, the staging) are
      // ordered before that first.
      ptx::fence_proxy_async();
      release(empty_q, step);
      n0 += Tc;
    }
  }
}

}  // namespace fa05::v13
