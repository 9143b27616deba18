// A contiguous, row-major tensor: a shape and a flat std::vector of elements.
// Deliberately minimal: stages take raw pointers plus an AttnProblem (problem.hpp), so this type
// only owns memory and remembers the shape for I/O and checks.
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace fa {

template <class T>
struct TensorT {
  std::vector<int64_t> shape;
  std::vector<T> data;

  TensorT() = default;
  explicit TensorT(std::vector<int64_t> s, T fill = T(0)) : shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t e : shape) n *= e;
    data.assign(size_t(n), fill);
  }
  int64_t numel() const { return int64_t(data.size()); }
  T* ptr() { return data.data(); }
  const T* ptr() const { return data.data(); }
  T& operator[](int64_t i) { return data[size_t(i)]; }
  const T& operator[](int64_t i) const { return data[size_t(i)]; }
  // Fill every element with NaN, so an element a stage forgets to write fails every check.
  void poison() { data.assign(data.size(), std::numeric_limits<T>::quiet_NaN()); }
};

using Tensor = TensorT<float>;
using TensorD = TensorT<double>;

// Same shape and the same bits in every element (NaN payloads included): how tests check that a
// result does not depend on thread count, schedule or run.
template <class T>
bool same_bits(const TensorT<T>& a, const TensorT<T>& b) {
  return a.shape == b.shape && std::memcmp(a.ptr(), b.ptr(), a.data.size() * sizeof(T)) == 0;
}

// Any NaN: an element a run did not write, when its output was poisoned first (poison()).
template <class T>
bool has_nan(const TensorT<T>& x) {
  for (const T& e : x.data)
    if (e != e) return true;
  return false;
}

// "[2, 12, 256, 32]"
std::string shape_str(const std::vector<int64_t>& shape);

// Element-wise conversion (float -> double for the reference, and back).
template <class To, class From>
TensorT<To> convert(const TensorT<From>& x) {
  TensorT<To> y;
  y.shape = x.shape;
  y.data.assign(x.data.begin(), x.data.end());
  return y;
}

}  // namespace fa
