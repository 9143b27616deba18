// Tests of the plumbing: .npy I/O, the float64 reference (known answers, finite differences), the
// error metric's NaN handling, the memory accounting, the GQA/causal index helpers.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <limits>
#include <vector>

#include "baseline.hpp"
#include "cli.hpp"
#include "errors.hpp"
#include "harness.hpp"
#include "kv_cache.hpp"
#include "varlen.hpp"
#include "memtrack.hpp"
#include "metrics.hpp"
#include "npy.hpp"
#include "reference.hpp"
#include "rng.hpp"

namespace fs = std::filesystem;

TEST_CASE("npy: write then read gives the same shape and bits; rank 1 and 4") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_npy";
  fs::create_directories(dir);
  fa::Rng rng(3);
  for (auto shape : {std::vector<int64_t>{5}, std::vector<int64_t>{2, 3, 4, 7}}) {
    fa::Tensor x(shape);
    rng.fill_normal(x);
    const std::string path = (dir / "x.npy").string();
    fa::write_npy(path, x, "x");
    const fa::Tensor y = fa::read_npy(path, "x");
    CHECK(y.shape == x.shape);
    CHECK(y.data == x.data);
  }
  CHECK_THROWS_AS(fa::read_npy((dir / "none.npy").string(), "--q"), fa::InputError);
  fs::remove_all(dir);
}

TEST_CASE("reference: reference_forward_rows gives those rows of reference_forward, bit for bit") {
  // B = 2, H = 4 on 2 kv heads, causal with N_q > N_k (rows 0 .. 2 see no key), a scale set.
  fa::AttnProblem p = fa::make_problem(2, 4, 2, 9, 6, 5, true);
  p.scale = 0.7f;
  fa::Tensor Q({2, 4, 9, 5}), K({2, 2, 6, 5}), V({2, 2, 6, 5});
  fa::Rng rng(3);
  rng.fill_normal(Q), rng.fill_normal(K), rng.fill_normal(V);
  fa::TensorD O, LSE, Or, Lr;
  fa::reference_forward(p, Q, K, V, O, LSE);
  const std::vector<int64_t> rows = {8, 0, 3, 3, 5};
  fa::reference_forward_rows(p, Q, K, V, rows, Or, Lr);
  REQUIRE(Or.numel() == 2 * 4 * 5 * 5);
  for (int64_t bh = 0; bh < 8; ++bh)
    for (int64_t x = 0; x < 5; ++x) {
      INFO("(b, h) " << bh << ", row " << rows[size_t(x)]);
      const int64_t full = bh * 9 + rows[size_t(x)], part = bh * 5 + x;
      CHECK(std::memcmp(&Lr[part], &LSE[full], sizeof(double)) == 0);
      for (int64_t c = 0; c < 5; ++c) CHECK(std::memcmp(&Or[part * 5 + c], &O[full * 5 + c], sizeof(double)) == 0);
    }
  CHECK_THROWS_AS(fa::reference_forward_rows(p, Q, K, V, {9}, Or, Lr), std::invalid_argument);
  CHECK_THROWS_AS(fa::reference_forward_rows(p, Q, K, V, {-1}, Or, Lr), std::invalid_argument);
}

TEST_CASE("reference: inputs with known exact answers") {
  fa::Rng rng(11);
  SUBCASE("N_k = 1: O = V, LSE = s") {
    fa::AttnProblem p;
    p.H = 2, p.H_kv = 1, p.N_q = 4, p.N_k = 1, p.d = 3;
    fa::Tensor Q({1, 2, 4, 3}), K({1, 1, 1, 3}), V({1, 1, 1, 3});
    rng.fill_normal(Q), rng.fill_normal(K), rng.fill_normal(V);
    fa::TensorD O, LSE;
    fa::reference_forward(p, Q, K, V, O, LSE);
    for (int64_t r = 0; r < 8; ++r) {
      double s = 0;
      for (int c = 0; c < 3; ++c) s += double(Q[r * 3 + c]) * K[c];
      CHECK(LSE[r] == doctest::Approx(s / std::sqrt(3.0)).epsilon(1e-14));
      for (int c = 0; c < 3; ++c) CHECK(O[r * 3 + c] == doctest::Approx(V[c]).epsilon(1e-14));
    }
  }
  SUBCASE("equal keys, causal bottom-right: O_i = mean of visible V rows, LSE = s + log(count)") {
    fa::AttnProblem p;
    p.N_q = 3, p.N_k = 5, p.d = 2, p.causal = true;  // row i sees keys 0 .. i + 2
    fa::Tensor Q({1, 1, 3, 2}, 0.5f), K({1, 1, 5, 2}, 1.f), V({1, 1, 5, 2});
    for (int j = 0; j < 5; ++j) V[j * 2] = float(j), V[j * 2 + 1] = float(j * j);
    fa::TensorD O, LSE;
    fa::reference_forward(p, Q, K, V, O, LSE);
    const double s = 1.0 / std::sqrt(2.0);  // scale * (0.5 + 0.5)
    for (int i = 0; i < 3; ++i) {
      const int n = i + 3;
      double m0 = 0, m1 = 0;
      for (int j = 0; j < n; ++j) m0 += j, m1 += j * j;
      CHECK(O[i * 2] == doctest::Approx(m0 / n).epsilon(1e-14));
      CHECK(O[i * 2 + 1] == doctest::Approx(m1 / n).epsilon(1e-14));
      CHECK(LSE[i] == doctest::Approx(s + std::log(double(n))).epsilon(1e-14));
    }
  }
  SUBCASE("causal with N_q > N_k: rows that see no key give O = 0, LSE = -inf") {
    fa::AttnProblem p;
    p.N_q = 4, p.N_k = 2, p.d = 2, p.causal = true;  // rows 0, 1 see nothing; row 2 sees key 0
    fa::Tensor Q({1, 1, 4, 2}, 1.f), K({1, 1, 2, 2}, 1.f), V({1, 1, 2, 2});
    V[0] = 3, V[1] = 4, V[2] = 5, V[3] = 6;
    fa::TensorD O, LSE;
    fa::reference_forward(p, Q, K, V, O, LSE);
    CHECK(LSE[0] == -std::numeric_limits<double>::infinity());
    CHECK(LSE[1] == -std::numeric_limits<double>::infinity());
    CHECK(O[0] == 0.0);
    CHECK(O[3] == 0.0);
    CHECK(O[4] == 3.0);  // row 2 sees key 0 only
    CHECK(O[6] == 4.0);  // row 3 sees both: mean of (3,4) and (5,6) in dim 0 is 4
  }
}

TEST_CASE("reference backward equals central finite differences of the reference forward") {
  for (bool causal : {false, true}) {
    fa::AttnProblem p;
    p.B = 1, p.H = 4, p.H_kv = 2, p.N_q = 6, p.N_k = 4, p.d = 3, p.causal = causal;
    fa::Rng rng(5);
    fa::TensorD Q({1, 4, 6, 3}), K({1, 2, 4, 3}), V(K.shape), dO(Q.shape);
    for (auto* t : {&Q, &K, &V, &dO}) rng.fill_normal(*t);
    fa::TensorD dQ, dK, dV;
    fa::reference_backward(p, Q, K, V, dO, dQ, dK, dV);
    auto loss = [&]() {
      fa::TensorD O, L;
      fa::reference_forward(p, Q, K, V, O, L);
      double s = 0;
      for (int64_t e = 0; e < O.numel(); ++e) s += O[e] * dO[e];
      return s;
    };
    for (auto [X, dX] : {std::pair{&Q, &dQ}, {&K, &dK}, {&V, &dV}}) {
      for (int64_t e = 0; e < X->numel(); ++e) {
        const double x0 = (*X)[e], h = 1e-6;
        (*X)[e] = x0 + h;
        const double up = loss();
        (*X)[e] = x0 - h;
        const double down = loss();
        (*X)[e] = x0;
        CHECK(std::fabs((up - down) / (2 * h) - (*dX)[e]) < 1e-7);
      }
    }
  }
}

TEST_CASE("compare(): NaN and +inf never pass; -inf in both (a row that sees no key) does") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float x[3] = {1.f, nan, -inf};
  const double r[3] = {1.0, 2.0, -INFINITY};
  const fa::ErrorStats e = fa::compare(x, r, 3);
  CHECK(std::isinf(e.max_abs));
  CHECK(e.nonfinite == 1);
  const float y[3] = {1.f, 2.f, -inf};
  CHECK(fa::compare(y, r, 3).max_abs == 0.0);
  const float z[1] = {inf};  // +inf is never a legitimate output, even where the other has it
  const double rz[1] = {INFINITY};
  CHECK(std::isinf(fa::compare(z, rz, 1).max_abs));
}

TEST_CASE("memtrack: ExtraMemory sees a vector allocated inside its scope, and its peak") {
  fa::ExtraMemory mem;
  {
    std::vector<float> a(1 << 20);  // 4 MiB
    a[5] = 1.f;
    std::vector<float> b(1 << 18);  // 1 MiB
    b[5] = a[5];
  }
  CHECK(mem.peak_bytes() >= 5 * (1 << 20));
  CHECK(mem.peak_bytes() < 5 * (1 << 20) + 64 * 1024);
  fa::ExtraMemory mem2;
  CHECK(mem2.peak_bytes() == 0);
}

TEST_CASE("problem: GQA head mapping and bottom-right causal rule") {
  fa::AttnProblem p;
  p.H = 8, p.H_kv = 2, p.N_q = 3, p.N_k = 5, p.causal = true;
  CHECK(p.kv_head(0) == 0);
  CHECK(p.kv_head(3) == 0);
  CHECK(p.kv_head(4) == 1);
  CHECK(p.kv_head(7) == 1);
  CHECK(p.visible(0, 2));   // j <= i + N_k - N_q = 2
  CHECK(!p.visible(0, 3));
  CHECK(p.keys_seen(0) == 3);
  CHECK(p.keys_seen(2) == 5);
  p.N_q = 6, p.N_k = 2;  // rows 0..3 see nothing
  CHECK(p.keys_seen(3) == 0);
  CHECK(p.keys_seen(4) == 1);
  CHECK_THROWS_AS([] { fa::AttnProblem q; q.H = 8; q.H_kv = 3; fa::validate(q); }(), fa::InputError);
}

// Issue 34's window: key_range() against the rule written out (i + N_k - N_q - L <= j <= i +
// N_k - N_q + R, -1 unbounded, causal R = 0), over every row and key of small ragged problems.
TEST_CASE("problem: the sliding window's key range is the documented rule, one contiguous range per row") {
  for (int64_t Nq : {1, 5, 9})
    for (int64_t Nk : {1, 4, 9})
      for (bool causal : {false, true})
        for (int64_t L : {-1, 0, 1, 3, 100})
          for (int64_t R : {-1, 0, 2, 100}) {
            fa::AttnProblem p = fa::make_problem(1, 1, 1, Nq, Nk, 4, causal);
            p.window_left = L, p.window_right = R;
            fa::validate(p);
            for (int64_t i = 0; i < Nq; ++i) {
              const int64_t diag = i + Nk - Nq;
              int64_t n = 0;
              for (int64_t j = 0; j < Nk; ++j) {
                const bool want = (L < 0 || j >= diag - L) && (R < 0 || j <= diag + R) && (!causal || j <= diag);
                INFO("N_q " << Nq << " N_k " << Nk << " causal " << causal << " window " << L << "," << R << " i " << i << " j " << j);
                CHECK(p.visible(i, j) == want);
                CHECK((p.key_begin(i) <= j && j < p.key_end(i)) == want);
                n += want;
              }
              CHECK(p.keys_seen(i) == n);
              if (i > 0) CHECK(p.key_begin(i) >= p.key_begin(i - 1));  // both ends rise with i
              if (i > 0) CHECK(p.key_end(i) >= p.key_end(i - 1));
            }
          }
  // A side wider than the problem bounds nothing and cannot overflow.
  fa::AttnProblem w = fa::make_problem(1, 1, 1, 3, 5, 4, false);
  w.window_left = w.window_right = INT64_MAX;
  CHECK(w.key_begin(0) == 0);
  CHECK(w.key_end(0) == 5);
  // validate(): a side below -1, a negative or non-finite softcap, each named by its flag.
  w.window_left = -2;
  CHECK_THROWS_WITH_AS(fa::validate(w), doctest::Contains("--window"), fa::InputError);
  w.window_left = -1;
  for (float c : {-1.f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    w.softcap = c;
    CHECK_THROWS_WITH_AS(fa::validate(w), doctest::Contains("--softcap"), fa::InputError);
  }
  // The softcap and its slope: c tanh(s / c), 1 - tanh^2, 0 for a masked (-inf) score.
  w.softcap = 2.f;
  CHECK(w.capped(100.0) == doctest::Approx(2.0));
  CHECK(w.capped(1.0) == doctest::Approx(2.0 * std::tanh(0.5)));
  CHECK(w.capped_slope(w.capped(1.0)) == doctest::Approx(1.0 - std::tanh(0.5) * std::tanh(0.5)));
  CHECK(w.capped_slope(-std::numeric_limits<double>::infinity()) == 0.0);
  w.softcap = 0.f;
  CHECK(w.capped(100.0) == 100.0);
  CHECK(w.capped_slope(-std::numeric_limits<double>::infinity()) == 1.0);
}

TEST_CASE("rng: the same seed gives the same normals; mean ~0 and variance ~1") {
  fa::Rng a(42), b(42);
  double s = 0, s2 = 0;
  for (int i = 0; i < 100000; ++i) {
    const double x = a.normal();
    CHECK_EQ(x, b.normal());
    s += x, s2 += x * x;
  }
  CHECK(std::fabs(s / 1e5) < 0.02);
  CHECK(std::fabs(s2 / 1e5 - 1) < 0.02);
}

// ---- The KV cache (common/kv_cache.hpp, issue 33) ----

namespace {

fa::Tensor normals(std::vector<int64_t> shape, uint64_t seed) {
  fa::Tensor x(std::move(shape));
  fa::Rng(seed).fill_normal(x);
  return x;
}

// Keys 0 .. len - 1 of sequence b of a contiguous [B, H_kv, N_k, d] tensor, as [1, H_kv, len, d]:
// written out here from the layout, not with the cache's own gather.
fa::Tensor first_keys(const fa::AttnProblem& p, const fa::Tensor& X, int64_t b, int64_t len) {
  fa::Tensor S({1, p.H_kv, len, p.d});
  for (int64_t g = 0; g < p.H_kv; ++g)
    for (int64_t j = 0; j < len; ++j)
      for (int64_t x = 0; x < p.d; ++x) S[(g * len + j) * p.d + x] = X[((b * p.H_kv + g) * p.N_k + j) * p.d + x];
  return S;
}

// Rows of sequence b of a [B, ...] tensor whose sequences are `n` elements each.
template <class T>
fa::TensorT<T> seq(const fa::TensorT<T>& X, int64_t b, int64_t n) {
  fa::TensorT<T> S({n});
  for (int64_t i = 0; i < n; ++i) S[i] = X[b * n + i];
  return S;
}

bool same(const fa::TensorD& a, const fa::TensorD& b) {
  return a.numel() == b.numel() && std::memcmp(a.ptr(), b.ptr(), size_t(a.numel()) * sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("kv cache: validate_kv_cache names the flag of every error") {
  const fa::AttnProblem p = fa::make_problem(2, 4, 2, 1, 64, 16, false);
  fa::KvCacheHost ok;
  CHECK_NOTHROW(fa::validate_kv_cache(p, ok));  // no cache at all: the plain problem
  ok.lens = {64, 0};
  CHECK_NOTHROW(fa::validate_kv_cache(p, ok));
  const auto refused = [&](const fa::KvCacheHost& c, const char* flag, const char* found) {
    CHECK_THROWS_WITH_AS(fa::validate_kv_cache(p, c), doctest::Contains(flag), fa::InputError);
    CHECK_THROWS_WITH_AS(fa::validate_kv_cache(p, c), doctest::Contains(found), fa::InputError);
  };
  fa::KvCacheHost c;
  SUBCASE("lengths") {
    c.lens = {3};
    refused(c, "--cache-lens", "found 1");                     // not B entries
    c.lens = {3, -1};
    refused(c, "--cache-lens", "-1 for sequence 1");
    c.lens = {65, 3};
    refused(c, "--cache-lens", "65 for sequence 0");           // past N_k
  }
  SUBCASE("page size") {
    c.page_size = 8, c.pages_per_seq = 8, c.num_pages = 16, c.table.assign(16, 0);
    refused(c, "--page-size", "found 8");
    c.page_size = 512, c.pages_per_seq = 1;
    refused(c, "--page-size", "found 512");
    fa::KvCacheHost t;  // a table and no page size
    t.table = {0, 1}, t.pages_per_seq = 1, t.num_pages = 2;
    refused(t, "--block-table", "no page size");
  }
  SUBCASE("block table") {
    c.page_size = 16, c.pages_per_seq = 4, c.num_pages = 8;
    c.table = {0, 1, 2, 3, 4, 5, 6};
    refused(c, "--block-table", "7 entries");                  // not [B, pages_per_seq]
    c.table = {0, 1, 2, 3, 4, 5, 6, 7};
    CHECK_NOTHROW(fa::validate_kv_cache(p, c));
    fa::KvCacheHost wide = c;
    wide.pages_per_seq = 5, wide.table.assign(10, 0);
    refused(wide, "--block-table", "5 * 16");                  // capacity 80 != N_k 64
    c.table[6] = 8;
    refused(c, "--block-table", "8 at [1, 2]");                // a page past the cache
    c.table[6] = -1;
    refused(c, "--block-table", "-1 at [1, 2]");
    c.lens = {64, 32};  // sequence 1 reads pages 0 and 1 only: entries 2 and 3 may hold anything
    CHECK_NOTHROW(fa::validate_kv_cache(p, c));
    c.lens = {64, 33};  // key 32 is on page 2
    refused(c, "--block-table", "-1 at [1, 2]");
    c.num_pages = 0, c.lens = {};
    refused(c, "--block-table", "found 0");
  }
}

TEST_CASE("kv cache: make_paged is a seeded permutation; page_kv and gather_sequence give the keys back") {
  const fa::AttnProblem p = fa::make_problem(3, 2, 2, 1, 70, 8, false);  // 70 keys: 5 pages of 16, the last part padding
  const fa::KvCacheHost c = fa::make_paged(p, 16, 7);
  CHECK(c.pages_per_seq == 5);
  CHECK(c.num_pages == 15);
  CHECK(c.lens == std::vector<int32_t>(3, 70));  // the padding is no key
  std::vector<int32_t> sorted = c.table;
  std::sort(sorted.begin(), sorted.end());
  for (int32_t i = 0; i < 15; ++i) CHECK(sorted[size_t(i)] == i);
  bool moved = false;  // scattered, not in order
  for (int32_t i = 0; i < 15; ++i) moved |= c.table[size_t(i)] != i;
  CHECK(moved);
  CHECK(fa::make_paged(p, 16, 7).table == c.table);
  CHECK(fa::make_paged(p, 16, 8).table != c.table);
  CHECK(fa::make_paged(fa::make_problem(3, 2, 2, 1, 64, 8, false), 16, 7).lens.empty());  // no padding, no lens
  const fa::AttnProblem pc = fa::cache_problem(p, c);
  CHECK(pc.N_k == 80);
  CHECK_NOTHROW(fa::validate_kv_cache(pc, c));

  const fa::Tensor K = normals({3, 2, 70, 8}, 1);
  const fa::Tensor Kp = fa::page_kv(p, c, K);
  CHECK(Kp.shape == std::vector<int64_t>{15, 2, 16, 8});
  for (int64_t b = 0; b < 3; ++b) CHECK(fa::gather_sequence(pc, c, Kp, b).data == first_keys(p, K, b, 70).data);
  // The padding slots (keys 70 ... 79 of each sequence) are zeros.
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t j = 70; j < 80; ++j) CHECK(Kp[fa::cache_offset(pc, c, b, 1, j) + 3] == 0.f);
  CHECK_THROWS_WITH_AS(fa::make_paged(p, 8, 7), doctest::Contains("--page-size"), fa::InputError);
}

TEST_CASE("kv cache: reference_kv_cache with every length N_k is the plain reference, contiguous or paged") {
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    const fa::AttnProblem p = fa::make_problem(3, 4, 2, 5, 64, 16, causal);
    const fa::Tensor Q = normals({3, 4, 5, 16}, 1), K = normals({3, 2, 64, 16}, 2), V = normals({3, 2, 64, 16}, 3);
    fa::TensorD O, LSE, Oc, Lc;
    fa::reference_forward(p, Q, K, V, O, LSE);
    fa::KvCacheHost contiguous;
    fa::reference_kv_cache(p, contiguous, Q, K, V, Oc, Lc);
    CHECK(same(Oc, O));
    CHECK(same(Lc, LSE));
    contiguous.lens = {64, 64, 64};
    fa::reference_kv_cache(p, contiguous, Q, K, V, Oc, Lc);
    CHECK(same(Oc, O));
    CHECK(same(Lc, LSE));
    fa::KvCacheHost in_order = fa::make_paged(p, 16, 0);
    for (int32_t i = 0; i < 12; ++i) in_order.table[size_t(i)] = i;
    fa::KvCacheHost shuffled = fa::make_paged(p, 32, 5);
    for (const fa::KvCacheHost* c : {&in_order, &shuffled}) {
      INFO("page size " << c->page_size);
      fa::reference_kv_cache(p, *c, Q, fa::page_kv(p, *c, K), fa::page_kv(p, *c, V), Oc, Lc);
      CHECK(same(Oc, O));
      CHECK(same(Lc, LSE));
    }
  }
}

TEST_CASE("kv cache: shorter lengths are the reference on the truncated K and V; an empty sequence gives O = 0, LSE = -inf") {
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    const fa::AttnProblem p = fa::make_problem(4, 4, 1, 3, 100, 8, causal);  // MQA, 100 keys: padded pages of 16
    const fa::Tensor Q = normals({4, 4, 3, 8}, 4), K = normals({4, 1, 100, 8}, 5), V = normals({4, 1, 100, 8}, 6);
    const std::vector<int32_t> lens = {100, 1, 0, 37};
    fa::KvCacheHost contiguous;
    contiguous.lens = lens;
    fa::KvCacheHost paged = fa::make_paged(p, 16, 9);
    paged.lens = lens;
    for (const fa::KvCacheHost* c : {&contiguous, &paged}) {
      INFO("paged " << c->paged());
      fa::TensorD O, LSE;
      if (c->paged())
        fa::reference_kv_cache(fa::cache_problem(p, *c), *c, Q, fa::page_kv(p, *c, K), fa::page_kv(p, *c, V), O, LSE);
      else
        fa::reference_kv_cache(p, *c, Q, K, V, O, LSE);
      for (int64_t b = 0; b < 4; ++b) {
        INFO("sequence " << b << ", len " << lens[size_t(b)]);
        const fa::TensorD Ob = seq(O, b, 4 * 3 * 8), Lb = seq(LSE, b, 4 * 3);
        if (lens[size_t(b)] == 0) {
          for (int64_t i = 0; i < Ob.numel(); ++i) CHECK(Ob[i] == 0.0);
          for (int64_t i = 0; i < Lb.numel(); ++i) CHECK(Lb[i] == -INFINITY);
          continue;
        }
        fa::AttnProblem t = p;
        t.B = 1, t.N_k = lens[size_t(b)];
        fa::TensorD Ot, Lt;
        fa::reference_forward(t, seq(Q, b, 4 * 3 * 8), first_keys(p, K, b, t.N_k), first_keys(p, V, b, t.N_k), Ot, Lt);
        CHECK(same(Ob, Ot));
        CHECK(same(Lb, Lt));
      }
    }
  }
}

TEST_CASE("kv cache: the causal diagonal is aligned to each sequence's length") {
  // Every key zero: every score is 0, so a row's O is the mean of the V rows it sees and its LSE
  // is log(count). Row i of sequence b sees keys j <= i + len - N_q: count = i + len - N_q + 1,
  // clamped to 0 ... len (written out here, independent of key_range()).
  const int64_t N_q = 4;
  const fa::AttnProblem p = fa::make_problem(3, 2, 2, N_q, 48, 4, true);
  const fa::Tensor Q = normals({3, 2, N_q, 4}, 1), K({3, 2, 48, 4}), V = normals({3, 2, 48, 4}, 2);
  fa::KvCacheHost c = fa::make_paged(p, 16, 3);
  c.lens = {48, 2, 17};  // sequence 1: rows 0 and 1 see no key
  fa::TensorD O, LSE;
  fa::reference_kv_cache(p, c, Q, fa::page_kv(p, c, K), fa::page_kv(p, c, V), O, LSE);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < N_q; ++i) {
        const int64_t len = c.lens[size_t(b)];
        const int64_t count = std::max<int64_t>(0, std::min<int64_t>(len, i + len - N_q + 1));
        INFO("b " << b << " h " << h << " row " << i << " count " << count);
        const double L = LSE[(b * 2 + h) * N_q + i];
        if (count == 0) CHECK(L == -INFINITY);
        else CHECK(L == doctest::Approx(std::log(double(count))).epsilon(1e-14));
        for (int64_t x = 0; x < 4; ++x) {
          double mean = 0;
          for (int64_t j = 0; j < count; ++j) mean += V[((b * 2 + h) * 48 + j) * 4 + x];
          if (count) mean /= double(count);
          CHECK(O[((b * 2 + h) * N_q + i) * 4 + x] == doctest::Approx(mean).epsilon(1e-12));
        }
      }
}

TEST_CASE("kv cache: two sequences that share their prefix pages read the same keys") {
  // Page 0 is a prompt both sequences share; then sequence 0 goes on in page 1, sequence 1 in page 2.
  const fa::AttnProblem p = fa::make_problem(2, 2, 1, 1, 32, 8, false);
  const fa::Tensor pages = normals({3, 1, 16, 8}, 4), V = normals({3, 1, 16, 8}, 5);
  fa::Tensor Q = normals({2, 2, 1, 8}, 6);
  for (int64_t i = 0; i < 16; ++i) Q[16 + i] = Q[i];  // the same query in both sequences
  fa::KvCacheHost c;
  c.page_size = 16, c.pages_per_seq = 2, c.num_pages = 3, c.table = {0, 1, 0, 2};
  // Sequence 1 alone, its keys written out as page 0 then page 2.
  const auto keys_of_seq1 = [](const fa::Tensor& X) {
    fa::Tensor S({1, 1, 32, 8});
    for (int64_t i = 0; i < 16 * 8; ++i) S[i] = X[i], S[16 * 8 + i] = X[2 * 16 * 8 + i];
    return S;
  };
  fa::TensorD O, LSE, Ot, Lt;
  fa::reference_kv_cache(p, c, Q, pages, V, O, LSE);
  fa::AttnProblem t = p;
  t.B = 1;
  fa::reference_forward(t, seq(Q, 1, 16), keys_of_seq1(pages), keys_of_seq1(V), Ot, Lt);
  CHECK(same(seq(O, 1, 16), Ot));
  CHECK(same(seq(LSE, 1, 2), Lt));
  CHECK(!same(seq(O, 0, 16), seq(O, 1, 16)));  // different second pages
  c.lens = {16, 16};  // only the shared page: the same query gives the same answer
  fa::reference_kv_cache(p, c, Q, pages, V, O, LSE);
  CHECK(same(seq(O, 0, 16), seq(O, 1, 16)));
  CHECK(same(seq(LSE, 0, 2), seq(LSE, 1, 2)));
}

// ---- The KV cache through a whole program (cli.hpp's stage_main), on the CPU ----

namespace {

// A stage that takes a cache: stage 01 sequence by sequence (as the baselines run it), or, wrong
// on purpose, the plain forward on the whole capacity, blind to the lengths.
fa::Stage cache_stage(bool blind) {
  fa::Stage s;
  s.name = "kv_test";
  s.idea = "stage 01 on a cache";
  s.forward = fa::baseline_forward;
  s.cache_forward_for = [blind](fa::DType) -> fa::CacheForwardFn {
    if (!blind) return fa::per_sequence(fa::baseline_forward);
    return [](const fa::AttnProblem& p, const fa::KvCacheHost&, const float* Q, const float* K, const float* V,
              float* O, float* LSE) { fa::baseline_forward(p, Q, K, V, O, LSE); };
  };
  return s;
}

// stage_main(args) with stdout captured: (exit code, stdout).
std::pair<int, std::string> run_main(const fa::Stage& st, std::vector<std::string> args) {
  args.insert(args.begin(), st.name);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out;
  std::streambuf* old = std::cout.rdbuf(out.rdbuf());
  const int rc = fa::stage_main(int(argv.size()), argv.data(), st);
  std::cout.rdbuf(old);
  return {rc, out.str()};
}


}  // namespace

TEST_CASE("kv cache program: lengths and pages from the flags, checked against reference_kv_cache; a stage blind to them fails") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_kv_program";
  fs::create_directories(dir);
  const std::string out = (dir / "O.npy").string();
  const std::vector<std::string> shape = {"--batch", "3", "--heads", "4", "--kv-heads", "2", "--seq-q", "2",
                                          "--seq-k", "40", "--head-dim", "16", "--causal", "--seed", "5", "--json"};
  SUBCASE("--cache-lens and --page-size: the random inputs in scattered pages") {
    std::vector<std::string> args = shape;
    for (const char* a : {"--cache-lens", "40,0,17", "--page-size", "16", "--out"}) args.push_back(a);
    args.push_back(out);
    const auto [rc, text] = run_main(cache_stage(false), args);
    REQUIRE(rc == 0);
    const nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j["cache"]["lens"] == std::vector<int>{40, 0, 17});
    CHECK(j["cache"]["page_size"] == 16);
    CHECK(j["cache"]["pages_per_seq"] == 3);
    CHECK(j["cache"]["num_pages"] == 9);
    CHECK(j["problem"]["N_k"] == 48);  // the capacity
    CHECK(j["forward"]["errors"]["O_vs_f64"]["max_abs"].get<double>() < 1e-5);
    CHECK(j["forward"]["errors"]["LSE_vs_f64"]["max_abs"].get<double>() < 1e-5);
    // O written is the reference on each sequence's first len keys of the plain random inputs.
    const fa::AttnProblem p = fa::make_problem(3, 4, 2, 2, 40, 16, true);
    const fa::Inputs in = fa::random_inputs(p, 5);
    const fa::Tensor O = fa::read_npy(out, "O");
    const int lens[] = {40, 0, 17};
    for (int64_t b = 0; b < 3; ++b) {
      fa::AttnProblem t = p;
      t.B = 1, t.N_k = lens[b];
      fa::TensorD Ot, Lt;
      if (t.N_k > 0)
        fa::reference_forward(t, seq(in.Q, b, 4 * 2 * 16), first_keys(p, in.K, b, t.N_k), first_keys(p, in.V, b, t.N_k), Ot, Lt);
      for (int64_t i = 0; i < 4 * 2 * 16; ++i)
        CHECK(O[b * 4 * 2 * 16 + i] == doctest::Approx(t.N_k > 0 ? Ot[i] : 0.0).epsilon(1e-5).scale(1));
    }
  }
  SUBCASE("a stage that ignores the lengths shows as a large error") {
    std::vector<std::string> args = shape;
    for (const char* a : {"--cache-lens", "40,3,17"}) args.push_back(a);
    const auto [rc, text] = run_main(cache_stage(true), args);
    REQUIRE(rc == 0);
    CHECK(nlohmann::json::parse(text)["forward"]["errors"]["O_vs_f64"]["max_abs"].get<double>() > 1e-2);
  }
  SUBCASE("--block-table with generated inputs: pages in the table's shape, N_k its capacity") {
    const std::string table = (dir / "table.npy").string();
    fa::write_npy_i32(table, {3, 2}, {4, 0, 2, 4, 1, -7}, "test");  // sequence 1 shares page 4; sequence 2 reads one page
    const auto [rc, text] = run_main(cache_stage(false), {"--batch", "3", "--heads", "2", "--seq-q", "1", "--head-dim", "8",
                                                          "--page-size", "16", "--block-table", table, "--cache-lens",
                                                          "32,20,16", "--json"});
    REQUIRE(rc == 0);
    const nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j["cache"]["num_pages"] == 5);
    CHECK(j["problem"]["N_k"] == 32);
    CHECK(j["forward"]["errors"]["O_vs_f64"]["max_abs"].get<double>() < 1e-5);
  }
  SUBCASE("--block-table with --k/--v files of pages") {
    const std::string table = (dir / "table.npy").string(), q = (dir / "q.npy").string(), k = (dir / "k.npy").string(),
                      v = (dir / "v.npy").string();
    fa::write_npy_i32(table, {2, 2}, {1, 0, 2, 0}, "test");
    fa::write_npy(q, normals({2, 2, 1, 8}, 1), "q");
    const fa::Tensor K = normals({3, 1, 16, 8}, 2), V = normals({3, 1, 16, 8}, 3);
    fa::write_npy(k, K, "k");
    fa::write_npy(v, V, "v");
    const auto [rc, text] = run_main(cache_stage(false), {"--q", q, "--k", k, "--v", v, "--page-size", "16",
                                                          "--block-table", table, "--json", "--out", out});
    REQUIRE(rc == 0);
    const nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j["cache"]["num_pages"] == 3);
    CHECK(j["problem"]["H_kv"] == 1);
    CHECK(j["forward"]["errors"]["O_vs_f64"]["max_abs"].get<double>() < 1e-5);
    // Sequence 0 reads page 1 then page 0.
    fa::Tensor K0({1, 1, 32, 8}), V0({1, 1, 32, 8});
    for (int64_t i = 0; i < 16 * 8; ++i)
      K0[i] = K[16 * 8 + i], K0[16 * 8 + i] = K[i], V0[i] = V[16 * 8 + i], V0[16 * 8 + i] = V[i];
    fa::TensorD Ot, Lt;
    fa::reference_forward(fa::make_problem(1, 2, 1, 1, 32, 8, false), seq(fa::read_npy(q, "q"), 0, 16), K0, V0, Ot, Lt);
    const fa::Tensor O = fa::read_npy(out, "O");
    for (int64_t i = 0; i < 16; ++i) CHECK(O[i] == doctest::Approx(Ot[i]).epsilon(1e-5));
    // Pages of another size than --page-size are refused, naming --k.
    const auto [rc2, text2] = run_main(cache_stage(false), {"--q", q, "--k", k, "--v", v, "--page-size", "32",
                                                            "--block-table", table});
    CHECK(rc2 == 2);
    CHECK(text2.empty());
  }
  fs::remove_all(dir);
}

// ---- Packed variable-length batches (common/varlen.hpp) ----

// The size limits bound each sequence, not the padded batch: one long sequence beside many short
// ones is a valid batch (its padded B N_max^2 is not), a sequence past 2^40 scores is not.
TEST_CASE("varlen: validate_varlen_problem bounds each sequence, not the padded batch") {
  fa::VarlenHost v;
  v.cu_q = {0, 65536};
  for (int32_t t = 65537; t <= 65792; ++t) v.cu_q.push_back(t);
  v.cu_k = v.cu_q;
  const fa::AttnProblem p = fa::varlen_problem(fa::make_problem(1, 1, 1, 1, 1, 16, false), v);
  CHECK_THROWS_AS(fa::validate(p), fa::InputError);  // the padded 257 x 65536 x 65536
  CHECK_NOTHROW(fa::validate_varlen_problem(p, v));
  fa::VarlenHost big;
  big.cu_q = big.cu_k = {0, 2147483647};
  const fa::AttnProblem pb = fa::varlen_problem(fa::make_problem(1, 1, 1, 1, 1, 16, false), big);
  CHECK_THROWS_WITH_AS(fa::validate_varlen_problem(pb, big), doctest::Contains("--cu-seqlens-q/--cu-seqlens-k"),
                       fa::InputError);
  fa::AttnProblem bad = p;
  bad.window_left = -2;  // the rest of validate() still applies
  CHECK_THROWS_WITH_AS(fa::validate_varlen_problem(bad, v), doctest::Contains("--window"), fa::InputError);
}

TEST_CASE("varlen: validate_cu_seqlens and validate_varlen name the flag and the offending entry") {
  const auto refused = [](const fa::VarlenHost& v, const char* flag, const char* found) {
    CHECK_THROWS_WITH_AS(fa::validate_varlen(v), doctest::Contains(flag), fa::InputError);
    CHECK_THROWS_WITH_AS(fa::validate_varlen(v), doctest::Contains(found), fa::InputError);
  };
  CHECK_NOTHROW(fa::validate_varlen(fa::VarlenHost{{0, 0, 5}, {0, 3, 3}}));  // empty sequences are allowed
  refused({{0}, {0}}, "--cu-seqlens-q", "1 entries");
  refused({{2, 5}, {0, 5}}, "--cu-seqlens-q", "cu[0] = 2");
  refused({{0, 5, 4}, {0, 1, 2}}, "--cu-seqlens-q", "cu[2] = 4 < cu[1] = 5");
  refused({{0, 5, 6}, {0, 1, 0}}, "--cu-seqlens-k", "cu[2] = 0 < cu[1] = 1");
  refused({{0, 5, 6}, {0, 6}}, "--cu-seqlens-k", "found 2");
  refused({{0, 0}, {0, 6}}, "--cu-seqlens-q", "at least one query");
  refused({{0, 3}, {0, 0}}, "--cu-seqlens-k", "at least one key");
}

TEST_CASE("varlen: a sequence is a B = 1 token-major problem on offset pointers; the offsets are the documented layout") {
  const fa::VarlenHost v{{0, 2, 2, 7}, {0, 3, 4, 4}};
  const fa::AttnProblem p = fa::make_problem(1, 4, 2, 1, 1, 8, true);
  const fa::AttnProblem s = fa::sequence_problem(p, v, 2);
  CHECK(s.B == 1);
  CHECK(s.N_q == 5);
  CHECK(s.N_k == 0);
  CHECK(s.token_major);
  // Q [total_q, H, d]: row i of head h is token i's, its heads adjacent; K [total_k, H_kv, d].
  CHECK(s.q_offset(0, 3, 2) == (2 * 4 + 3) * 8);
  CHECK(s.q_row_stride() == 4 * 8);
  CHECK(s.kv_offset(0, 3, 1) == (1 * 2 + 1) * 8);  // query head 3 reads kv head 1
  CHECK(s.kv_row_stride() == 2 * 8);
  // LSE [H, total_q]: head h's row of tokens, total_q = 7 long.
  CHECK(s.lse_offset(0, 3, 2) == 3 * 7 + 2);
  CHECK(s.lse_span() == 3 * 7 + 5);
  const fa::AttnProblem pad = fa::varlen_problem(p, v);
  CHECK(pad.B == 3);
  CHECK(pad.N_q == 5);
  CHECK(pad.N_k == 3);
  CHECK(!pad.token_major);
}

TEST_CASE("varlen: the reference per sequence is the plain reference on each sequence's rows; a sequence without keys gives O = 0, LSE = -inf") {
  const fa::VarlenHost v{{0, 3, 3, 10, 12}, {0, 5, 9, 9, 20}};
  fa::AttnProblem p = fa::make_problem(1, 4, 2, 1, 1, 8, true);
  p.softcap = 5.f;
  const fa::Tensor Q = normals({12, 4, 8}, 1), K = normals({20, 2, 8}, 2), V = normals({20, 2, 8}, 3);
  fa::TensorD O, LSE;
  fa::reference_varlen_forward(p, v, Q, K, V, O, LSE);
  REQUIRE(O.shape == std::vector<int64_t>{12, 4, 8});
  REQUIRE(LSE.shape == std::vector<int64_t>{4, 12});
  for (int64_t b = 0; b < 4; ++b) {
    const int64_t t = v.cu_q[b], n = v.n_q(b), u = v.cu_k[b], m = v.n_k(b);
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < n; ++i) {
        // Written out here from the layout: token t + i of head h, against the plain reference.
        fa::Tensor Qb({1, 4, n, 8}), Kb({1, 2, std::max<int64_t>(m, 1), 8}), Vb = Kb;
        for (int64_t hh = 0; hh < 4; ++hh)
          for (int64_t ii = 0; ii < n; ++ii)
            for (int64_t c = 0; c < 8; ++c) Qb[(hh * n + ii) * 8 + c] = Q[((t + ii) * 4 + hh) * 8 + c];
        for (int64_t g = 0; g < 2; ++g)
          for (int64_t j = 0; j < m; ++j)
            for (int64_t c = 0; c < 8; ++c)
              Kb[(g * m + j) * 8 + c] = K[((u + j) * 2 + g) * 8 + c], Vb[(g * m + j) * 8 + c] = V[((u + j) * 2 + g) * 8 + c];
        if (m == 0) {
          CHECK(LSE[h * 12 + t + i] == -INFINITY);
          for (int64_t c = 0; c < 8; ++c) CHECK(O[((t + i) * 4 + h) * 8 + c] == 0.0);
          continue;
        }
        fa::AttnProblem pb = p;
        pb.N_q = n, pb.N_k = m;
        fa::TensorD Ob, Lb;
        fa::reference_forward(pb, Qb, Kb, Vb, Ob, Lb);
        CHECK(LSE[h * 12 + t + i] == Lb[h * n + i]);
        for (int64_t c = 0; c < 8; ++c) CHECK(O[((t + i) * 4 + h) * 8 + c] == Ob[(h * n + i) * 8 + c]);
      }
  }
  // pad_packed puts each sequence's rows at the start of its [heads, N, d] slot, zeros after.
  const fa::Tensor P = fa::pad_packed(K, v.cu_k, 2, 8, 11);
  CHECK(P.shape == std::vector<int64_t>{4, 2, 11, 8});
  CHECK(P[((3 * 2 + 1) * 11 + 10) * 8 + 7] == K[((9 + 10) * 2 + 1) * 8 + 7]);
  CHECK(P[((0 * 2 + 1) * 11 + 5) * 8] == 0.f);
}

namespace {

// A stage that runs packed batches, or, wrong on purpose, one blind to the layout (it reads every
// sequence as if its rows were d apart).
fa::Stage varlen_stage(bool takes, bool blind) {
  fa::Stage s;
  s.name = "varlen_test";
  s.idea = "stage 01 per sequence";
  s.forward = [blind](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
    fa::AttnProblem q = p;
    if (blind) q.token_major = false;
    fa::baseline_forward(q, Q, K, V, O, LSE);
  };
  s.varlen = takes;
  return s;
}

}  // namespace

TEST_CASE("varlen program: stage_main runs a packed batch per sequence and reports it; a stage blind to the layout fails; one without varlen refuses") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_varlen_program";
  fs::create_directories(dir);
  const std::string cq = (dir / "cuq.npy").string(), ck = (dir / "cuk.npy").string();
  fa::write_npy_i32(cq, {4}, {0, 17, 17, 50}, "test");
  fa::write_npy_i32(ck, {4}, {0, 20, 31, 31}, "test");
  const std::vector<std::string> args = {"--cu-seqlens-q", cq, "--cu-seqlens-k", ck, "--heads", "4", "--kv-heads", "2",
                                         "--head-dim", "16", "--causal", "--json"};
  {
    const auto [rc, text] = run_main(varlen_stage(true, false), args);
    REQUIRE(rc == 0);
    const nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j["varlen"]["total_q"] == 50);
    CHECK(j["varlen"]["total_k"] == 31);
    CHECK(j["forward"]["errors"]["O_vs_f64"]["max_abs"].get<double>() < 1e-5);
    CHECK(j["forward"]["errors"]["LSE_vs_f64"]["max_abs"].get<double>() < 1e-5);
  }
  {
    const auto [rc, text] = run_main(varlen_stage(true, true), args);
    REQUIRE(rc == 0);
    CHECK(nlohmann::json::parse(text)["forward"]["errors"]["O_vs_f64"]["max_abs"].get<double>() > 1e-2);
  }
  {
    std::ostringstream err;
    std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
    const auto [rc, text] = run_main(varlen_stage(false, false), args);
    std::cerr.rdbuf(old);
    CHECK(rc == 2);
    CHECK(text.empty());
    CHECK(err.str() == "varlen_test: --cu-seqlens-q: expected no packed batch in varlen_test (stages 01-04 and 06, and "
                       "stage 05's v13, take one), found --cu-seqlens-q " + cq + "\n");
  }
  fs::remove_all(dir);
}

TEST_CASE("npy: write_npy_i32 round-trips through read_npy_i32; a size that is not the shape's is refused") {
  const std::string path = (fs::temp_directory_path() / "fa_test_i32.npy").string();
  const std::vector<int32_t> x = {0, -7, 2147483647, -2147483647 - 1, 5, 6};
  fa::write_npy_i32(path, {2, 3}, x, "test");
  std::vector<int64_t> shape;
  CHECK(fa::read_npy_i32(path, "test", shape) == x);
  CHECK(shape == std::vector<int64_t>{2, 3});
  fa::write_npy_i32(path, {0}, {}, "test");
  CHECK(fa::read_npy_i32(path, "test", shape).empty());
  CHECK(shape == std::vector<int64_t>{0});
  CHECK_THROWS_AS(fa::write_npy_i32(path, {4}, x, "test"), fa::InputError);
  fs::remove(path);
}
