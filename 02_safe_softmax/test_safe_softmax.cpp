// Stage 02's tests: the conformance battery (against stage 01 and float64), the large-logit cases
// where stage 01 overflows and stage 02 does not (both facts asserted), shift invariance, the
// three-pass vector softmax, and the O(N^2) memory it still pays.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "conformance.hpp"
#include "naive.hpp"
#include "reference.hpp"
#include "safe_softmax.hpp"

TEST_CASE("02_safe_softmax forward: conformance battery vs stage 01 and float64") {
  fa::check_forward_battery(safe_softmax::forward<float>);
}

TEST_CASE("02_safe_softmax forward: variant battery (windows, softcaps) vs stage 01 and float64") {
  fa::check_variant_forward_battery(safe_softmax::forward<float>);
}

TEST_CASE("02_safe_softmax forward: packed variable-length batches (varlen battery) vs stage 01 and float64") {
  fa::check_varlen_forward_battery(safe_softmax::forward<float>);
}

TEST_CASE("02_safe_softmax passes the large-logit cases on which stage 01 overflows") {
  int cases = 0;
  for (const fa::Case& c : fa::forward_battery()) {
    if (c.fill != fa::Fill::Logits100) continue;
    ++cases;
    INFO("case: " << c.name);
    const fa::Inputs in = fa::case_inputs(c);
    // Stage 01 on this input: exp(100) > FLT_MAX, so O holds NaN.
    const fa::ForwardRun r01 = fa::run_forward(naive::forward<float>, in);
    CHECK(fa::count_nonfinite(r01.O.ptr(), r01.O.numel()) > 0);
    // Stage 02 on the same input: finite, and within the rule against float64.
    const fa::ForwardRun r02 = fa::run_forward(safe_softmax::forward<float>, in);
    CHECK(fa::count_nonfinite(r02.O.ptr(), r02.O.numel()) == 0);
    fa::check_forward_case(safe_softmax::forward<float>, c);
  }
  CHECK(cases >= 3);
}

TEST_CASE("02_safe_softmax: a logit of 89 (stage 01's NaN) gives the right O and LSE") {
  // d = 1, scale = 1, q = 1, keys {89, 0}: S = {89, 0}; O = (2 e^89 - 3) / (e^89 + 1) and
  // LSE = 89 + log(1 + e^-89). Stage 01 returns NaN here (01_naive/test_naive.cpp).
  fa::AttnProblem p;
  p.N_q = 1, p.N_k = 2, p.d = 1, p.scale = 1.f;
  const float Q[1] = {1.f}, V[2] = {2.f, -3.f};
  for (float big : {89.f, 1000.f, 1e30f}) {
    INFO("logit " << big);
    const float K[2] = {big, 0.f};
    float O[1], LSE[1];
    safe_softmax::forward<float>(p, Q, K, V, O, LSE);
    CHECK(O[0] == doctest::Approx(2.0));
    CHECK(LSE[0] == doctest::Approx(double(big)));
  }
}

TEST_CASE("02_safe_softmax is shift invariant: adding c to every logit changes nothing") {
  // softmax(x + c) = softmax(x): with d = 1 and q = 1 the logits are the keys themselves.
  fa::AttnProblem p;
  p.N_q = 1, p.N_k = 5, p.d = 1, p.scale = 1.f;
  const float Q[1] = {1.f}, V[5] = {1.f, -2.f, 3.f, 0.5f, 4.f};
  const float x[5] = {0.3f, -1.2f, 2.0f, 0.0f, 1.1f};
  float O0[1], L0[1];
  safe_softmax::forward<float>(p, Q, x, V, O0, L0);
  for (float c : {-500.f, -50.f, 50.f, 500.f}) {
    INFO("shift " << c);
    float K[5], O[1], L[1];
    for (int j = 0; j < 5; ++j) K[j] = x[j] + c;
    safe_softmax::forward<float>(p, Q, K, V, O, L);
    CHECK(O[0] == doctest::Approx(O0[0]).epsilon(1e-5));
    CHECK(L[0] == doctest::Approx(L0[0] + c).epsilon(1e-6));  // LSE shifts by c exactly
  }
}

TEST_CASE("02 vector softmax (three passes): right values for huge inputs, sums to 1") {
  const std::vector<double> x = {1000.0, 999.0, -1000.0, 998.5, 1000.0};
  std::vector<double> y(x.size());
  safe_softmax::softmax<double>(x.data(), y.data(), int64_t(x.size()));
  const double z = 2 + std::exp(-1.0) + std::exp(-1.5);  // sum of exp(x_j - 1000)
  CHECK(y[0] == doctest::Approx(1 / z));
  CHECK(y[1] == doctest::Approx(std::exp(-1.0) / z));
  CHECK(y[2] == 0.0);
  CHECK(y[3] == doctest::Approx(std::exp(-1.5) / z));
  double sum = 0;
  for (double v : y) sum += v;
  CHECK(sum == doctest::Approx(1.0));
}

TEST_CASE("02_safe_softmax still materialises S and P: extra memory >= 2 * B*H*N_q*N_k floats") {
  fa::AttnProblem p;
  p.B = 2, p.H = 3, p.H_kv = 3, p.N_q = 300, p.N_k = 200, p.d = 16;
  const fa::Inputs in = fa::random_inputs(p, 1);
  const fa::ForwardRun r = fa::run_forward(safe_softmax::forward<float>, in);
  const int64_t SP = 2 * p.B * p.H * p.N_q * p.N_k * int64_t(sizeof(float));
  CHECK(r.extra_bytes >= SP);
  CHECK(r.extra_bytes < SP + SP / 10);
}
