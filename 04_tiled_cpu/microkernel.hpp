// The vectorised pieces of stage 04, kept apart so tiled.hpp reads as the algorithm.
//
// Everything here works on the small block buffers (the "SRAM"), never on Q, K, V, O directly:
//   gemm_qk   S  = scale * Q_i K_j^T    (K_j is stored transposed, Kt[k][c], so a row of Kt is a
//                                        contiguous run of keys: one vector load feeds VW keys)
//   gemm_pv   O_i += P V_j
//   row_max, exp_sub_sum, scale_row     the per-row softmax bookkeeping
// The two GEMMs use a register-blocked micro-kernel: an RM x (NV*VW) tile of the output lives in
// RM*NV vector registers for the whole inner loop; each step loads NV vectors of one operand,
// broadcasts RM scalars of the other and issues RM*NV fused multiply-adds. That ratio of FMAs to
// loads (24 : 10 with AVX-512) is what lets the loop run at the FMA units' speed.
//
// Vectors are GCC vector extensions (vector_size), so the same code compiles for AVX-512, AVX2 or
// plain SSE2 (FA_NATIVE=OFF); the width follows the ISA the compiler targets.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

namespace tiled::mk {

#if defined(__AVX512F__)
inline constexpr const char* kIsa = "AVX-512";  // the vector ISA this build targets
inline constexpr int VW = 16;  // floats per vector register (zmm)
inline constexpr int RM = 6;   // micro-tile rows; RM * NV = 24 accumulators of 32 registers
inline constexpr int NV = 4;   // micro-tile width in vectors (64 floats)
#elif defined(__AVX__)
inline constexpr const char* kIsa = "AVX2";
inline constexpr int VW = 8;   // ymm, 16 registers: 6 x 2 = 12 accumulators
inline constexpr int RM = 6;
inline constexpr int NV = 2;
#else
inline constexpr const char* kIsa = "SSE2";
inline constexpr int VW = 4;   // xmm (SSE2), 16 registers
inline constexpr int RM = 6;
inline constexpr int NV = 2;
#endif

typedef float vf __attribute__((vector_size(VW * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(VW * sizeof(int32_t))));

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
// The row stride (floats) of a block buffer whose rows hold n floats: n rounded up to whole
// vectors, plus 16 floats (64 bytes, one cache line) when that is a multiple of 32 floats. A
// micro-kernel walks down a column panel of such a buffer, one row per step; with a stride of
// 1 KiB (256 keys) the same line of every row falls in one L1 set out of 16, and they evict each
// other (a 4-KiB stride: all in one set). An odd number of 64-byte lines per row spreads them
// over all 64 sets.
inline int64_t row_stride(int64_t n) {
  const int64_t w = round_up(n, VW);
  return w % 32 == 0 ? w + 16 : w;
}
// The block buffers' allocator: every buffer starts on a 64-byte cache line. std::vector's default
// (operator new, malloc) guarantees 16 bytes, so a buffer may start 16, 32 or 48 bytes into a
// line, and a 64-byte zmm load from it then touches two lines: a "split load", two L1 accesses
// for one, in loops that are mostly loads and FMAs. Row strides (row_stride) are whole vectors,
// so once a buffer starts on a line every row does. Measured on a 2-core AVX-512 Xeon VM (README,
// "What each change bought", step 6): the forward 1.08x faster at d = 64, 1.16x at d = 128.
template <class T>
struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t kAlign{alignof(T) > 64 ? alignof(T) : 64};
  LineAligned() = default;
  template <class U>
  constexpr LineAligned(const LineAligned<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n > size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), kAlign));
  }
  void deallocate(T* p, size_t n) noexcept { ::operator delete(p, n * sizeof(T), kAlign); }
};
template <class T, class U>
constexpr bool operator==(const LineAligned<T>&, const LineAligned<U>&) noexcept { return true; }
using Buffer = std::vector<float, LineAligned<float>>;  // a block buffer of the "SRAM"

inline vf load(const float* p) { vf v; std::memcpy(&v, p, sizeof v); return v; }
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{} + x; }

// ---- K_j^T: the transposed copy that gemm_qk reads ---------------------------------------------
// One round of the in-register transpose of a VW x VW square held in v[0..VW-1] (row i in v[i]):
// it swaps bit H of the row index with bit H of the column index. For each row pair (i, i + H),
// element j of the new row i is old row i's element j where bit H of j is 0, and old row i + H's
// element j - H where it is 1; the new row i + H likewise. Each new row is one two-vector shuffle
// (__builtin_shufflevector with constant indices: one vpermt2ps with AVX-512).
template <int H, int... J>
inline void transpose_round(vf* v, std::integer_sequence<int, J...>) {
#pragma GCC unroll 16
  for (int i = 0; i < VW; ++i) {
    if (i & H) continue;
    const vf a = v[i], b = v[i + H];
    v[i] = __builtin_shufflevector(a, b, ((J & H) ? VW + J - H : J)...);
    v[i + H] = __builtin_shufflevector(a, b, ((J & H) ? VW + J : J + H)...);
  }
}

// Kt[x][c] = K[c][x] for keys c < n and dims x < d (K rows ldk apart, Kt rows ldkt apart). Whole
// VW x VW squares go through registers: VW vector loads, log2(VW) rounds of shuffles, VW vector
// stores, instead of VW * VW scalar loads and stores; the ragged edges (n or d not a multiple of
// VW) are copied element by element.
inline void transpose_k(const float* K, int64_t ldk, int64_t n, int64_t d, float* Kt, int64_t ldkt) {
  const int64_t nfull = n / VW * VW, dfull = d / VW * VW;
  for (int64_t c0 = 0; c0 < nfull; c0 += VW) {
    for (int64_t x0 = 0; x0 < dfull; x0 += VW) {
      vf v[VW];
#pragma GCC unroll 16
      for (int i = 0; i < VW; ++i) v[i] = load(K + (c0 + i) * ldk + x0);
      const auto lanes = std::make_integer_sequence<int, VW>{};
      if constexpr (VW >= 16) transpose_round<8>(v, lanes);
      if constexpr (VW >= 8) transpose_round<4>(v, lanes);
      transpose_round<2>(v, lanes);
      transpose_round<1>(v, lanes);
#pragma GCC unroll 16
      for (int i = 0; i < VW; ++i) store(Kt + (x0 + i) * ldkt + c0, v[i]);
    }
    for (int64_t x = dfull; x < d; ++x)
      for (int64_t c = c0; c < c0 + VW; ++c) Kt[x * ldkt + c] = K[c * ldk + x];
  }
  for (int64_t x = 0; x < d; ++x)
    for (int64_t c = nfull; c < n; ++c) Kt[x * ldkt + c] = K[c * ldk + x];
}

// ---- S = scale * Q_i K_j^T --------------------------------------------------------------------
// One R x (NVEC*VW) tile of S: S[r][c] = scale * sum_k Q[r][k] * Kt[k][c].
template <int R, int NVEC>
inline void qk_tile(const float* Q, int64_t ldq, const float* Kt, int64_t ldk, int64_t d,
                    float scale, float* S, int64_t lds) {
  vf acc[R][NVEC] = {};
  for (int64_t k = 0; k < d; ++k) {
    vf b[NVEC];
#pragma GCC unroll 8
    for (int v = 0; v < NVEC; ++v) b[v] = load(Kt + k * ldk + v * VW);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float a = Q[r * ldq + k];
#pragma GCC unroll 8
      for (int v = 0; v < NVEC; ++v) acc[r][v] += a * b[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NVEC; ++v) store(S + r * lds + v * VW, acc[r][v] * scale);
}

// ---- O_i += P V_j -----------------------------------------------------------------------------
// One R x (NVEC*VW) tile of O: O[r][c] += sum_k P[r][k] * V[k][c], k < n.
template <int R, int NVEC>
inline void pv_tile(const float* P, int64_t ldp, const float* V, int64_t ldv, int64_t n, float* O,
                    int64_t ldo) {
  vf acc[R][NVEC];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NVEC; ++v) acc[r][v] = load(O + r * ldo + v * VW);
  for (int64_t k = 0; k < n; ++k) {
    vf b[NVEC];
#pragma GCC unroll 8
    for (int v = 0; v < NVEC; ++v) b[v] = load(V + k * ldv + v * VW);
    // V's panel (a key block's rows, Bc x NVEC*VW floats: 128 KiB at Bc = 512) does not fit in
    // L1, so each row tile streams it from L2; asking for row k + 4 now hides that latency
    // (README, "What each change bought", step 5: 1.04x for the whole forward at d = 64, 1.02x at
    // d = 128 with the aligned buffers of step 6, by hand; without them 0.95x at d = 128).
    // Near the end that address lies past the panel: harmless, a prefetch never faults, and it is
    // formed as an integer, so no out-of-range pointer exists (a clamp to the last row, tried
    // instead, added a compare and a multiply per step and measured slower by hand).
    const uintptr_t ahead = reinterpret_cast<uintptr_t>(V + k * ldv) + uintptr_t(4 * ldv) * sizeof(float);
#pragma GCC unroll 8
    for (int v = 0; v < NVEC; ++v)
      __builtin_prefetch(reinterpret_cast<const void*>(ahead + v * VW * sizeof(float)), 0, 3);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float a = P[r * ldp + k];
#pragma GCC unroll 8
      for (int v = 0; v < NVEC; ++v) acc[r][v] += a * b[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NVEC; ++v) store(O + r * ldo + v * VW, acc[r][v]);
}

// Compile-time tile shapes for the ragged edges: rows < RM or width < NV picks a smaller tile.
template <int R = RM, int NVEC = NV, class... A>
inline void qk_dispatch(int rows, int nvec, A... a) {
  if constexpr (R > 1) if (rows < R) return qk_dispatch<R - 1, NVEC>(rows, nvec, a...);
  if constexpr (NVEC > 1) if (nvec < NVEC) return qk_dispatch<R, NVEC - 1>(rows, nvec, a...);
  qk_tile<R, NVEC>(a...);
}
template <int R = RM, int NVEC = NV, class... A>
inline void pv_dispatch(int rows, int nvec, A... a) {
  if constexpr (R > 1) if (rows < R) return pv_dispatch<R - 1, NVEC>(rows, nvec, a...);
  if constexpr (NVEC > 1) if (nvec < NVEC) return pv_dispatch<R, NVEC - 1>(rows, nvec, a...);
  pv_tile<R, NVEC>(a...);
}

// S (br x ncols) = scale * Q (br x d, leading dim d) * Kt (d x ncols, leading dim ldk).
// ncols is a multiple of VW (the key block padded); column tiles outside, so one d x 64 panel of
// Kt stays in L1 while every row tile of Q passes over it.
inline void gemm_qk(const float* Q, int64_t br, int64_t d, const float* Kt, int64_t ldk,
                    int64_t ncols, float scale, float* S, int64_t lds) {
  for (int64_t c0 = 0; c0 < ncols; c0 += NV * VW) {
    const int nvec = int(ncols - c0 < NV * VW ? (ncols - c0) / VW : NV);
    for (int64_t r0 = 0; r0 < br; r0 += RM)
      qk_dispatch(int(br - r0 < RM ? br - r0 : RM), nvec, Q + r0 * d, d, Kt + c0, ldk, d, scale,
                  S + r0 * lds + c0, lds);
  }
}

// O (br x ncols, leading dim ldo) += P (br x n, leading dim ldp) * V (n x ncols, leading dim ldv).
// ncols is d padded to a multiple of VW (V's pad columns hold zeros).
inline void gemm_pv(const float* P, int64_t ldp, int64_t br, int64_t n, const float* V,
                    int64_t ldv, int64_t ncols, float* O, int64_t ldo) {
  for (int64_t c0 = 0; c0 < ncols; c0 += NV * VW) {
    const int nvec = int(ncols - c0 < NV * VW ? (ncols - c0) / VW : NV);
    for (int64_t r0 = 0; r0 < br; r0 += RM)
      pv_dispatch(int(br - r0 < RM ? br - r0 : RM), nvec, P + r0 * ldp, ldp, V + c0, ldv, n,
                  O + r0 * ldo + c0, ldo);
  }
}

// ---- the softmax bookkeeping on one row of S (n a multiple of VW) ------------------------------
inline float row_max(const float* s, int64_t n) {
  vf mx = splat(-std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < n; c += VW) {
    const vf x = load(s + c);
    mx = x > mx ? x : mx;
  }
  float m = mx[0];
  for (int i = 1; i < VW; ++i) m = mx[i] > m ? mx[i] : m;
  return m;
}

// The shared core: exp(r) for |r| <= ln2 / 2 and the integer n, for x = n ln2 + r (|x| <= 104).
inline vf exp_reduced(vf x, vi& ni) {
  const vf shifter = splat(12582912.f);  // 1.5 * 2^23: adding it rounds to an integer
  const vf t = x * 1.44269504f + shifter;
  const vf n = t - shifter;
  ni = (vi)t - (vi)shifter;              // the same integer, as bits
  const vf r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // ln 2 split hi + lo
  vf e = splat(1.f / 5040.f);
  e = e * r + 1.f / 720.f;
  e = e * r + 1.f / 120.f;
  e = e * r + 1.f / 24.f;
  e = e * r + 1.f / 6.f;
  e = e * r + 0.5f;
  e = e * r + 1.f;
  return e * r + 1.f;
}

// exp(x) for x <= 0 (the only arguments the online softmax produces; positive x work too, up to
// +inf past ln(FLT_MAX) = 88.72): x = n ln2 + r with |r| <= ln2 / 2, exp(r) by its Taylor series
// to r^7 (truncation error < 1e-8, below float rounding), times 2^n built in the exponent bits.
// The exponent bits hold 2^n only for -126 <= n <= 127, so for |n| > 100 the power is built as
// 2^(n -+ 64) and the product scaled by 2^(+-64) afterwards, which rounds once: results below
// FLT_MIN (x < -87.34) come out as float32 subnormals and results past FLT_MAX as +inf, as std::exp
// gives them. x < -103.98 (including -inf, a masked score) gives exactly 0, as std::exp does
// (exp(x) is below half the smallest subnormal there). Against std::exp over every float32 in
// [-104.5, 100.5]: within 0.66 ulp, subnormal results within 0.85 of their ulp (2^-149), zeros and
// infinities where std::exp has them (test_tiled.cpp).
inline vf exp_neg(vf x) {
  const vf lo = splat(-103.98f), hi = splat(100.f);
  const vf xc = x < lo ? lo : x > hi ? hi : x;
  vi ni;
  const vf e = exp_reduced(xc, ni);
  const vi small = ni < -100, big = ni > 100;                   // all ones where true
  const vf two_n = (vf)(((ni + (small & 64) - (big & 64)) + 127) << 23);
  const vf rescale = small ? splat(5.42101086e-20f) : big ? splat(1.84467441e19f) : splat(1.f);  // 2^-64, 2^64
  return x < lo ? splat(0.f) : e * two_n * rescale;
}

// exp(x) for -87 <= x <= 0 only: exp_neg without its edge handling (no clamp, no 2^+-64 steps),
// so about 40% fewer instructions. For such x, n >= -126, so 2^n is a normal float: exp_neg's
// two exact power-of-two steps (2^(n+64), then 2^-64, for n < -100) and one multiplication by
// 2^n round the same way, and both give the same bits (test_tiled.cpp walks the whole interval).
inline vf exp_neg_normal(vf x) {
  vi ni;
  const vf e = exp_reduced(x, ni);
  return e * (vf)((ni + 127) << 23);
}

// s[c] = exp(s[c] - m) in place; returns the sum of the new values (a fixed order: the result
// does not depend on the thread count). A first pass finds the row's smallest s[c] (one load and
// one min per vector, against ~35 instructions per vector of exp_neg): when every s[c] - m is
// >= -87, as in any row without masked (-inf) scores whose scores span less than 87, the cheaper
// exp_neg_normal gives the same bits.
inline float exp_sub_sum(float* s, int64_t n, float m) {
  vf mn = splat(std::numeric_limits<float>::infinity());
  for (int64_t c = 0; c < n; c += VW) {
    const vf x = load(s + c);
    mn = x < mn ? x : mn;
  }
  float lowest = mn[0];
  for (int i = 1; i < VW; ++i) lowest = mn[i] < lowest ? mn[i] : lowest;
  vf sum = {};
  if (lowest - m >= -87.f && m <= std::numeric_limits<float>::max()) {
    for (int64_t c = 0; c < n; c += VW) {
      const vf e = exp_neg_normal(load(s + c) - m);
      store(s + c, e);
      sum += e;
    }
  } else {
    for (int64_t c = 0; c < n; c += VW) {
      const vf e = exp_neg(load(s + c) - m);
      store(s + c, e);
      sum += e;
    }
  }
  float l = 0;
  for (int i = 0; i < VW; ++i) l += sum[i];
  return l;
}

inline void scale_row(float* o, int64_t n, float a) {
  for (int64_t c = 0; c < n; c += VW) store(o + c, load(o + c) * a);
}

}  // namespace tiled::mk
