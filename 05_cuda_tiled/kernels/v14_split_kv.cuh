// v14: decode. A query block of 1 to 16 rows against a long KV cache is a read of K and V, so the
// kernel's one job is to keep every SM streaming K/V. Two ideas, both stage 03's merge():
//
//   1. GQA packing. The G = H / H_kv query heads that read one kv head become rows of one tile:
//      packed row r is (query head g G + r / N_q, query r % N_q), and rows r, r + 1, ... are
//      consecutive in memory (Q [B, H, N_q, d]), so the tile is one strided copy. Each K/V tile
//      is read once per kv head, not once per query head (G = 4 for Llama-3-8B: 4x fewer bytes).
//   2. Split-KV. The keys of one (batch, kv head) are cut into `splits` ranges of whole 64-key
//      tiles, one thread block each, so that a batch of a few sequences still fills 132 SMs. Each
//      block returns its partial state over its keys, (O_s normalised, LSE_s); combine_kernel()
//      merges them: O = sum_s exp(LSE_s - LSE) O_s with LSE = log sum_s exp(LSE_s). That is
//      stage 03's merge() of (m, l, O) states in log form, so the result is exact up to
//      rounding, whatever the split (Milakov & Gimelshein 2018, Section 3.1; FlashAttention-2's
//      and FlashDecoding's split-KV, Dao et al. 2023).
//
// Inside a block the same merge a third time: its 4 warps share each 64-key tile, 16 keys each
// (rows are few, keys many: a prefill kernel splits rows over warps, this one splits keys), each
// warp keeps its own (m, l, O) over its keys, and the 4 states are merged in shared memory at the
// end. The arithmetic per warp is v5's loop body (mma.sync m16n8k16, ldmatrix, exp2) on a 16 x 16
// score tile; the K/V tiles arrive through a 3-deep cp.async ring (two tiles in flight while one
// is used: bytes in flight are what a bandwidth-bound kernel needs).
//
// Compiled for D = 32, 64, 96, 128, 192, 256 (v13's widths); any d that is a multiple of 8 reads
// rows d wide and fills the columns up to D with zeros (cp.async's zero fill); others run on
// padded copies (runner.cu). Rows past the tile's packed rows and keys past the split are masked.
//
// A KV cache (runner.hpp, KvCache; common/kv_cache.hpp): each sequence b its own key count lens[b],
// to which the causal diagonal is aligned, and K/V either contiguous or in pages that a block table
// maps (vLLM's PagedAttention layout, Kwon et al. 2023). Paging changes only where a key row is
// read from, a table lookup per row; the arithmetic is the same. The lookups of a tile are made
// one tile ahead of its copy, by 64 threads, into shared memory (Roff below): looked up just
// before its copy, a tile's lookups waited out their own latency each time, and pages of any size
// ran 35-45 % slower than contiguous K/V (lab notebook).
//
// The variants (math.md section 8), as in v13: a sliding window moves where the splits start (the
// keys from the tile's first key_begin, so a window of w keys splits w + N_q keys, not the cache),
// and each row masks both ends of its key_range(); a softcap transforms S before the mask.
#pragma once
#include <cstdint>

#include "kernel_common.cuh"
#include "problem.hpp"
#include "ptx.cuh"

namespace fa05::v14 {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kRows = 16;                   // packed query rows per block (one mma row tile)
constexpr int kKeysPerWarp = 16;            // of each K/V tile
constexpr int Bc = kWarps * kKeysPerWarp;   // keys per K/V tile
// K/V tiles in the ring: three (two in flight while one is used); two at D = 256, where three
// would not fit an A100's 163 KiB.
__host__ __device__ constexpr int stages(int D) { return D <= 192 ? 3 : 2; }
template <int D>
constexpr int kPitch = D + 8;  // 16 bytes of padding per row: ldmatrix's 8 rows hit 8 bank groups (v2)
// Q's tile, the K and V rings, and (read by the paged kernel) each ring tile's key-row offsets.
__host__ __device__ constexpr int smem_bytes(int D) { return (kRows + stages(D) * 2 * Bc) * (D + 8) * 2 + stages(D) * Bc * 8; }

// The KV cache as the kernel reads it (runner.hpp, KvCache): device arrays, nullptr when absent.
struct Cache {
  const int32_t* lens;   // [B] keys per sequence; nullptr: N_k each
  const int32_t* table;  // [B, pages_per_seq] page of keys n P ... n P + P - 1; nullptr: contiguous
  int P;                 // page size (keys)
  int64_t pages_per_seq, num_pages;
};

// Copies rows x D elements into a (kR, D + 8) shared tile, 16 bytes per cp.async; row(r) gives the
// address of row r (d elements; nullptr: not there). Rows past `rows`, rows without an address and
// columns past d are filled with zeros (src-size 0 reads nothing) and never read as data. Used for
// Q's tile, once a block (the K/V tiles: copy_kv_tiles below).
template <int D, int kR, class T, class Row>
__device__ __forceinline__ void copy_tile_async(T* dst, const Row& row, int rows, int d, const T* any) {
  constexpr int kVecs = D / 8;
  for (int e = threadIdx.x; e < kR * kVecs; e += kThreads) {
    const int r = e / kVecs, c = e % kVecs * 8;
    const T* src = r < rows && c < d ? row(r) : nullptr;
    ptx::cp_async_16(dst + r * kPitch<D> + c, src ? src + c : any, src != nullptr);
  }
}

// The K and V tiles of the same Bc rows into two (Bc, D + 8) shared tiles: row r of each from
// element offset(r) of K and V (-1: not there, zeros), rows past `rows` and columns past d zeros
// (src-size 0 reads nothing), 16 bytes per cp.async. K and V share one offset. The offsets are
// taken 4 rows at a time before their copies are issued: each cp.async is a memory barrier to the
// compiler, so an offset read between two copies (the page table, or Roff in shared memory) waits
// out its own latency alone (measured with the table: one lookup per copy ran the paged kernel at
// half the contiguous one's speed, lab notebook).
// Where kThreads is a multiple of D / 8 (D = 32, 64, 128, 256), a thread copies the same 16-byte
// column c of rows r0, r0 + kStep, ...: c and the shared-memory offsets are constants of the
// thread, and a row's source is one multiply-add away. The general loop (D = 96, 192) recomputes
// row and column for every copy: at d = 128 that address arithmetic was about half the kernel's
// instructions a tile (its SASS), in a kernel that ncu found issuing on half its cycles.
template <int D, class T, class Offset>
__device__ __forceinline__ void copy_kv_tiles(T* Kdst, T* Vdst, const T* K, const T* V, const Offset& offset,
                                              int rows, int d) {
  constexpr int kVecs = D / 8, kTotal = Bc * kVecs, kChunk = 4;
  if constexpr (kThreads % kVecs == 0) {
    constexpr int kStep = kThreads / kVecs, kPer = Bc / kStep;
    const int c = threadIdx.x % kVecs * 8, r0 = threadIdx.x / kVecs;
#pragma unroll
    for (int i0 = 0; i0 < kPer; i0 += kChunk) {
      int64_t off[kChunk];
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        const int r = r0 + (i0 + i) * kStep;
        off[i] = i0 + i < kPer && r < rows && c < d ? offset(r) : -1;
      }
#pragma unroll
      for (int i = 0; i < kChunk && i0 + i < kPer; ++i) {
        const int r = r0 + (i0 + i) * kStep;
        const bool ok = off[i] >= 0;
        ptx::cp_async_16(Kdst + r * kPitch<D> + c, K + (ok ? off[i] + c : 0), ok);
        ptx::cp_async_16(Vdst + r * kPitch<D> + c, V + (ok ? off[i] + c : 0), ok);
      }
    }
  } else {  // D = 96, 192: element e of the tile is row e / kVecs, column e % kVecs
    for (int e0 = threadIdx.x; e0 < kTotal; e0 += kChunk * kThreads) {
      int64_t off[kChunk];
      for (int k = 0; k < kChunk; ++k) {
        const int e = e0 + k * kThreads, r = e / kVecs, c = e % kVecs * 8;
        off[k] = e < kTotal && r < rows && c < d ? offset(r) : -1;
      }
      for (int k = 0; k < kChunk; ++k) {
        const int e = e0 + k * kThreads, r = e / kVecs, c = e % kVecs * 8;
        if (e >= kTotal) break;
        const bool ok = off[k] >= 0;
        ptx::cp_async_16(Kdst + r * kPitch<D> + c, K + (ok ? off[k] + c : 0), ok);
        ptx::cp_async_16(Vdst + r * kPitch<D> + c, V + (ok ? off[k] + c : 0), ok);
      }
    }
  }
}

// One block: (batch b, kv head g, packed row tile rt, split s). With splits == 1 it writes O and
// LSE; otherwise O_part [splits, B H N_q, d] (fp32, normalised) and LSE_part [splits, B H N_q].
template <class T, int D, bool kPaged>
__global__ void __launch_bounds__(kThreads)
forward_kernel(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
               T* __restrict__ O, float* __restrict__ LSE, float* __restrict__ O_part,
               float* __restrict__ LSE_part, const fa::AttnProblem p, const float scale, const int splits,
               const int64_t keys_per_split, const int64_t row_tiles, const Cache cache) {
  extern __shared__ __align__(16) unsigned char sram[];
  constexpr int P = kPitch<D>, kStages = stages(D);
  T* Qt = reinterpret_cast<T*>(sram);  // (kRows, P)
  T* Ks = Qt + kRows * P;              // (kStages, Bc, P): tile j in buffer j % kStages
  T* Vs = Ks + kStages * Bc * P;       // (kStages, Bc, P)
  // Paged: key row r of ring tile buf sits Roff[buf Bc + r] elements into K and V (-1: no page).
  int64_t* Roff = reinterpret_cast<int64_t*>(Vs + kStages * Bc * P);  // (kStages, Bc)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g4 = lane / 4, t4 = lane % 4;  // fragment coordinates (ptx.cuh)
  const float neg_inf = -INFINITY;
  // scale log2(e): exp(scale x) = 2^(c x); with a softcap, S is scaled and capped first (below).
  const float c = p.softcap > 0.f ? 1.4426950408889634f : scale * 1.4426950408889634f;

  // The task: t = ((b H_kv + g) row_tiles + rt) splits + s (the splits of one tile side by side).
  const int64_t G = p.H / p.H_kv, R = G * p.N_q;  // packed rows of one (b, kv head)
  const int64_t t = blockIdx.x;
  const int s = int(t % splits);
  const int64_t rt = t / splits % row_tiles, bg = t / splits / row_tiles;
  const int64_t b = bg / p.H_kv, g = bg % p.H_kv;
  const int64_t r0 = rt * kRows;  // first packed row
  const int rows = int(min(int64_t(kRows), R - r0));
  const int64_t row0 = (b * p.H + g * G) * p.N_q + r0;  // its (b, h, i) index: Q, O rows, LSE entries
  // The problem as sequence b sees it: N_k is its own key count (the causal diagonal follows it).
  fa::AttnProblem pb = p;
  if (cache.lens) pb.N_k = min(max(int64_t(cache.lens[b]), int64_t(0)), p.N_k);
  // Paged (a kernel of its own, so the contiguous copy keeps its few instructions: measured, lab
  // notebook): key j of this (b, kv head) is row j % P of page table[b, j / P]; a page outside the
  // cache reads as zeros. Thread r < Bc looks up row r of the tile of keys kj ... kj + bn - 1 in
  // two halves, so that the table's latency passes while the thread computes: page_of() issues
  // the load, put_offset() (a tile's work later) stores the row's offset into Roff.
  const auto page_of = [&](int64_t kj, int bn) -> int32_t {
    const int r = threadIdx.x;  // paged: N_k < 2^31 (plan()), so 32-bit division
    return r < bn ? cache.table[b * cache.pages_per_seq + (int(kj) + r) / cache.P] : -1;
  };
  const auto put_offset = [&](int buf, int64_t kj, int32_t page) {
    const int r = threadIdx.x, j = int(kj) + r;
    const bool ok = page >= 0 && page < cache.num_pages;
    Roff[buf * Bc + r] = ok ? ((int64_t(page) * p.H_kv + g) * cache.P + j % cache.P) * p.d : -1;
  };
  // The K/V tile of keys kj ... kj + bn - 1 into ring buffer `buf`. Contiguous: rows d apart from
  // the tile's first. Paged: at the offsets in Roff's buffer `buf`.
  const auto copy_kv = [&](int buf, int64_t kj, int bn) {
    if constexpr (kPaged) {
      const int64_t* off = Roff + buf * Bc;
      copy_kv_tiles<D>(Ks + buf * Bc * P, Vs + buf * Bc * P, K, V, [&](int r) { return off[r]; }, bn, int(p.d));
    } else {
      const int64_t first = (bg * p.N_k + kj) * p.d;
      copy_kv_tiles<D>(Ks + buf * Bc * P, Vs + buf * Bc * P, K, V, [&](int r) { return first + int64_t(r) * p.d; }, bn,
                       int(p.d));
    }
  };

  // This split's keys [k0, k1): the splits cut the keys the tile's rows see, from the first
  // row's key_begin (0 without a window) to the last key any row sees (causal: its diagonal).
  int64_t seen_lo = pb.N_k, seen_hi = 0;
  for (int r = 0; r < rows; ++r) {
    const fa::AttnProblem::KeyRange kr = pb.key_range((r0 + r) % p.N_q);
    if (kr.end > kr.begin) seen_lo = min(seen_lo, kr.begin), seen_hi = max(seen_hi, kr.end);
  }
  const int64_t k0 = seen_lo + s * keys_per_split, k1 = min(k0 + keys_per_split, seen_hi);
  const int tiles = k1 > k0 ? int((k1 - k0 + Bc - 1) / Bc) : 0;

  const auto tile_keys = [&](int j) { return int(min(int64_t(Bc), k1 - (k0 + int64_t(j) * Bc))); };
  // Paged: the offsets of the first kStages tiles (the loop looks up each next one a tile ahead).
  if constexpr (kPaged) {
    if (threadIdx.x < Bc)
      for (int j = 0; j < kStages && j < tiles; ++j) put_offset(j, k0 + int64_t(j) * Bc, page_of(k0 + int64_t(j) * Bc, tile_keys(j)));
    __syncthreads();
  }
  // Q's tile and the first kStages - 1 K/V tiles, each its own cp.async group.
  copy_tile_async<D, kRows>(Qt, [&](int r) { return Q + (row0 + r) * p.d; }, rows, int(p.d), Q);
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < tiles) copy_kv(j, k0 + int64_t(j) * Bc, tile_keys(j));
    ptx::cp_async_commit();
  }
  ptx::cp_async_wait<kStages - 2>();  // Q and tile 0 have landed (this thread's copies)
  __syncthreads();

  uint32_t q[D / 16][4];  // the tile's 16 rows as A fragments, all warps alike (v5)
  for (int k = 0; k < D / 16; ++k)
    ptx::ldmatrix_x4(q[k], Qt + (lane % 8 + (lane / 8 % 2) * 8) * P + k * 16 + lane / 16 * 8);

  // This warp's state over its keys (16 of each tile): rows g4 (index 0) and g4 + 8 (index 1).
  float o[D / 8][4] = {};
  float m2[2] = {neg_inf, neg_inf};  // running max of c S, log2 units (v5)
  float l[2] = {0.f, 0.f};           // this lane's share of the row sum
  // The split's keys row r sees: keys k0 + lo[r] ... k0 + hi[r] - 1.
  int64_t lo[2], hi[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t pr = r0 + g4 + 8 * r;
    const fa::AttnProblem::KeyRange kr = pb.key_range(pr % p.N_q);
    lo[r] = kr.begin - k0, hi[r] = pr < R ? min(k1, kr.end) - k0 : 0;
  }

  for (int j = 0; j < tiles; ++j) {
    // Tile j has landed (this thread: the wait; all: the barrier), and every warp is done with
    // tile j - 1, whose buffer now takes tile j + kStages - 1.
    if (j > 0) {
      ptx::cp_async_wait<kStages - 2>();
      __syncthreads();
    }
    {
      const int jn = j + kStages - 1;
      if (jn < tiles) copy_kv(jn % kStages, k0 + int64_t(jn) * Bc, tile_keys(jn));
      ptx::cp_async_commit();  // empty near the end: the wait above stays uniform
    }
    // Paged: tile j + kStages's pages, into the buffer tile j's offsets held (its copy was issued
    // kStages - 1 tiles ago); the load is issued now and stored after this tile's work.
    [[maybe_unused]] int32_t next_page = -1;
    if constexpr (kPaged)
      if (threadIdx.x < Bc && j + kStages < tiles) next_page = page_of(k0 + int64_t(j + kStages) * Bc, tile_keys(j + kStages));
    const T* Kj = Ks + j % kStages * Bc * P + warp * kKeysPerWarp * P;  // this warp's 16 keys
    const T* Vj = Vs + j % kStages * Bc * P + warp * kKeysPerWarp * P;

    // S = Q K_w^T, 16 rows x 16 keys: s[n] is the 16 x 8 fragment of keys 8n .. 8n+7 (v5).
    float sc[2][4] = {};
    for (int k = 0; k < D / 16; ++k) {
      uint32_t kf[4];
      ptx::ldmatrix_x4(kf, Kj + (lane / 16 * 8 + lane % 8) * P + k * 16 + (lane / 8 % 2) * 8);
      ptx::mma_m16n8k16<T>(sc[0], q[k], kf[0], kf[1]);
      ptx::mma_m16n8k16<T>(sc[1], q[k], kf[2], kf[3]);
    }
    if (p.softcap > 0.f)  // c tanh(x / c) of the scaled scores (math.md (8.2)), before the mask
      for (int n = 0; n < 2; ++n)
        for (int e = 0; e < 4; ++e) sc[n][e] = softcap(sc[n][e] * scale, p.softcap);
    // Keys this row does not see (past the split, the cache, the causal diagonal; before the
    // window's start): -inf.
    const int64_t key0 = int64_t(j) * Bc + warp * kKeysPerWarp;  // relative to k0
    for (int r = 0; r < 2; ++r)
      for (int n = 0; n < 2; ++n)
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          const int64_t key = key0 + n * 8 + 2 * t4 + e % 2;
          if (key < lo[r] || key >= hi[r]) sc[n][e] = neg_inf;
        }

    // Online softmax over this warp's keys (v5's, with Bc / 8 = 2 fragments).
    for (int r = 0; r < 2; ++r) {
      float mx = fmaxf(fmaxf(sc[0][2 * r], sc[0][2 * r + 1]), fmaxf(sc[1][2 * r], sc[1][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m2_new = fmaxf(m2[r], mx * c);
      const float m2_use = m2_new == neg_inf ? 0.f : m2_new;  // no -inf - -inf
      const float alpha = ptx::ex2(m2[r] - m2_use);
      float rowsum = 0.f;
      for (int n = 0; n < 2; ++n)
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          sc[n][e] = ptx::ex2(fmaf(sc[n][e], c, -m2_use));
          rowsum += sc[n][e];
        }
      l[r] = fmaf(alpha, l[r], rowsum);
      m2[r] = m2_new;
      for (int n = 0; n < D / 8; ++n) o[n][2 * r] *= alpha, o[n][2 * r + 1] *= alpha;
    }

    // O += P V_w: P's two C fragments are the A fragment of one 16 x 16 slice (v5).
    const uint32_t a[4] = {ptx::pack2<T>(sc[0][0], sc[0][1]), ptx::pack2<T>(sc[0][2], sc[0][3]),
                           ptx::pack2<T>(sc[1][0], sc[1][1]), ptx::pack2<T>(sc[1][2], sc[1][3])};
    for (int n = 0; n < D / 8; n += 2) {
      uint32_t vf[4];
      ptx::ldmatrix_x4_trans(vf, Vj + ((lane / 8 % 2) * 8 + lane % 8) * P + n * 8 + lane / 16 * 8);
      ptx::mma_m16n8k16<T>(o[n], a, vf[0], vf[1]);
      ptx::mma_m16n8k16<T>(o[n + 1], a, vf[2], vf[3]);
    }
    if constexpr (kPaged)  // read by the copy of tile j + kStages, after the next iteration's barrier
      if (threadIdx.x < Bc && j + kStages < tiles) put_offset(j % kStages, k0 + int64_t(j + kStages) * Bc, next_page);
  }

  // Merge the 4 warps' states (stage 03's merge, in shared memory), then write. The ring is free
  // once every copy has landed and every warp has left the loop.
  ptx::cp_async_wait<0>();
  __syncthreads();
  float* m_w = reinterpret_cast<float*>(Ks);  // (kWarps, kRows): each warp's m2 per row
  float* l_w = m_w + kWarps * kRows;          // (kWarps, kRows): its row sum
  float* O_w = l_w + kWarps * kRows;          // (kWarps, kRows, D): its O, rescaled to the common max
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    if (t4 == 0) m_w[warp * kRows + g4 + 8 * r] = m2[r], l_w[warp * kRows + g4 + 8 * r] = l[r];
  }
  __syncthreads();
  for (int r = 0; r < 2; ++r) {
    const int row = g4 + 8 * r;
    float M = neg_inf;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_w[w * kRows + row]);
    const float beta = M == neg_inf ? 0.f : ptx::ex2(m2[r] - M);  // exp(m_w - m)
    for (int n = 0; n < D / 8; ++n) {
      O_w[(warp * kRows + row) * D + n * 8 + 2 * t4] = o[n][2 * r] * beta;
      O_w[(warp * kRows + row) * D + n * 8 + 2 * t4 + 1] = o[n][2 * r + 1] * beta;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < rows * D; e += kThreads) {
    const int row = e / D, col = e % D;
    if (col >= p.d) continue;
    float M = neg_inf, L = 0.f, acc = 0.f;
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_w[w * kRows + row]);
    for (int w = 0; w < kWarps; ++w) {  // the same order in every thread: deterministic
      const float mw = m_w[w * kRows + row];
      L += mw == neg_inf ? 0.f : l_w[w * kRows + row] * ptx::ex2(mw - M);
      acc += O_w[(w * kRows + row) * D + col];
    }
    const float inv = L == 0.f ? 0.f : 1.f / L;  // a row that saw no key here: O = 0, LSE = -inf
    const float lse = L == 0.f ? neg_inf : fmaf(M, 0.6931471805599453f, logf(L));
    const int64_t i = row0 + row;
    if (splits == 1) {
      O[i * p.d + col] = store<T>(acc * inv);
      if (col == 0) LSE[i] = lse;
    } else {
      const int64_t rows_all = p.B * p.H * p.N_q;
      O_part[(s * rows_all + i) * p.d + col] = acc * inv;
      if (col == 0) LSE_part[s * rows_all + i] = lse;
    }
  }
}

// The second pass: for each (b, h, i) row, merge its splits' states. One warp per row; lane c
// holds columns c, c + 32, ... Stage 03's merge() in log form (its (m, l) pair is LSE_s):
//   LSE = M + log sum_s exp(LSE_s - M),  O = sum_s exp(LSE_s - LSE) O_s,  M = max_s LSE_s.
template <class T>
__global__ void __launch_bounds__(kThreads)
combine_kernel(const float* __restrict__ O_part, const float* __restrict__ LSE_part, T* __restrict__ O,
               float* __restrict__ LSE, const int64_t rows_all, const int64_t d, const int splits) {
  const int64_t i = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= rows_all) return;
  float M = -INFINITY;
  for (int s = 0; s < splits; ++s) M = fmaxf(M, LSE_part[s * rows_all + i]);
  if (M == -INFINITY) {  // no split saw a key: the row that sees none
    for (int64_t col = lane; col < d; col += 32) O[i * d + col] = store<T>(0.f);
    if (lane == 0) LSE[i] = -INFINITY;
    return;
  }
  float L = 0.f;
  for (int s = 0; s < splits; ++s) L += expf(LSE_part[s * rows_all + i] - M);
  const float lse = M + logf(L);
  for (int64_t col = lane; col < d; col += 32) {
    float acc = 0.f;
    for (int s = 0; s < splits; ++s)
      acc += expf(LSE_part[s * rows_all + i] - lse) * O_part[(s * rows_all + i) * d + col];
    O[i * d + col] = store<T>(acc);
  }
  if (lane == 0) LSE[i] = lse;
}

}  // namespace fa05::v14
