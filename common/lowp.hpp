// 16-bit floating-point storage types for the precision experiment: fp16 (IEEE binary16) and bf16
// (bfloat16), as value types the stages' templated cores can be instantiated with.
//
//   format  sign  exponent  significand  unit roundoff u   max finite   smallest normal
//   fp16    1     5 bits    10+1 bits    2^-11 = 4.9e-4    65504        2^-14 = 6.1e-5
//   bf16    1     8 bits    7+1 bits     2^-8  = 3.9e-3    3.39e38      2^-126 (as float32)
//   fp32    1     8 bits    23+1 bits    2^-24 = 6.0e-8    3.40e38      2^-126
//
// lowp::Half and lowp::BFloat16 hold 16 bits. Every arithmetic operation converts its operands to
// float32, computes there, and rounds the result back to the 16-bit format (round to nearest,
// ties to even). For +, -, *, / and sqrt this gives the correctly rounded 16-bit result: float32
// carries p' = 24 significand bits, at least 2p + 2 for p = 11 (fp16) or p = 8 (bf16), and then
// rounding twice (first to float32, then to the 16-bit format) equals rounding once (Figueroa
// 1995, "When is double rounding innocuous?"). std::exp(x) and std::log(x) pick the float
// overload through the implicit conversion to float, so they are float32's exp/log rounded to
// 16 bits when the result is stored back into the type (within one 16-bit ulp; not always
// correctly rounded).
//
// So "a stage core instantiated with T = Half" is attention in which every intermediate value
// (dot products, scores, the running max, exp, the softmax sum l, the output accumulator) is
// rounded to fp16 after every operation: the "accumulate in the storage precision" configuration.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace lowp {

// ---- bf16 <-> float32 / float64 -------------------------------------------------------------
// bf16 is the top 16 bits of a float32. Round to nearest even: add 0x7FFF plus the lowest kept bit
// and truncate. A carry out of the significand bumps the exponent, which is right (it rounds up to
// the next binade, or to infinity past the largest finite bf16). NaN is handled first: truncating
// a NaN whose payload lives only in the low 16 bits would turn it into infinity, so the quiet bit
// is forced on.
inline uint16_t bf16_bits_from_float(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN stays NaN
  const uint32_t lsb = (u >> 16) & 1u;
  return uint16_t((u + 0x7FFFu + lsb) >> 16);
}
inline float float_from_bf16_bits(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

// From float64: rounding to float32 first and then to a 16-bit format can round twice the wrong
// way (a value just above a 16-bit tie rounds down to the tie in float32, then to even). Round to
// float32 with round-to-ODD instead (if inexact, force the last bit to 1); round-to-odd to p + 2
// or more bits followed by round-to-nearest-even gives the correctly rounded result (Boldo &
// Melquiond 2008). float32 has 24 bits: enough for bf16 (p = 8) and fp16 (p = 11, also where fp16
// is subnormal, since float32 is still normal there).
inline float float_round_to_odd(double x) {
  float f = float(x);
  if (std::isfinite(x) && std::isfinite(f) && double(f) != x) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 1u) == 0) {  // even: step one ulp toward x, which makes it odd
      const bool toward_zero = std::fabs(double(f)) > std::fabs(x);
      u = toward_zero ? u - 1 : u + 1;
    }
    f = std::bit_cast<float>(u);
  }
  return f;
}
inline uint16_t bf16_bits_from_double(double x) { return bf16_bits_from_float(float_round_to_odd(x)); }

// ---- fp16 <-> float32 / float64, on the bits --------------------------------------------------
// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 significand bits. Written out on the bits rather
// than with the compiler's _Float16: GCC 12 at -O3 -march=native on a CPU with AVX512-FP16 was seen
// to produce wrong conversions through _Float16 in vectorised code (a value came back unrounded),
// and nvcc's host pass handles _Float16 differently again; integer code is the same everywhere.
inline uint16_t fp16_bits_from_float(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;                 // |f|
  if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((a >> 13) & 0x1FFu));  // NaN stays NaN
  if (a >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // |f| >= 65520 (65504 + half an ulp): inf
  if (a >= 0x38800000u) {  // normal in fp16 (|f| >= 2^-14): rebias the exponent (127 -> 15), keep
    const uint32_t h = a - 0x38000000u;  // 10 significand bits, round the 13 dropped ones to even;
    const uint32_t rest = h & 0x1FFFu;   // a carry into the exponent is the right result
    uint32_t r = h >> 13;
    r += rest > 0x1000u || (rest == 0x1000u && (r & 1u));
    return uint16_t(sign | r);
  }
  if (a <= 0x33000000u) return sign;  // |f| <= 2^-25: half the smallest subnormal or less rounds to 0
  // Subnormal in fp16: m * 2^-24 with m = |f| * 2^24 rounded to nearest even (m = 1024 is the
  // smallest normal, also right).
  const uint32_t e = a >> 23, M = (a & 0x7FFFFFu) | 0x800000u;  // |f| = M * 2^(e - 150)
  const uint32_t shift = 126 - e;                                // 14 .. 24
  const uint32_t rest = M & ((1u << shift) - 1u), half = 1u << (shift - 1);
  uint32_t m = M >> shift;
  m += rest > half || (rest == half && (m & 1u));
  return uint16_t(sign | m);
}
inline uint16_t fp16_bits_from_double(double x) { return fp16_bits_from_float(float_round_to_odd(x)); }
inline float float_from_fp16_bits(uint16_t b) {
  const uint32_t sign = uint32_t(b & 0x8000u) << 16, e = (b >> 10) & 0x1Fu, m = b & 0x3FFu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float32
    const float v = float(m) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));  // inf, NaN
  return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
}

struct Fp16Tag {
  static uint16_t from(float f) { return fp16_bits_from_float(f); }
  static uint16_t from(double x) { return fp16_bits_from_double(x); }
  static float to(uint16_t b) { return float_from_fp16_bits(b); }
  static constexpr uint16_t inf = 0x7C00, qnan = 0x7E00, max = 0x7BFF, min_normal = 0x0400,
                            denorm_min = 0x0001, eps = 0x1400;  // eps = 2^-10
  static constexpr int digits = 11;
  static constexpr const char* name = "fp16";
};
struct Bf16Tag {
  static uint16_t from(float f) { return bf16_bits_from_float(f); }
  static uint16_t from(double x) { return bf16_bits_from_double(x); }
  static float to(uint16_t b) { return float_from_bf16_bits(b); }
  static constexpr uint16_t inf = 0x7F80, qnan = 0x7FC0, max = 0x7F7F, min_normal = 0x0080,
                            denorm_min = 0x0001, eps = 0x3C00;  // eps = 2^-7
  static constexpr int digits = 8;
  static constexpr const char* name = "bf16";
};

template <class U>
concept Arith = std::is_arithmetic_v<U>;

// A 16-bit float: storage only; arithmetic through float32, rounded back after every operation.
template <class Tag>
struct Narrow {
  uint16_t bits = 0;  // +0

  constexpr Narrow() = default;
  // Implicit from any arithmetic type (so `T x = 0;` and `T(p.resolved_scale())` work in the
  // stage cores). Integers and float go through float32 (exact for the integers used here);
  // double is rounded directly (correctly rounded, see above).
  template <Arith U>
  Narrow(U x) : bits(std::is_same_v<U, double> ? Tag::from(double(x)) : Tag::from(float(x))) {}
  static Narrow from_bits(uint16_t b) {
    Narrow r;
    r.bits = b;
    return r;
  }
  // Implicit to float32 (exact: every 16-bit value is a float32). This is what lets
  // std::exp(x), std::log(x) and std::max(x, y) compile for T = Narrow.
  operator float() const { return Tag::to(bits); }

  friend Narrow operator+(Narrow a, Narrow b) { return Narrow(float(a) + float(b)); }
  friend Narrow operator-(Narrow a, Narrow b) { return Narrow(float(a) - float(b)); }
  friend Narrow operator*(Narrow a, Narrow b) { return Narrow(float(a) * float(b)); }
  friend Narrow operator/(Narrow a, Narrow b) { return Narrow(float(a) / float(b)); }
  friend Narrow operator-(Narrow a) { return from_bits(uint16_t(a.bits ^ 0x8000u)); }
  // Mixed with a plain number (e.g. m + std::log(l), whose log is a float): the number is first
  // rounded to the 16-bit type, as a store to a T variable would, then the operation rounds.
  template <Arith U> friend Narrow operator+(Narrow a, U b) { return a + Narrow(b); }
  template <Arith U> friend Narrow operator+(U a, Narrow b) { return Narrow(a) + b; }
  template <Arith U> friend Narrow operator-(Narrow a, U b) { return a - Narrow(b); }
  template <Arith U> friend Narrow operator-(U a, Narrow b) { return Narrow(a) - b; }
  template <Arith U> friend Narrow operator*(Narrow a, U b) { return a * Narrow(b); }
  template <Arith U> friend Narrow operator*(U a, Narrow b) { return Narrow(a) * b; }
  template <Arith U> friend Narrow operator/(Narrow a, U b) { return a / Narrow(b); }
  template <Arith U> friend Narrow operator/(U a, Narrow b) { return Narrow(a) / b; }
  Narrow& operator+=(Narrow b) { return *this = *this + b; }
  Narrow& operator-=(Narrow b) { return *this = *this - b; }
  Narrow& operator*=(Narrow b) { return *this = *this * b; }
  Narrow& operator/=(Narrow b) { return *this = *this / b; }

  // Comparisons by value (so +0 == -0 and NaN compares unequal to everything, as in IEEE).
  friend bool operator==(Narrow a, Narrow b) { return float(a) == float(b); }
  friend auto operator<=>(Narrow a, Narrow b) { return float(a) <=> float(b); }
  template <Arith U> friend bool operator==(Narrow a, U b) { return float(a) == b; }
  template <Arith U> friend auto operator<=>(Narrow a, U b) { return float(a) <=> b; }
};

using Half = Narrow<Fp16Tag>;
using BFloat16 = Narrow<Bf16Tag>;

// Round a float32 value to the format and back (the "store the input in 16 bits" step).
template <class T>
float round_to(float x) {
  if constexpr (std::is_same_v<T, float>) return x;
  else return float(T(x));
}

}  // namespace lowp

// std::numeric_limits for the two types: the stage cores use infinity(); the experiment uses the
// rest.
template <class Tag>
struct std::numeric_limits<lowp::Narrow<Tag>> {
  using N = lowp::Narrow<Tag>;
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = false;
  static constexpr bool is_iec559 = false;
  static constexpr int radix = 2;
  static constexpr int digits = Tag::digits;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static N min() { return N::from_bits(Tag::min_normal); }
  static N max() { return N::from_bits(Tag::max); }
  static N lowest() { return N::from_bits(uint16_t(Tag::max | 0x8000u)); }
  static N epsilon() { return N::from_bits(Tag::eps); }
  static N round_error() { return N(0.5f); }
  static N infinity() { return N::from_bits(Tag::inf); }
  static N quiet_NaN() { return N::from_bits(Tag::qnan); }
  static N denorm_min() { return N::from_bits(Tag::denorm_min); }
};
