// The element types a GPU stage stores Q, K, V and O in (`--dtype`), and the host-side rounding
// that turns the float32 tensors every stage reads into them. LSE is float32 whatever the dtype.
//
//   dtype  bytes  what                     unit roundoff u   largest finite
//   fp32   4      IEEE binary32            2^-24             3.40e38
//   fp16   2      IEEE binary16 (half)     2^-11             65504
//   bf16   2      bfloat16 (top of fp32)   2^-8              3.39e38
//
// Rounding is round-to-nearest-even (common/lowp.hpp), the same as the GPU's __float2half_rn and
// __float2bfloat16_rn, so a tensor rounded here equals the one the kernel reads.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "errors.hpp"
#include "lowp.hpp"
#include "tensor.hpp"

namespace fa {

enum class DType { fp32 = 0, fp16 = 1, bf16 = 2 };

inline const char* dtype_name(DType t) {
  return t == DType::fp32 ? "fp32" : t == DType::fp16 ? "fp16" : "bf16";
}
inline int64_t dtype_bytes(DType t) { return t == DType::fp32 ? 4 : 2; }
// Unit roundoff u = 2^-p (p significand bits): the largest relative error of one rounding.
inline double dtype_unit_roundoff(DType t) {
  return t == DType::fp32 ? 0x1p-24 : t == DType::fp16 ? 0x1p-11 : 0x1p-8;
}
// Largest finite value of the type (a float32 input above it would become infinity).
inline double dtype_max(DType t) { return t == DType::fp16 ? 65504.0 : 3.3895313892515355e38; }

// "fp32" | "fp16" | "bf16" -> DType. Throws InputError(arg, ...) for anything else.
inline DType parse_dtype(const std::string& s, const std::string& arg = "--dtype") {
  if (s == "fp32") return DType::fp32;
  if (s == "fp16") return DType::fp16;
  if (s == "bf16") return DType::bf16;
  throw InputError(arg, "fp32, fp16 or bf16", "'" + s + "'");
}

// One float32 value rounded to the dtype and back (exact for fp32).
inline float round_to(DType t, float x) {
  switch (t) {
    case DType::fp16: return lowp::round_to<lowp::Half>(x);
    case DType::bf16: return lowp::round_to<lowp::BFloat16>(x);
    default: return x;
  }
}

// One float64 value correctly rounded to the dtype and back (float64 -> fp32 for fp32).
inline double round_to(DType t, double x) {
  switch (t) {
    case DType::fp16: return double(float(lowp::Half(x)));
    case DType::bf16: return double(float(lowp::BFloat16(x)));
    default: return double(float(x));
  }
}

// Round every element of x to the dtype, in place (the "store the inputs in 16 bits" step).
inline void round_tensor(Tensor& x, DType t) {
  if (t == DType::fp32) return;
  for (float& e : x.data) e = round_to(t, e);
}

// n float32 values -> the dtype's bits, written to dst (dtype_bytes(t) * n bytes). Used to stage
// uploads to the GPU.
inline void encode(DType t, const float* src, int64_t n, void* dst) {
  if (t == DType::fp32) {
    auto* d = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = src[i];
    return;
  }
  auto* d = static_cast<uint16_t*>(dst);
  if (t == DType::fp16)
    for (int64_t i = 0; i < n; ++i) d[i] = lowp::fp16_bits_from_float(src[i]);
  else
    for (int64_t i = 0; i < n; ++i) d[i] = lowp::bf16_bits_from_float(src[i]);
}

// The inverse of encode(): n values of the dtype at src -> float32 (exact).
inline void decode(DType t, const void* src, int64_t n, float* dst) {
  if (t == DType::fp32) {
    const auto* s = static_cast<const float*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
    return;
  }
  const auto* s = static_cast<const uint16_t*>(src);
  if (t == DType::fp16)
    for (int64_t i = 0; i < n; ++i) dst[i] = lowp::float_from_fp16_bits(s[i]);
  else
    for (int64_t i = 0; i < n; ++i) dst[i] = lowp::float_from_bf16_bits(s[i]);
}

}  // namespace fa
