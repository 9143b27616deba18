// Error metrics between a result x and a reference r of the same size (element by element).
// Non-finite handling is strict: a NaN or +inf anywhere in x or r, or a -inf in one but not the
// other, makes the max error +inf, so NaN never passes. Only -inf in both (LSE of a row that sees
// no key) counts as error 0.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

namespace fa {

struct ErrorStats {
  double max_abs = 0;   // max_i |x_i - r_i|
  double max_rel = 0;   // max_i |x_i - r_i| / max(|r_i|, tiny)
  double rel_fro = 0;   // ||x - r||_F / ||r||_F  (0 if r is all zero and x == r)
  int64_t worst = -1;   // index of the element with the largest |x_i - r_i|
  int64_t nonfinite = 0;  // elements where x is NaN/inf and does not equal r
};

template <class X, class R>
ErrorStats compare(const X* x, const R* r, int64_t n) {
  ErrorStats e;
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double xi = double(x[i]), ri = double(r[i]);
    double diff;
    if (std::isfinite(xi) && std::isfinite(ri)) {
      diff = std::fabs(xi - ri);
      num += diff * diff;
      den += ri * ri;
    } else if (xi == ri && xi < 0) {  // both -inf: LSE of a row that sees no key
      diff = 0;
    } else {
      diff = std::numeric_limits<double>::infinity();
      ++e.nonfinite;
    }
    if (diff > e.max_abs || e.worst < 0) {
      e.max_abs = std::fmax(e.max_abs, diff);
      e.worst = i;
    }
    const double rel = diff / std::fmax(std::fabs(ri), 1e-30);
    if (rel > e.max_rel) e.max_rel = rel;
  }
  e.rel_fro = e.nonfinite ? std::numeric_limits<double>::infinity()
              : den > 0   ? std::sqrt(num / den)
                          : std::sqrt(num);
  return e;
}

// Largest |r_i| over the finite elements (used to scale tolerances).
template <class R>
double max_abs_finite(const R* r, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(double(r[i]))) m = std::fmax(m, std::fabs(double(r[i])));
  return m;
}

// Number of NaN or infinite elements.
template <class X>
int64_t count_nonfinite(const X* x, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += !std::isfinite(double(x[i]));
  return c;
}

}  // namespace fa
