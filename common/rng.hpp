// Seeded random inputs. std::mt19937_64 is specified bit-for-bit by the C++ standard, but the
// standard distributions are not, so normals are made here with Box-Muller from raw 64-bit draws:
// the same --seed gives the same tensors with any compiler.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>

#include "tensor.hpp"

namespace fa {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // Uniform in (0, 1), never exactly 0 (so log() below is finite).
  double uniform() { return (double(gen_() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal (Box-Muller; one of the pair is discarded for simplicity).
  double normal() {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    return r * std::cos(6.283185307179586 * uniform());
  }
  // Fill x with normal(0, stddev) values.
  template <class T>
  void fill_normal(TensorT<T>& x, double stddev = 1.0) {
    for (auto& e : x.data) e = T(stddev * normal());
  }

 private:
  std::mt19937_64 gen_;
};

}  // namespace fa
