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
//   overflow  : a logit above ln(FLT_MAX) = 88.72: exp gives inf, inf / inf = NaN; or every
//               logit below it but the row's sum of exp past FLT_MAX: P = exp(S) / inf = 0;
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
  int64_t rows_low = 0, rows_zero = 0, rows_sum = 0;  // ... rows whose sum of exp overflows
  double top_lse = -INFINITY;                          // the largest log(sum_j exp(S_ij))
  // One problem's logits (a packed batch: one sequence's, as its own B = 1 problem on its rows).
  const auto scan = [&](const fa::AttnProblem& pb, const float* Q, const float* K) {
    for (int64_t b = 0; b < pb.B; ++b)
      for (int64_t h = 0; h < pb.H; ++h)
        for (int64_t i = 0; i < pb.N_q; ++i) {
          double row = -INFINITY, sum = 0;  // the row max and sum_j exp(S_ij - row), online
          for (int64_t j = pb.key_begin(i); j < pb.key_end(i); ++j) {
            const float* q = Q + pb.q_offset(b, h, i);
            const float* k = K + pb.kv_offset(b, h, j);
            double s = 0;
            for (int64_t c = 0; c < pb.d; ++c) s += double(q[c]) * double(k[c]);
            const double x = pb.capped(scale * s);  // a softcap keeps every logit below c
            if (x > row) sum = sum * std::exp(row - x) + 1, row = x;
            else sum += std::exp(x - row);
          }
          if (pb.keys_seen(i) == 0) continue;  // a row that sees no key: O = 0 by definition
          top = std::max(top, row);
          lowest_row = std::min(lowest_row, row);
          rows_low += row < ln_min;
          rows_zero += row < ln_zero;
          const double lse = row + std::log(sum);
          top_lse = std::max(top_lse, lse);
          rows_sum += row <= ln_max && lse > ln_max;
        }
  };
  if (!in.varlen.any()) {
    scan(p, in.Q.ptr(), in.K.ptr());
  } else {
    for (int64_t b = 0; b < in.varlen.batch(); ++b)
      scan(fa::sequence_problem(p, in.varlen, b), in.Q.ptr() + int64_t(in.varlen.cu_q[b]) * p.H * p.d,
           in.K.ptr() + int64_t(in.varlen.cu_k[b]) * p.H_kv * p.d);
  }
  std::ostringstream out;
  char buf[64];
  if (top > ln_max) {
    std::snprintf(buf, sizeof buf, "%.4g", top);
    out << "exp overflows float32: a logit is " << buf << ", above ln(FLT_MAX) = 88.72 (inf / inf = NaN); stage 02 subtracts the row max";
  }
  if (rows_sum > 0) {
    std::snprintf(buf, sizeof buf, "%.4g", top_lse);
    if (!out.str().empty()) out << "\n";
    out << "the row sum of exp overflows float32 in " << rows_sum << " row(s) whose logits are all below 88.72"
        << " (log of the largest sum: " << buf << "): P = exp(S) / inf = 0; stage 02 subtracts the row max";
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
