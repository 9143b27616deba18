// Stage 01 as the programs, the tour and the benchmarks see it (common/stage.hpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>

#include "harness.hpp"
#include "naive_backward.hpp"
#include "stage.hpp"

// The two ways the textbook softmax (stage 01: exp(S) / rowsum(exp(S)), no max subtracted) fails
// in float32, told apart from the logits (computed in double over the visible entries):
//   overflow  : a logit above ln(FLT_MAX) = 88.72: exp gives inf, inf / inf = NaN;
//   underflow : every logit of a row below ln(FLT_MIN) = -87.34: exp gives subnormals, the row
//               sum loses precision; below -103.97 it is exactly 0, and 0 / 0 = NaN.
// One line per mode that applies, naming the logit that triggers it; "" if neither does.
inline std::string naive_softmax_diagnosis(const fa::Inputs& in) {
  const fa::AttnProblem& p = in.p;
  const double scale = p.resolved_scale();
  const double ln_max = std::log(double(std::numeric_limits<float>::max()));  // 88.72
  const double ln_min = std::log(double(std::numeric_limits<float>::min()));  // -87.34
  const double ln_zero = std::log(std::ldexp(1.0, -150));                     // -103.97: exp rounds to 0
  double top = -INFINITY, lowest_row = INFINITY;  // the largest logit; the smallest row max
  int64_t rows_low = 0, rows_zero = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i) {
        double row = -INFINITY;
        for (int64_t j = p.key_begin(i); j < p.key_end(i); ++j) {
          const float* q = in.Q.ptr() + p.q_offset(b, h, i);
          const float* k = in.K.ptr() + p.kv_offset(b, h, j);
          double s = 0;
          for (int64_t c = 0; c < p.d; ++c) s += double(q[c]) * double(k[c]);
          row = std::max(row, p.capped(scale * s));  // a softcap keeps every logit below c
        }
        if (p.keys_seen(i) == 0) continue;  // a row that sees no key: O = 0 by definition
        top = std::max(top, row);
        lowest_row = std::min(lowest_row, row);
        rows_low += row < ln_min;
        rows_zero += row < ln_zero;
      }
  std::ostringstream out;
  char buf[64];
  if (top > ln_max) {
    std::snprintf(buf, sizeof buf, "%.4g", top);
    out << "exp overflows float32: a logit is " << buf << ", above ln(FLT_MAX) = 88.72 (inf / inf = NaN); stage 02 subtracts the row max";
  }
  if (rows_low > 0) {
    std::snprintf(buf, sizeof buf, "%.4g", lowest_row);
    if (!out.str().empty()) out << "\n";
    out << "exp underflows float32: in " << rows_low << " row(s) every logit is below ln(FLT_MIN) = -87.34"
        << " (the lowest row max is " << buf << "): the row sum loses precision";
    if (rows_zero > 0) out << ", and in " << rows_zero << " of them it is 0 (0 / 0 = NaN)";
    out << "; stage 02 subtracts the row max";
  }
  return out.str();
}

inline fa::Stage stage_01() {
  fa::Stage s{"01_naive", "textbook softmax(scale QK^T) V; S and P materialised; exp may overflow",
              naive::forward<float>, naive::backward<float>, /*nxn_forward=*/2, /*nxn_backward=*/4};
  s.diagnose = naive_softmax_diagnosis;
  s.varlen = true;  // every row through the problem's offsets: a packed batch runs per sequence
  return s;
}
