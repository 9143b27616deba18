// Stage 03's tests: the conformance battery; the online normaliser on a plain vector with its
// memory-access count against stage 02's three passes; the rescale factor; merge() of partial
// states (split at every key, random chunks in random orders, the empty state as identity); the
// masked edge cases; and the O(d) extra memory.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "conformance.hpp"
#include "online_softmax.hpp"
#include "reference.hpp"
#include "safe_softmax.hpp"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A pointer that counts the loads and stores made through it: x[j] read into a value is one load,
// y[j] = v is one store.
struct Counts {
  int64_t loads = 0, stores = 0;
};
template <class T>
struct CountingPtr {
  T* p;
  Counts* n;
  struct Ref {
    T* e;
    Counts* n;
    operator T() const { return ++n->loads, *e; }
    Ref& operator=(T v) { return ++n->stores, *e = v, *this; }
  };
  Ref operator[](int64_t j) const { return {p + j, n}; }
};

using State = online_softmax::State<float>;

// O and LSE of a state, as forward() would write them.
struct Row {
  std::vector<float> O;
  float LSE;
};
Row finish(const State& st) {
  Row r{std::vector<float>(st.o.size()), 0.f};
  online_softmax::finish(st, r.O.data(), &r.LSE);
  return r;
}

// max over O and LSE of |a - b| / max(1, |b|) (0 where both hold the same infinity; NaN -> inf).
double row_diff(const Row& a, const Row& b) {
  auto rel = [](double x, double y) { return x == y ? 0.0 : std::fabs(x - y) / std::max(1.0, std::fabs(y)); };
  double e = rel(a.LSE, b.LSE);
  for (size_t c = 0; c < a.O.size(); ++c) e = std::max(e, rel(a.O[c], b.O[c]));
  return std::isnan(e) ? kInf : e;
}
// Rounding allowance for two float32 evaluations of one row in different orders: 16 ulp.
constexpr double kRounding = 16 * std::numeric_limits<float>::epsilon();

fa::AttnProblem problem(int64_t N_q, int64_t N_k, int64_t d, bool causal) {
  fa::AttnProblem p;
  p.B = 2, p.H = 4, p.H_kv = 2, p.N_q = N_q, p.N_k = N_k, p.d = d, p.causal = causal;
  return p;
}

}  // namespace

TEST_CASE("03_online_softmax forward: conformance battery vs stage 01 and float64") {
  fa::check_forward_battery(online_softmax::forward<float>);
}

TEST_CASE("03_online_softmax forward: variant battery (windows, softcaps) vs stage 01 and float64") {
  fa::check_variant_forward_battery(online_softmax::forward<float>);
}

TEST_CASE("03_online_softmax forward: packed variable-length batches (varlen battery) vs stage 01 and float64") {
  fa::check_varlen_forward_battery(online_softmax::forward<float>);
}

// ---- 1. The online normaliser on a plain vector ----

TEST_CASE("03 vector softmax: equals stage 02's three-pass softmax, also for huge and -inf inputs") {
  const std::vector<std::vector<double>> inputs = {
      {0.5, -1.0, 2.0, 0.0},
      {1000.0, 999.0, -1000.0, 998.5, 1000.0},  // exp overflows without the max
      {-1.0, 3.0, 2.0, 7.0, 1.0, 7.5, -4.0},    // the max rises 3 times, and stays put in between
      {-kInf, -kInf, 1.0, 2.0},                 // leading -inf: m = -inf for two steps
      {3.0, -kInf, 1.0, -kInf},
      {42.0},
  };
  for (const auto& x : inputs) {
    INFO("x[0] = " << x[0] << ", n = " << x.size());
    std::vector<double> y3(x.size()), y2(x.size());
    safe_softmax::softmax<double>(x.data(), y3.data(), int64_t(x.size()));
    online_softmax::softmax<double>(x.data(), y2.data(), int64_t(x.size()));
    double sum = 0;
    for (size_t j = 0; j < x.size(); ++j) {
      CHECK(std::isfinite(y2[j]));
      CHECK(y2[j] == doctest::Approx(y3[j]).epsilon(1e-14));
      sum += y2[j];
    }
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-14));
  }
}

TEST_CASE("03 vector softmax: 3 memory accesses per element (2 loads, 1 store) vs 4 for three passes") {
  const int64_t n = 37;
  std::vector<float> x(n), y(n);
  for (int64_t j = 0; j < n; ++j) x[j] = float(std::sin(0.7 * double(j)) * 50);
  Counts safe, online;
  safe_softmax::softmax<float>(CountingPtr<float>{x.data(), &safe}, CountingPtr<float>{y.data(), &safe}, n);
  const std::vector<float> y_safe = y;
  online_softmax::softmax<float>(CountingPtr<float>{x.data(), &online}, CountingPtr<float>{y.data(), &online}, n);
  CHECK(safe.loads == 3 * n);  // pass 1 (max), pass 2 (sum), pass 3 (outputs) each load x_j
  CHECK(safe.stores == n);
  CHECK(online.loads == 2 * n);  // pass 1 (max and sum together), pass 2 (outputs)
  CHECK(online.stores == n);
  CHECK(safe.loads + safe.stores == 4 * n);
  CHECK(online.loads + online.stores == 3 * n);
  for (int64_t j = 0; j < n; ++j) CHECK(y[j] == doctest::Approx(y_safe[j]).epsilon(1e-5));
}

// ---- 2. The online update and its rescale factor ----

TEST_CASE("03 add_key: a key that does not raise the max is added with factor exp(m_old - m_new) = 1") {
  const std::vector<float> v0 = {1.f, 2.f}, v1 = {-3.f, 5.f}, v2 = {4.f, -1.f};
  State st = online_softmax::empty_state<float>(2);
  online_softmax::add_key(st, 5.f, v0.data());  // m = 5, l = 1, o = v0
  online_softmax::add_key(st, 3.f, v1.data());  // does not raise the max: l = 1 + e^-2
  CHECK(st.m == 5.f);
  CHECK(st.l == doctest::Approx(1 + std::exp(-2.0)).epsilon(1e-7));
  CHECK(st.o[0] == doctest::Approx(1 - 3 * std::exp(-2.0)).epsilon(1e-7));
  CHECK(st.o[1] == doctest::Approx(2 + 5 * std::exp(-2.0)).epsilon(1e-7));
  online_softmax::add_key(st, 6.f, v2.data());  // raises it by 1: the old sums shrink by e^-1
  CHECK(st.m == 6.f);
  CHECK(st.l == doctest::Approx((1 + std::exp(-2.0)) * std::exp(-1.0) + 1).epsilon(1e-7));
  CHECK(st.o[0] == doctest::Approx((1 - 3 * std::exp(-2.0)) * std::exp(-1.0) + 4).epsilon(1e-7));
  const Row r = finish(st);  // O = (e^5 v0 + e^3 v1 + e^6 v2) / (e^5 + e^3 + e^6)
  const double z = std::exp(5.0) + std::exp(3.0) + std::exp(6.0);
  CHECK(r.O[1] == doctest::Approx((2 * std::exp(5.0) + 5 * std::exp(3.0) - std::exp(6.0)) / z).epsilon(1e-6));
  CHECK(r.LSE == doctest::Approx(std::log(z)).epsilon(1e-7));
}

TEST_CASE("03 add_key: leading masked keys (m = -inf) give no NaN and change nothing") {
  const std::vector<float> v = {7.f, -7.f}, v1 = {1.f, 2.f};
  State masked_first = online_softmax::empty_state<float>(2);
  for (int t = 0; t < 3; ++t) online_softmax::add_key(masked_first, -kInf, v.data());  // exp(-inf - -inf)?
  CHECK(masked_first.m == -kInf);
  CHECK(masked_first.l == 0.f);
  CHECK(masked_first.o[0] == 0.f);
  CHECK(masked_first.o[1] == 0.f);
  State plain = online_softmax::empty_state<float>(2);
  online_softmax::add_key(masked_first, 2.f, v1.data());
  online_softmax::add_key(plain, 2.f, v1.data());
  CHECK(masked_first.m == plain.m);
  CHECK(masked_first.l == plain.l);
  CHECK(masked_first.o == plain.o);
  // A row that only ever sees masked keys: O = 0, LSE = -inf.
  State none = online_softmax::empty_state<float>(2);
  online_softmax::add_key(none, -kInf, v.data());
  const Row r = finish(none);
  CHECK(r.O[0] == 0.f);
  CHECK(r.O[1] == 0.f);
  CHECK(r.LSE == -kInf);
}

TEST_CASE("03 forward: fully masked rows give O = 0 and LSE = -inf, the others match float64") {
  fa::AttnProblem p = problem(12, 5, 8, true);  // causal, N_q > N_k: rows 0..6 see no key
  const fa::Inputs in = fa::random_inputs(p, 3);
  const fa::ForwardRun r = fa::run_forward(online_softmax::forward<float>, in);
  fa::TensorD O64, L64;
  fa::reference_forward(p, in.Q, in.K, in.V, O64, L64);
  int masked = 0;
  for (int64_t row = 0; row < p.lse_elems(); ++row) {
    const int64_t i = row % p.N_q;
    if (p.keys_seen(i) == 0) {
      ++masked;
      CHECK(r.LSE[row] == -kInf);
      for (int64_t c = 0; c < p.d; ++c) CHECK(r.O[row * p.d + c] == 0.f);
    } else {
      CHECK(r.LSE[row] == doctest::Approx(L64[row]).epsilon(1e-5));
      for (int64_t c = 0; c < p.d; ++c) CHECK(std::fabs(r.O[row * p.d + c] - O64[row * p.d + c]) < 1e-5);
    }
  }
  CHECK(masked == p.B * p.H * 7);
}

// ---- 3. merge() of partial states ----

TEST_CASE("03 merge: the empty state (m = -inf, l = 0) is the identity, on either side") {
  const fa::AttnProblem p = problem(9, 13, 6, false);
  const fa::Inputs in = fa::random_inputs(p, 5);
  const State e = online_softmax::empty_state<float>(p.d);
  const State s = online_softmax::partial(p, in.Q.ptr(), in.K.ptr(), in.V.ptr(), int64_t(1), int64_t(2), int64_t(4), int64_t(0), p.N_k);
  for (const State& r : {online_softmax::merge(e, s), online_softmax::merge(s, e)}) {
    CHECK(r.m == s.m);
    CHECK(r.l == s.l);
    CHECK(r.o == s.o);
  }
  const State ee = online_softmax::merge(e, e);
  CHECK(ee.m == -kInf);
  CHECK(ee.l == 0.f);
  CHECK(ee.o == e.o);
}

TEST_CASE("03 merge: a block that does not raise the max is scaled by exp(m_b - m), the other by 1") {
  const std::vector<float> va = {2.f}, vb = {-1.f};
  State a = online_softmax::empty_state<float>(1), b = online_softmax::empty_state<float>(1);
  online_softmax::add_key(a, 4.f, va.data());
  online_softmax::add_key(b, 1.f, vb.data());
  for (const State& r : {online_softmax::merge(a, b), online_softmax::merge(b, a)}) {
    CHECK(r.m == 4.f);
    CHECK(r.l == doctest::Approx(1 + std::exp(-3.0)).epsilon(1e-7));
    CHECK(r.o[0] == doctest::Approx(2 - std::exp(-3.0)).epsilon(1e-7));
  }
}

TEST_CASE("03 merge: splitting the keys at every position gives one pass's O and LSE") {
  double worst = 0;
  for (bool causal : {false, true})
    for (auto [N_q, N_k] : {std::pair<int64_t, int64_t>{23, 31}, {31, 23}, {1, 17}}) {
      const fa::AttnProblem p = problem(N_q, N_k, 16, causal);
      const fa::Inputs in = fa::random_inputs(p, 11);
      const float *Q = in.Q.ptr(), *K = in.K.ptr(), *V = in.V.ptr();
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t h = 0; h < p.H; ++h)
          for (int64_t i = 0; i < p.N_q; ++i) {
            const Row one = finish(online_softmax::partial(p, Q, K, V, b, h, i, 0, p.N_k));
            for (int64_t j = 0; j <= p.N_k; ++j) {
              const State left = online_softmax::partial(p, Q, K, V, b, h, i, 0, j);
              const State right = online_softmax::partial(p, Q, K, V, b, h, i, j, p.N_k);
              const double e = std::max(row_diff(finish(online_softmax::merge(left, right)), one),
                                        row_diff(finish(online_softmax::merge(right, left)), one));
              INFO(p.describe() << " b " << b << " h " << h << " i " << i << " split at " << j);
              REQUIRE(e <= kRounding);
              worst = std::max(worst, e);
            }
          }
    }
  MESSAGE("split at every key: max relative |merged - one pass| = " << worst);
}

TEST_CASE("03 merge: 3+ random chunks merged in random orders give one pass's O and LSE") {
  std::mt19937_64 rng(2026);
  double worst = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const bool causal = trial % 2;
    const fa::AttnProblem p = problem(int64_t(5 + rng() % 40), int64_t(3 + rng() % 60), 8, causal);
    const fa::Inputs in = fa::random_inputs(p, trial);
    const int64_t b = rng() % p.B, h = rng() % p.H, i = rng() % p.N_q;
    const float *Q = in.Q.ptr(), *K = in.K.ptr(), *V = in.V.ptr();
    // Chunk boundaries: 0 = c_0 < ... < c_n = N_k with n >= 3 (chunks may be empty).
    const int64_t n = 3 + int64_t(rng() % 6);
    std::vector<int64_t> cut = {0, p.N_k};
    for (int64_t t = 1; t < n; ++t) cut.push_back(int64_t(rng() % uint64_t(p.N_k + 1)));
    std::sort(cut.begin(), cut.end());
    std::vector<State> parts;
    for (size_t t = 0; t + 1 < cut.size(); ++t)
      parts.push_back(online_softmax::partial(p, Q, K, V, b, h, i, cut[t], cut[t + 1]));
    // Merge in a random order: repeatedly replace two random states by their merge.
    while (parts.size() > 1) {
      std::shuffle(parts.begin(), parts.end(), rng);
      State m = online_softmax::merge(parts[0], parts[1]);
      parts.erase(parts.begin(), parts.begin() + 2);
      parts.push_back(std::move(m));
    }
    const Row one = finish(online_softmax::partial(p, Q, K, V, b, h, i, 0, p.N_k));
    const double e = row_diff(finish(parts[0]), one);
    INFO(p.describe() << " row " << i << ", " << n << " chunks");
    REQUIRE(e <= kRounding);
    worst = std::max(worst, e);
  }
  MESSAGE("random chunks: max relative |merged - one pass| = " << worst);
}

// ---- 4. Memory: S and P are never stored ----

TEST_CASE("03 forward: extra memory is one state (d + 2 floats), the same at every N") {
  int64_t first = -1;
  for (int64_t N : {64, 256, 1024}) {
    fa::AttnProblem p = problem(N, N, 64, false);
    p.B = 1, p.H = 2, p.H_kv = 2;
    const fa::Inputs in = fa::random_inputs(p, 1);
    const fa::ForwardRun r = fa::run_forward(online_softmax::forward<float>, in);
    INFO("N = " << N << ": extra bytes " << r.extra_bytes);
    CHECK(r.extra_bytes >= int64_t(p.d * sizeof(float)));  // the accumulator o is measured
    CHECK(r.extra_bytes <= 2 * int64_t(p.d * sizeof(float)));
    if (first < 0) first = r.extra_bytes;
    CHECK(r.extra_bytes == first);
  }
}
