// Stage 06 on the GPU: the variants of docs/math.md section 8 as policies the backward kernels
// ask, so that their main loops do not change (the sliding window's band, (8.1); the softcap and
// its slope, (8.2)). Read it beside ../backward_tiled.hpp, which does the same on the CPU
// (`queries_seeing`, `crosses`, the slope of dS).
//
// The band (8.1). Query i sees key j iff key_begin(i) <= j < key_end(i) (problem.hpp's
// key_range(), the one place the mask is written), and both ends rise with i. So the rows of a
// query block see one contiguous range of keys, from its first row's key_begin to its last row's
// key_end, and the query blocks that see a key block are one contiguous range too (written here
// with the band's two diagonals, and checked against key_range() by the host test):
//   a key block j runs only the query blocks i_first .. i_last-1 (query_blocks()): with causal,
//     those below the diagonal; with a window, also those whose band has not yet passed it;
//   a (key block, query block) tile is masked only when an edge of the band crosses it
//     (BandTile::crosses()); elsewhere every pair is visible and the mask costs nothing;
//   inside a crossed tile, with kr the key's row in its block and qc the query's in its, the pair
//     is visible iff lo <= kr - qc <= hi (BandTile: the band's two diagonals, shifted to the tile).
// A query block that no key block sees (rows left of key 0) gets no work and dQ = 0.
//
// The deterministic kernels add dQ_i in key-block order, turn after turn. With a window the first
// key block that sees query block i is first_key_block(), not 0: its turns count from there.
//
// Plain C++ on the host too (FA_HOST_DEVICE): the host test checks every function here against
// AttnProblem::visible() pair by pair (test_backward_gpu_host.cpp).
#pragma once
#include <cstdint>

#include "problem.hpp"
#if defined(__CUDACC__)
#include "kernel_common.cuh"  // fa05::softcap
#endif

namespace fa06 {

// (8.1) as two diagonals: query i sees key j (both inside the problem) iff
//   lo <= j - i <= hi,    lo = N_k - N_q - left,  hi = N_k - N_q + right  (causal: right = 0)
// where a side is bounded: has_lo, has_hi. A side of -1, or wider than N_q + N_k, bounds nothing
// (problem.hpp's key_range() treats it so: it cannot reach past the problem).
struct Band {
  bool has_lo, has_hi;
  int64_t lo, hi;
};
FA_HOST_DEVICE inline Band band_of(const fa::AttnProblem& p) {
  const int64_t wide = p.N_q + p.N_k, diag = p.N_k - p.N_q;
  const int64_t right = p.causal ? 0 : p.window_right;
  const bool has_lo = p.window_left >= 0 && p.window_left <= wide, has_hi = right >= 0 && right <= wide;
  return {has_lo, has_hi, has_lo ? diag - p.window_left : 0, has_hi ? diag + right : 0};
}

// The query blocks of Br rows that see some key of c0 .. c0 + bc - 1: first <= i < last (none if
// first >= last). Query block i, rows r0 .. r1, and the key block make the differences j - i from
// c0 - r1 to c0 + bc - 1 - r0, every one of them; some pair is visible iff that range meets
// [lo, hi]: c0 - r1 <= hi (the block's last row reaches the key block: true from some block on)
// and c0 + bc - 1 - r0 >= lo (its first row has not passed it: true up to some block).
struct QueryBlocks {
  int64_t first, last;
};
FA_HOST_DEVICE inline QueryBlocks query_blocks(const fa::AttnProblem& p, int64_t c0, int64_t bc, int64_t Br) {
  const Band band = band_of(p);
  const int64_t Tr = (p.N_q + Br - 1) / Br;
  int64_t first = 0, last = Tr;
  if (band.has_hi) {  // rows r >= X reach key c0: the first block whose last row does
    const int64_t X = c0 - band.hi;
    if (X > p.N_q - 1) return {Tr, Tr};
    first = X <= Br - 1 ? 0 : X / Br;  // the lowest i with i Br + Br - 1 >= X
  }
  if (band.has_lo) {  // rows r <= Y have not passed key c0 + bc - 1: the blocks starting there
    const int64_t Y = c0 + bc - 1 - band.lo;
    if (Y < 0) return {0, 0};
    last = Y / Br + 1 < Tr ? Y / Br + 1 : Tr;
  }
  return {first, last};
}

// The first key block (of Bc keys) that sees query block i (first row r0): the one holding the
// lowest key its rows see, key_begin(r0) = max(0, r0 + lo). The deterministic variants' turn of
// key block j at query block i is j - first_key_block(r0, Bc).
FA_HOST_DEVICE inline int64_t first_key_block(const fa::AttnProblem& p, int64_t r0, int64_t Bc) {
  const Band band = band_of(p);
  return band.has_lo && r0 + band.lo > 0 ? (r0 + band.lo) / Bc : 0;
}

// The band on a tile whose first query is r0 and first key c0: with kr the key's row in the tile
// and qc the query's, the pair is visible iff lo <= kr - qc <= hi (and both are inside the
// problem, which the kernels check apart: kr < bc, qc < br), since j - i = kr - qc + c0 - r0.
// Clamped to [-R, C] (an unbounded side is -R or C), so both fit an int: kr - qc takes the values
// -(R - 1) .. C - 1 on an R x C tile (R queries, C keys), none of which the clamp changes.
struct BandTile {
  int lo, hi;
  // Whether any pair of the R x C tile lies outside the band.
  FA_HOST_DEVICE bool crosses(int R, int C) const { return hi < C - 1 || lo > -(R - 1); }
  FA_HOST_DEVICE bool sees(int kr_minus_qc) const { return lo <= kr_minus_qc && kr_minus_qc <= hi; }
};
FA_HOST_DEVICE inline BandTile band_tile(const fa::AttnProblem& p, int64_t r0, int64_t c0, int R, int C) {
  const Band band = band_of(p);
  const auto clamp = [&](int64_t x) { return int(x < -R ? -R : x > C ? C : x); };
  return {band.has_lo ? clamp(band.lo + r0 - c0) : -R, band.has_hi ? clamp(band.hi + r0 - c0) : C};
}

#if defined(__CUDACC__)
// The softcap (8.2): a scaled score x becomes S = c tanh(x / c), by the forward's own function
// (stage 05's kernel_common.cuh), so that the S recomputed here is the S whose LSE the forward
// kept: tanh(y) = 1 - 2 / (e^{2y} + 1) from exp2f (the SFU's ex2) and one fast division, about
// 1e-7 c absolute. Not tanh.approx.f32: one instruction, but its relative error of 2^-11 moves a
// logit by up to 0.02 at c = 50 and its P = exp(S - LSE) by 2 %, far beyond bf16's rounding of P
// (0.4 %): the battery's rule would (rightly) fail it. In the backward the slope below multiplies
// dS too, so an error in S reaches every gradient twice.
using fa05::softcap;

// Its slope dS/dx = 1 - tanh^2 = 1 - (S / c)^2 (8.2), from the capped S itself; inv_c = 1 / c.
// The backward's dS with respect to x is dS * slope. A masked score (S = -inf) gets 0, not
// 1 - inf (AttnProblem::capped_slope, the same expression: its P is 0, and 0 * -inf is NaN).
__device__ __forceinline__ float softcap_slope(float S, float inv_c) {
  const float t = S * inv_c;
  return t * t >= 1.f ? 0.f : 1.f - t * t;
}
#endif

}  // namespace fa06
