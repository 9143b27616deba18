// FP8 for attention (issue 35), on the host: the e4m3 format Hopper's tensor cores multiply, the
// scales that fit a tensor into its small range, and the random orthogonal transform that
// FlashAttention-3 applies to Q and K before quantising them ("incoherent processing"). Used by
// the FP8 precision model (numerics/fp8_model.hpp, docs/numerics.md "FP8"), which is what a
// GPU FP8 kernel's results are to be held to.
//
//   format  sign  exponent     significand  unit roundoff u   max finite   smallest normal / subnormal
//   e4m3    1     4 (bias 7)   3+1 bits     2^-4 = 0.0625     448          2^-6 / 2^-9
//
// e4m3 here is the "FN" variant of the OCP 8-bit float specification (NVIDIA's __nv_fp8_e4m3,
// PyTorch's float8_e4m3fn): no infinities; the one NaN pattern per sign is all exponent and
// significand bits set (0x7F, 0xFF), which is why the largest finite value is 1.75 x 2^8 = 448
// and not 480. Conversion is round to nearest, ties to even, saturating: a finite value beyond 448
// becomes +-448, as PTX's cvt.rn.satfinite.e4m3x2.f32 does (without satfinite it would be NaN).
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "errors.hpp"
#include "rng.hpp"

namespace fa::fp8 {

constexpr double kE4m3Max = 448.0;          // 0x7E: exponent 15, significand 6
constexpr double kE4m3MinNormal = 0x1p-6;   // exponent 1
constexpr double kE4m3MinSubnormal = 0x1p-9;
constexpr double kE4m3UnitRoundoff = 0x1p-4;  // half the spacing 2^-3 of [1, 2)

// The value of an e4m3 bit pattern (NaN for 0x7F and 0xFF).
inline double e4m3_value(uint8_t bits) {
  const int s = bits >> 7, e = (bits >> 3) & 0xF, m = bits & 0x7;
  if (e == 0xF && m == 0x7) return std::nan("");
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// x rounded to e4m3 (nearest, ties to even; saturating at +-448; NaN stays NaN), as a double: the
// quantum at |x| is 2^(E - 3) for 2^E <= |x| < 2^(E + 1), E >= -6, and 2^-9 below 2^-6 (the
// subnormals), so |x| / quantum is exact and std::nearbyint rounds it to even.
inline double e4m3_round(double x) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return std::copysign(kE4m3Max, x);  // satfinite
  const double a = std::fabs(x);
  if (a == 0) return x;
  int E = std::ilogb(a);  // floor(log2 a) for finite a > 0
  if (E < -6) E = -6;     // subnormal: the quantum of the lowest binade
  const double quantum = std::ldexp(1.0, E - 3);
  double q = std::nearbyint(a / quantum) * quantum;  // may carry into the next binade: representable
  if (q > kE4m3Max) q = kE4m3Max;                     // satfinite
  return std::copysign(q, x);
}

// The e4m3 bit pattern of x (as e4m3_round rounds it; -0 and negatives that round to 0 give 0x80).
// Throws InputError for NaN (the storage model refuses non-finite inputs before quantising).
inline uint8_t e4m3_bits(double x) {
  if (std::isnan(x)) throw InputError("fp8", "a number to encode", "NaN");
  const double q = e4m3_round(x);
  const uint8_t s = std::signbit(q) ? 0x80 : 0;
  const double a = std::fabs(q);
  if (a == 0) return s;
  if (a < kE4m3MinNormal) return uint8_t(s | uint8_t(a / kE4m3MinSubnormal));  // m of the subnormal
  const int E = std::ilogb(a);
  const int m = int(std::ldexp(a, -E) * 8.0) - 8;  // (a / 2^E - 1) * 8, exact
  return uint8_t(s | uint8_t((E + 7) << 3) | uint8_t(m));
}

// The scale that maps a tensor (or a block of one) whose largest |x| is amax onto e4m3's range:
// x is stored as e4m3(x / scale) and read back as e4m3(x / scale) * scale. amax / 448 puts the
// largest element at the largest finite value (FlashAttention-3's per-block scales, Sec. 3.3).
// An all-zero block gets scale 1.
inline double e4m3_scale(double amax) { return amax > 0 ? amax / kE4m3Max : 1.0; }

// The power-of-two scale for a block whose largest |x| is amax: the smallest s = 2^k with
// amax / s <= 448, so the largest element lands in (224, 448]. The course's FP8 kernel (v15) uses
// these, not e4m3_scale's amax / 448: multiplying an e4m3 value by 2^k is exact in float32, so a
// quantised tensor read back is exactly representable (the battery hands every stage the same
// values), and quantising it again gives the same values (the same bytes and scales too, except
// where a block's largest value rounded down to 224 s: then s / 2 and bytes twice as large). What it costs: the largest
// element sits up to one binade below 448, so the subnormal tail begins up to one binade higher;
// values in e4m3's normal range keep the same relative precision (2^-4) whatever the scale. The
// OCP MX formats' E8M0 scales are powers of two for the same reasons. An all-zero block gets 1.
inline double e4m3_pow2_scale(double amax) {
  if (!(amax > 0)) return 1.0;
  double s = std::ldexp(1.0, std::ilogb(amax / kE4m3Max));  // 2^floor(log2(amax / 448))
  if (amax / s > kE4m3Max) s *= 2;
  return s;
}

// A (slices, rows, d) tensor in e4m3 with one power-of-two scale per block of rows_per_block rows
// of one slice (a block never spans two slices; the last one of a slice may be short): element
// (z, r, c) is e4m3_value(bits[(z rows + r) d + c]) * scales[z blocks_per_slice + r / rows_per_block].
// What v15 reads: Q with blocks of 64 rows per (b, h), K and V with blocks of 128 keys per
// (b, kv head) (runner_fp8.hpp).
struct E4m3Blocks {
  std::vector<uint8_t> bits;
  std::vector<float> scales;
  int64_t slices = 0, rows = 0, d = 0, rows_per_block = 0, blocks_per_slice = 0;
};

// x (slices x rows x d floats, row-major) quantised as E4m3Blocks says, each element rounded to
// nearest even after dividing by its block's scale (exact: a power of two). Throws InputError for
// a non-finite element (which argument: `what`) or rows_per_block < 1.
inline E4m3Blocks quantize_e4m3_blocks(const float* x, int64_t slices, int64_t rows, int64_t d, int64_t rows_per_block,
                                       const std::string& what = "Q/K/V") {
  if (rows_per_block < 1) throw InputError("rows_per_block (fp8)", "at least 1", std::to_string(rows_per_block));
  E4m3Blocks q;
  q.slices = slices, q.rows = rows, q.d = d, q.rows_per_block = rows_per_block;
  q.blocks_per_slice = (rows + rows_per_block - 1) / rows_per_block;
  q.bits.resize(size_t(slices * rows * d));
  q.scales.resize(size_t(slices * q.blocks_per_slice));
  for (int64_t z = 0; z < slices; ++z)
    for (int64_t b = 0; b < q.blocks_per_slice; ++b) {
      const int64_t e0 = (z * rows + b * rows_per_block) * d, e1 = (z * rows + std::min(rows, (b + 1) * rows_per_block)) * d;
      double amax = 0;
      for (int64_t e = e0; e < e1; ++e) {
        if (!std::isfinite(x[e])) throw InputError(what, "finite values to quantise to e4m3", std::to_string(x[e]));
        amax = std::max(amax, double(std::fabs(x[e])));
      }
      const double s = e4m3_pow2_scale(amax);
      q.scales[size_t(z * q.blocks_per_slice + b)] = float(s);
      for (int64_t e = e0; e < e1; ++e) q.bits[size_t(e)] = e4m3_bits(double(x[e]) / s);
    }
  return q;
}

// The value of element e of q (its bits times its block's scale), exact in float32.
inline float e4m3_blocks_value(const E4m3Blocks& q, int64_t e) {
  const int64_t row = e / q.d, z = row / q.rows, b = (row % q.rows) / q.rows_per_block;
  return float(e4m3_value(q.bits[size_t(e)]) * double(q.scales[size_t(z * q.blocks_per_slice + b)]));
}

// x replaced, in place, by what quantize_e4m3_blocks stores for it, read back (the battery's
// rounding of the inputs for an FP8 stage: every stage then sees the kernel's values).
inline void round_e4m3_blocks(float* x, int64_t slices, int64_t rows, int64_t d, int64_t rows_per_block,
                              const std::string& what = "Q/K/V") {
  const E4m3Blocks q = quantize_e4m3_blocks(x, slices, rows, d, rows_per_block, what);
  for (int64_t e = 0; e < slices * rows * d; ++e) x[e] = e4m3_blocks_value(q, e);
}

// The fast Walsh-Hadamard transform of x (length n, a power of two), normalised by 1/sqrt(n): the
// orthonormal, symmetric H_n, so H_n H_n = I. O(n log n).
inline void hadamard_inplace(double* x, int64_t n) {
  if (n <= 0 || (n & (n - 1)) != 0)
    throw InputError("d (fp8::hadamard_inplace)", "a power of two for the Hadamard transform", std::to_string(n));
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const double a = x[j], b = x[j + h];
        x[j] = a + b, x[j + h] = a - b;
      }
  const double r = 1.0 / std::sqrt(double(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= r;
}

// Incoherent processing (FlashAttention-3, Sec. 3.3): a row q (or k) of length d becomes
// H_d diag(signs) q. The same signs (+-1, one per head dim) for Q and K of a head, so that
// (H D q) . (H D k) = q^T D H^T H D k = q . k in exact arithmetic: S is unchanged, while an
// outlier in one dim of q is spread over all d dims before quantisation. row holds signs.size()
// elements. Throws InputError if a sign is not +1 or -1 (the transform would not be orthogonal).
inline void incoherent_inplace(double* row, const std::vector<double>& signs) {
  const int64_t d = int64_t(signs.size());
  for (double e : signs)
    if (e != 1.0 && e != -1.0) throw InputError("signs (fp8::incoherent_inplace)", "+1 or -1 each", std::to_string(e));
  for (int64_t i = 0; i < d; ++i) row[i] *= signs[size_t(i)];
  hadamard_inplace(row, d);
}

// d random signs (+1 or -1, each with probability 1/2) from seed, for incoherent_inplace.
inline std::vector<double> random_signs(int64_t d, uint64_t seed) {
  Rng rng(seed);
  std::vector<double> signs(static_cast<size_t>(d));
  for (double& e : signs) e = rng.uniform() < 0.5 ? -1.0 : 1.0;
  return signs;
}

}  // namespace fa::fp8
