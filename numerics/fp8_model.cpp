// The FP8 storage model (fp8_model.hpp): quantise as the storage says, then attention in float64.
#include "fp8_model.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <limits>
#include <vector>

#include "fp8.hpp"
#include "dtype.hpp"

namespace numx {

std::string Storage8::name() const {
  std::string n = kind == Kind::fp16 ? "fp16" : kind == Kind::bf16 ? "bf16" : kind == Kind::e4m3_tensor ? "e4m3 tensor" : "e4m3 block";
  if (incoherent) n += " + incoherent";
  if ((kind == Kind::e4m3_tensor || kind == Kind::e4m3_block) && p_scale != 256) n += ", P scale " + std::to_string(int64_t(p_scale));
  return n;
}

namespace {

bool is_e4m3(const Storage8& s) { return s.kind == Storage8::Kind::e4m3_tensor || s.kind == Storage8::Kind::e4m3_block; }

double round16(Storage8::Kind k, double x) {
  return fa::round_to(k == Storage8::Kind::fp16 ? fa::DType::fp16 : fa::DType::bf16, x);
}

}  // namespace

void store8(fa::TensorD& x, int64_t heads, int64_t rows, int64_t d, const Storage8& s, int64_t rows_per_block) {
  if (!is_e4m3(s)) {
    for (double& e : x.data) e = round16(s.kind, e);
    return;
  }
  std::vector<std::pair<int64_t, int64_t>> blocks;  // [begin, end) in rows of the whole tensor
  if (s.kind == Storage8::Kind::e4m3_tensor) {
    blocks.push_back({0, heads * rows});
  } else {
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t r0 = 0; r0 < rows; r0 += rows_per_block) blocks.push_back({h * rows + r0, h * rows + std::min(rows, r0 + rows_per_block)});
  }
  for (const auto& [begin, end] : blocks) {
    double amax = 0;
    for (int64_t e = begin * d; e < end * d; ++e) amax = std::max(amax, std::fabs(x.data[size_t(e)]));
    const double scale = fa::fp8::e4m3_scale(amax);
    for (int64_t e = begin * d; e < end * d; ++e) x.data[size_t(e)] = fa::fp8::e4m3_round(x.data[size_t(e)] / scale) * scale;
  }
}

fa::TensorD storage8_forward(const fa::AttnProblem& p, const fa::TensorD& Q, const fa::TensorD& K,
                             const fa::TensorD& V, const Storage8& s) {
  if (p.softcap > 0) throw fa::InputError("softcap", "none (the storage model has no softcap)", std::to_string(p.softcap));
  if (p.token_major) throw fa::InputError("layout", "head-major [B,H,N,d] tensors", "a token-major (packed) problem");
  if (s.Br < 1 || s.Bc < 1) throw fa::InputError("Storage8::Br/Bc", "at least 1 row a scale block", std::to_string(std::min(s.Br, s.Bc)));
  if (!(s.p_scale > 0 && s.p_scale <= fa::fp8::kE4m3Max))
    throw fa::InputError("Storage8::p_scale", "in (0, 448] (P = 1 stays unsaturated)", std::to_string(s.p_scale));
  for (const fa::TensorD* x : {&Q, &K, &V})
    for (double e : x->data) {
      if (!std::isfinite(e)) throw fa::InputError("Q/K/V", "finite values", std::to_string(e));
      if (s.kind == Storage8::Kind::fp16 && std::fabs(e) > 65504.0)
        throw fa::InputError("Q/K/V", "values within fp16's range (|x| <= 65504) for fp16 storage", std::to_string(e));
    }
  fa::TensorD q = Q, k = K, v = V;
  const int64_t d = p.d;
  if (s.incoherent) {  // the same signs for Q and K (one draw per head dim), so S is unchanged
    const std::vector<double> signs = fa::fp8::random_signs(d, s.seed);
    for (int64_t r = 0; r < p.B * p.H * p.N_q; ++r) fa::fp8::incoherent_inplace(q.data.data() + r * d, signs);
    for (int64_t r = 0; r < p.B * p.H_kv * p.N_k; ++r) fa::fp8::incoherent_inplace(k.data.data() + r * d, signs);
  }
  store8(q, p.B * p.H, p.N_q, d, s, s.Br);
  store8(k, p.B * p.H_kv, p.N_k, d, s, s.Bc);
  store8(v, p.B * p.H_kv, p.N_k, d, s, s.Bc);
  const auto store_p = [&](double P) {
    return is_e4m3(s) ? fa::fp8::e4m3_round(P * s.p_scale) / s.p_scale : round16(s.kind, P);
  };
  const double scale = p.resolved_scale();
  fa::TensorD O({p.B, p.H, p.N_q, d});
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      std::vector<double> S(size_t(p.N_k));
      for (int64_t i = 0; i < p.N_q; ++i) {
        const auto kr = p.key_range(i);
        double* o = O.data.data() + p.q_offset(b, h, i);
        if (kr.end <= kr.begin) continue;  // sees no key: O = 0
        const double* qi = q.data.data() + p.q_offset(b, h, i);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = kr.begin; j < kr.end; ++j) {
          const double* kj = k.data.data() + p.kv_offset(b, h, j);
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
          S[size_t(j)] = scale * dot;
          m = std::max(m, S[size_t(j)]);
        }
        double l = 0;
        for (int64_t j = kr.begin; j < kr.end; ++j) {
          const double P = std::exp(S[size_t(j)] - m);
          l += P;  // from the unrounded P
          const double Ps = store_p(P);
          const double* vj = v.data.data() + p.kv_offset(b, h, j);
          for (int64_t c = 0; c < d; ++c) o[c] += Ps * vj[c];
        }
        for (int64_t c = 0; c < d; ++c) o[c] /= l;
      }
    }
  return O;
}

double rmse(const fa::TensorD& a, const fa::TensorD& b) {
  double s = 0;
  for (size_t e = 0; e < a.data.size(); ++e) s += (a.data[e] - b.data[e]) * (a.data[e] - b.data[e]);
  return a.data.empty() ? 0 : std::sqrt(s / double(a.data.size()));
}

}  // namespace numx
