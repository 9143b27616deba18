// The precision experiment (see experiment.hpp for the vocabulary). Everything that computes
// attention here is a stage's own templated core; the only arithmetic written in this file is
// the float64 ablation instrument (ablate_forward), which is labelled as such in the results.
#include "experiment.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>

#include "harness.hpp"  // fa::load_inputs, fa::default_data_dir
#include "lowp.hpp"
#include "naive.hpp"
#include "online_softmax.hpp"
#include "reference.hpp"
#include "rng.hpp"
#include "safe_softmax.hpp"

namespace numx {
namespace {

using Clock = std::chrono::steady_clock;

// The result of one core call, as float32 (every format here is exactly representable in it,
// except fp64, which is rounded to float32 only AFTER its error is measured: see to_float_out).
struct Out {
  std::string order;
  int64_t Bc = 0;
  std::vector<double> O, LSE;  // widened, so fp64 outputs keep their precision
  double ms = 0;
};

template <class T>
std::vector<T> to_vec(const fa::Tensor& x) {
  std::vector<T> y(x.data.size());
  for (size_t e = 0; e < y.size(); ++e) y[e] = T(x.data[e]);
  return y;
}

template <class T>
std::vector<double> widen(const std::vector<T>& x) {
  std::vector<double> y(x.size());
  for (size_t e = 0; e < y.size(); ++e) y[e] = double(x[e]);
  return y;
}

// Stage 03's partial() over consecutive blocks of Bc keys, folded left to right with merge():
// the order in which FlashAttention visits keys, with stage 03's arithmetic, for any T.
template <class T>
void merge_forward(const fa::AttnProblem& p, const T* Q, const T* K, const T* V, T* O, T* LSE,
                   int64_t Bc) {
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i) {
        online_softmax::State<T> st = online_softmax::empty_state<T>(p.d);
        for (int64_t c0 = 0; c0 < p.N_k; c0 += Bc)
          st = online_softmax::merge(
              st, online_softmax::partial(p, Q, K, V, b, h, i, c0, std::min(c0 + Bc, p.N_k)));
        online_softmax::finish(st, O + p.q_offset(b, h, i), LSE + p.lse_offset(b, h, i));
      }
}

// Every order of `opt` with the core instantiated at T, on inputs already rounded to the format.
template <class T>
std::vector<Out> run_orders(const Input& in, const fa::Tensor& Q, const fa::Tensor& K,
                            const fa::Tensor& V, const Options& opt) {
  const fa::AttnProblem& p = in.p;
  const auto q = to_vec<T>(Q), k = to_vec<T>(K), v = to_vec<T>(V);
  // Block sizes clipped to N_k, each once (Bc = 128 at N = 64 is the single block Bc = N).
  std::vector<int64_t> blocks;
  for (int64_t Bc : opt.blocks)
    if (std::find(blocks.begin(), blocks.end(), std::min(Bc, p.N_k)) == blocks.end())
      blocks.push_back(std::min(Bc, p.N_k));
  std::vector<Out> outs;
  auto run = [&](const std::string& order, int64_t Bc, auto&& f) {
    std::vector<T> O(size_t(p.q_elems()), std::numeric_limits<T>::quiet_NaN());
    std::vector<T> LSE(size_t(p.lse_elems()), std::numeric_limits<T>::quiet_NaN());
    const auto t0 = Clock::now();
    f(O.data(), LSE.data());
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    outs.push_back({order, Bc, widen(O), widen(LSE), ms});
  };
  if (opt.naive)
    run("naive", 0, [&](T* O, T* L) { naive::forward<T>(p, q.data(), k.data(), v.data(), O, L); });
  run("safe", 0,
      [&](T* O, T* L) { safe_softmax::forward<T>(p, q.data(), k.data(), v.data(), O, L); });
  run("online", 0,
      [&](T* O, T* L) { online_softmax::forward<T>(p, q.data(), k.data(), v.data(), O, L); });
  for (const int64_t bc : blocks) {
    run("merge", bc, [&](T* O, T* L) { merge_forward<T>(p, q.data(), k.data(), v.data(), O, L, bc); });
  }
  // Stage 04 cannot be instantiated with anything but float (tiled.hpp:
  // static_assert(std::is_same_v<T, float>, "stage 04's micro-kernels are float32")).
  if constexpr (std::is_same_v<T, float>)
    for (const int64_t bc : blocks) {
      run("tiled", bc, [&](T* O, T* L) {
        tiled_forward(p, q.data(), k.data(), v.data(), O, L, opt.tiled_Br, bc);
      });
    }
  return outs;
}

// ---- the float64 ablation instrument ----------------------------------------------------------
// Safe softmax attention in float64 in which only the parts named are rounded to the format R:
//   inputs : Q, K, V elements
//   scores : the dot product q.k accumulated in R (every product and sum rounded), S = R(scale*dot)
//   exp    : each exp(S_j - m)
//   sum    : the softmax sum l, rounded after every addition
//   output : the output accumulator o_c, rounded after every addition of P_j V_jc
enum Part : unsigned { kInputs = 1, kScores = 2, kExp = 4, kSum = 8, kOutput = 16, kAll = 31 };

template <class R>
void ablate_forward(const fa::AttnProblem& p, const fa::Tensor& Q, const fa::Tensor& K,
                    const fa::Tensor& V, unsigned parts, std::vector<double>& O,
                    std::vector<double>& LSE) {
  auto r = [](double x) { return double(float(R(x))); };  // correctly rounded to R
  auto rin = [&](float x) { return (parts & kInputs) ? r(x) : double(x); };
  const double scale = p.resolved_scale();
  O.assign(size_t(p.q_elems()), 0.0);
  LSE.assign(size_t(p.lse_elems()), 0.0);
  std::vector<double> s(size_t(p.N_k)), e(size_t(p.N_k));
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i) {
        const float* q = Q.ptr() + p.q_offset(b, h, i);
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < p.N_k; ++j) {
          const float* k = K.ptr() + p.kv_offset(b, h, j);
          double dot = 0;
          for (int64_t c = 0; c < p.d; ++c)
            dot = (parts & kScores) ? r(dot + r(rin(q[c]) * rin(k[c]))) : dot + rin(q[c]) * rin(k[c]);
          s[j] = (parts & kScores) ? r(r(scale) * dot) : scale * dot;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < p.N_k; ++j) {
          e[j] = std::exp(s[j] - m);
          if (parts & kExp) e[j] = r(e[j]);
          l = (parts & kSum) ? r(l + e[j]) : l + e[j];
        }
        double* o = O.data() + p.q_offset(b, h, i);
        for (int64_t j = 0; j < p.N_k; ++j) {
          const float* v = V.ptr() + p.kv_offset(b, h, j);
          const double pj = e[j] / l;
          for (int64_t c = 0; c < p.d; ++c)
            o[c] = (parts & kOutput) ? r(o[c] + pj * rin(v[c])) : o[c] + pj * rin(v[c]);
        }
        LSE[size_t(p.lse_offset(b, h, i))] = m + std::log(l);
      }
}

struct Stats {
  double max_abs = 0, rms = 0;
  int64_t nonfinite = 0;
};
Stats stats(const std::vector<double>& x, const fa::TensorD& ref) {
  Stats s;
  double ss = 0;
  for (size_t e = 0; e < x.size(); ++e) {
    if (!std::isfinite(x[e])) {
      ++s.nonfinite;
      continue;
    }
    const double diff = std::fabs(x[e] - ref.data[e]);
    s.max_abs = std::max(s.max_abs, diff);
    ss += diff * diff;
  }
  if (s.nonfinite) s.max_abs = s.rms = std::numeric_limits<double>::infinity();
  else s.rms = std::sqrt(ss / double(x.size()));
  return s;
}
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t e = 0; e < a.size(); ++e) {
    const double diff = std::fabs(a[e] - b[e]);
    if (std::isnan(diff)) return std::numeric_limits<double>::infinity();
    m = std::max(m, diff);
  }
  return m;
}

template <class F>
fa::Tensor rounded(const fa::Tensor& x) {
  fa::Tensor y = x;
  for (auto& e : y.data) e = lowp::round_to<F>(e);
  return y;
}

}  // namespace

Input random_input(const std::string& name, int64_t N, int64_t rows, int64_t d, double q_scale,
                   uint64_t seed) {
  Input in;
  in.name = name;
  in.p.N_q = rows;
  in.p.N_k = N;
  in.p.d = d;
  in.Q = fa::Tensor({1, 1, rows, d});
  in.K = fa::Tensor({1, 1, N, d});
  in.V = fa::Tensor({1, 1, N, d});
  fa::Rng rng(seed);
  rng.fill_normal(in.Q, q_scale);
  rng.fill_normal(in.K);
  rng.fill_normal(in.V);
  return in;
}

Input minilm_input(int layer) {
  const std::string f = fa::default_data_dir() + "/minilm_l" + std::to_string(layer) + "_";
  fa::Inputs x = fa::load_inputs(f + "q.npy", f + "k.npy", f + "v.npy", false, 0.f);
  return {"minilm_l" + std::to_string(layer), x.p, x.Q, x.K, x.V};
}

std::vector<Row> run_input(const Input& in, const Options& opt) {
  const fa::AttnProblem& p = in.p;
  fa::TensorD O64, LSE64;
  fa::reference_forward(p, in.Q, in.K, in.V, O64, LSE64);

  Row base;
  base.input = in.name;
  base.N = p.N_k;
  base.rows = p.N_q;
  base.d = p.d;
  base.heads = p.H;
  for (float x : in.V.data) base.max_abs_V = std::max(base.max_abs_V, double(std::fabs(x)));
  {
    double ss = 0;
    for (double x : O64.data) ss += x * x;
    base.rms_O_ref = std::sqrt(ss / double(O64.numel()));
    const double scale = p.resolved_scale();
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t i = 0; i < p.N_q; ++i)
        for (int64_t j = 0; j < p.N_k; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < p.d; ++c)
            dot += double(in.Q[p.q_offset(0, h, i) + c]) * double(in.K[p.kv_offset(0, h, j) + c]);
          base.max_logit = std::max(base.max_logit, std::fabs(scale * dot));
        }
  }

  std::vector<Row> rows;
  auto record = [&](const std::string& format, const std::string& accum, const std::vector<Out>& outs,
                    const fa::TensorD& O64r) {
    const Out* safe = nullptr;
    for (const Out& o : outs)
      if (o.order == "safe") safe = &o;
    for (const Out& o : outs) {
      Row r = base;
      r.format = format;
      r.accum = accum;
      r.order = o.order;
      r.Bc = o.Bc;
      const Stats a = stats(o.O, O64), c = stats(o.O, O64r), l = stats(o.LSE, LSE64);
      r.O_max_abs = a.max_abs;
      r.O_rms = a.rms;
      r.O_rel_rms = a.rms / base.rms_O_ref;
      r.O_max_abs_cmp = c.max_abs;
      r.O_rms_cmp = c.rms;
      r.LSE_max_abs = l.max_abs;
      r.nonfinite = a.nonfinite + l.nonfinite;
      r.O_vs_safe = safe ? max_abs_diff(o.O, safe->O) : 0;
      r.ms = o.ms;
      rows.push_back(r);
    }
  };

  for (const std::string& fmt : opt.formats) {
    fa::Tensor Qr = in.Q, Kr = in.K, Vr = in.V;
    if (fmt == "fp16") Qr = rounded<lowp::Half>(in.Q), Kr = rounded<lowp::Half>(in.K), Vr = rounded<lowp::Half>(in.V);
    if (fmt == "bf16") Qr = rounded<lowp::BFloat16>(in.Q), Kr = rounded<lowp::BFloat16>(in.K), Vr = rounded<lowp::BFloat16>(in.V);
    fa::TensorD O64r, LSE64r;
    fa::reference_forward(p, Qr, Kr, Vr, O64r, LSE64r);

    record(fmt, "fp32", run_orders<float>(in, Qr, Kr, Vr, opt), O64r);
    if (fmt == "fp32" && opt.fp64_control) record(fmt, "fp64", run_orders<double>(in, Qr, Kr, Vr, opt), O64r);
    if (fmt == "fp16") record(fmt, "fp16", run_orders<lowp::Half>(in, Qr, Kr, Vr, opt), O64r);
    if (fmt == "bf16") record(fmt, "bf16", run_orders<lowp::BFloat16>(in, Qr, Kr, Vr, opt), O64r);

    if (opt.ablation && fmt != "fp32") {
      const std::pair<const char*, unsigned> parts[] = {{"inputs", kInputs}, {"scores", kScores},
                                                       {"exp", kExp},       {"sum", kSum},
                                                       {"output", kOutput}, {"all", kAll}};
      std::vector<Out> outs;
      for (auto [name, bits] : parts) {
        Out o{std::string("ablate:") + name, 0, {}, {}, 0};
        const auto t0 = Clock::now();
        if (fmt == "fp16") ablate_forward<lowp::Half>(p, in.Q, in.K, in.V, bits, o.O, o.LSE);
        else ablate_forward<lowp::BFloat16>(p, in.Q, in.K, in.V, bits, o.O, o.LSE);
        o.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        outs.push_back(std::move(o));
      }
      // The ablation is measured against the ORIGINAL inputs' reference for every part (its
      // "cmp" column is against the rounded inputs' reference, meaningful for part "inputs").
      record(fmt, "fp64", outs, O64r);
    }
  }
  return rows;
}

}  // namespace numx
