// libfa04.so's C ABI (fa04.h), the door tools/compare_torch_cpu.py uses: the battery run through
// it, the same bits as calling tiled::forward directly, and every refusal (a status, one line
// naming the argument, outputs left untouched) instead of a crash.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "fa04.h"
#include "harness.hpp"
#include "tiled.hpp"
#include "test_exports.hpp"
#include "varlen.hpp"

namespace {

// Stage 04 through the C ABI, as the tool calls it (blocks and threads: the defaults).
void forward_via_capi(const fa::AttnProblem& p, const float* Q, const float* K, const float* V,
                      float* O, float* LSE) {
  const int s = fa04_forward(Q, K, V, O, LSE, p.B, p.H, p.H_kv, p.N_q, p.N_k, p.d, p.causal, p.scale, 0, 0, 0);
  REQUIRE_MESSAGE(s == FA04_OK, fa04_last_error());
}

// The same with the problem's window and softcap (fa04_forward_variant).
void forward_variant_via_capi(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O,
                              float* LSE) {
  const int s = fa04_forward_variant(Q, K, V, O, LSE, p.B, p.H, p.H_kv, p.N_q, p.N_k, p.d, p.causal, p.scale, 0, 0,
                                     0, p.window_left, p.window_right, p.softcap);
  REQUIRE_MESSAGE(s == FA04_OK, fa04_last_error());
}

}  // namespace

TEST_CASE("04 C ABI: the conformance battery through fa04_forward") {
  fa::check_forward_battery(forward_via_capi);
}

TEST_CASE("04 C ABI: the variant battery (windows, softcaps) through fa04_forward_variant") {
  fa::check_variant_forward_battery(forward_variant_via_capi);
}

TEST_CASE("04 C ABI: the same bits as tiled::forward, for default and explicit blocks") {
  fa::AttnProblem p = fa::make_problem(2, 4, 2, 301, 257, 40, true);
  p.scale = 0.3f;
  const fa::Inputs in = fa::random_inputs(p, 11);
  for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{0, 0}, {7, 13}}) {
    INFO("Br=" << Br << " Bc=" << Bc);
    const fa::ForwardRun direct = fa::run_forward(
        [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, float* O, float* L) {
          tiled::Blocks b;
          b.Br = Br, b.Bc = Bc, b.threads = 2;
          tiled::forward<float>(q, Q, K, V, O, L, b);
        }, in);
    const fa::ForwardRun via = fa::run_forward(
        [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, float* O, float* L) {
          REQUIRE(fa04_forward(Q, K, V, O, L, q.B, q.H, q.H_kv, q.N_q, q.N_k, q.d, q.causal, q.scale, Br, Bc, 2) ==
                  FA04_OK);
        }, in);
    CHECK(fa::same_bits(direct.O, via.O));
    CHECK(fa::same_bits(direct.LSE, via.LSE));
  }
}

TEST_CASE("04 C ABI: fa04_forward_variant gives tiled::forward's bits with a window and a softcap") {
  // A window narrower than a block, asymmetric, GQA, N_q > N_k (rows left of key 0 see nothing),
  // blocks it crosses; a softcap below the logits' range. Without them: fa04_forward's bits.
  struct V {
    int64_t left, right;
    bool causal;
    float cap;
  };
  for (const V& w : {V{13, 5, false, 0.f}, V{20, -1, true, 7.5f}, V{-1, 3, false, 2.f}, V{-1, -1, false, 0.f}}) {
    fa::AttnProblem p = fa::make_problem(2, 4, 2, 150, 97, 24, w.causal);
    p.scale = 0.7f;
    p.window_left = w.left, p.window_right = w.right, p.softcap = w.cap;
    INFO(p.describe());
    const fa::Inputs in = fa::random_inputs(p, 12);
    for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{0, 0}, {7, 13}}) {
      INFO("Br=" << Br << " Bc=" << Bc);
      const fa::ForwardRun direct = fa::run_forward(
          [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, float* O, float* L) {
            tiled::Blocks b;
            b.Br = Br, b.Bc = Bc, b.threads = 2;
            tiled::forward<float>(q, Q, K, V, O, L, b);
          }, in);
      const fa::ForwardRun via = fa::run_forward(
          [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, float* O, float* L) {
            REQUIRE(fa04_forward_variant(Q, K, V, O, L, q.B, q.H, q.H_kv, q.N_q, q.N_k, q.d, q.causal, q.scale, Br,
                                         Bc, 2, q.window_left, q.window_right, q.softcap) == FA04_OK);
          }, in);
      CHECK(fa::same_bits(direct.O, via.O));
      CHECK(fa::same_bits(direct.LSE, via.LSE));
      if (!p.has_window() && p.softcap == 0.f) {
        const fa::ForwardRun plain = fa::run_forward(
            [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, float* O, float* L) {
              REQUIRE(fa04_forward(Q, K, V, O, L, q.B, q.H, q.H_kv, q.N_q, q.N_k, q.d, q.causal, q.scale, Br, Bc,
                                   2) == FA04_OK);
            }, in);
        CHECK(fa::same_bits(plain.O, via.O));
      }
    }
  }
}

TEST_CASE("04 C ABI: bad arguments get a status and one line naming them; outputs untouched") {
  std::vector<float> Q(64, 1.f), K(64, 1.f), V(64, 1.f);
  const float poison = std::numeric_limits<float>::quiet_NaN();
  struct Bad {
    const char* what;  // a word the message must contain
    int64_t B, H, H_kv, N, d;
    float scale;
    int64_t Br, Bc;
    int threads;
    bool null_q;
  };
  const Bad bad[] = {
      {"NULL", 1, 1, 1, 4, 16, 0.f, 0, 0, 0, true},
      {"--heads", 1, 0, 1, 4, 16, 0.f, 0, 0, 0, false},
      {"--kv-heads", 1, 3, 2, 1, 16, 0.f, 0, 0, 0, false},
      {"--seq-q", 1, 1, 1, 0, 16, 0.f, 0, 0, 0, false},
      {"--head-dim", 1, 1, 1, 4, -1, 0.f, 0, 0, 0, false},
      {"--scale", 1, 1, 1, 4, 16, -1.f, 0, 0, 0, false},
      {"--scale", 1, 1, 1, 4, 16, std::numeric_limits<float>::infinity(), 0, 0, 0, false},
      {"--block-q", 1, 1, 1, 4, 16, 0.f, -1, 0, 0, false},
      {"--threads", 1, 1, 1, 4, 16, 0.f, 0, 0, -2, false},
      {"--threads", 1, 1, 1, 4, 16, 0.f, 0, 0, 257, false},
      {"2^40", 1 << 20, 1 << 20, 1, 1 << 20, 16, 0.f, 0, 0, 0, false},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    std::vector<float> O(64, poison), L(4, poison);
    const int s = fa04_forward(b.null_q ? nullptr : Q.data(), K.data(), V.data(), O.data(), L.data(), b.B, b.H,
                               b.H_kv, b.N, b.N, b.d, 0, b.scale, b.Br, b.Bc, b.threads);
    CHECK(s == FA04_INVALID_ARGUMENT);
    const std::string msg = fa04_last_error();
    CHECK(msg.find(b.what) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    for (float x : O) CHECK(std::isnan(x));
    for (float x : L) CHECK(std::isnan(x));
  }
  // A good call clears the message.
  std::vector<float> O(64), L(4);
  CHECK(fa04_forward(Q.data(), K.data(), V.data(), O.data(), L.data(), 1, 1, 1, 4, 4, 16, 0, 0.f, 0, 0, 1) == FA04_OK);
  CHECK(std::string(fa04_last_error()).empty());
}

TEST_CASE("04 C ABI: a bad window or softcap is refused naming its flag; outputs untouched") {
  std::vector<float> Q(64, 1.f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Bad {
    const char* what;
    int64_t left, right;
    float cap;
  };
  for (const Bad& b : {Bad{"--window", -2, 4, 0.f}, Bad{"--window", 3, -7, 0.f}, Bad{"--softcap", -1, -1, -1.f},
                       Bad{"--softcap", 4, 0, nan}, Bad{"--softcap", -1, -1, inf}}) {
    INFO(b.what << " " << b.left << "," << b.right << " " << b.cap);
    std::vector<float> O(64, nan), L(4, nan);
    CHECK(fa04_forward_variant(Q.data(), Q.data(), Q.data(), O.data(), L.data(), 1, 1, 1, 4, 4, 16, 0, 0.f, 0, 0, 0,
                               b.left, b.right, b.cap) == FA04_INVALID_ARGUMENT);
    const std::string msg = fa04_last_error();
    CHECK(msg.find(b.what) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    for (float x : O) CHECK(std::isnan(x));
    for (float x : L) CHECK(std::isnan(x));
  }
  // The other checks are fa04_forward's.
  std::vector<float> O(64), L(4);
  CHECK(fa04_forward_variant(nullptr, Q.data(), Q.data(), O.data(), L.data(), 1, 1, 1, 4, 4, 16, 0, 0.f, 0, 0, 0, 1,
                             1, 0.f) == FA04_INVALID_ARGUMENT);
  CHECK(std::string(fa04_last_error()).find("NULL") != std::string::npos);
  CHECK(fa04_forward_variant(Q.data(), Q.data(), Q.data(), O.data(), L.data(), 1, 3, 2, 4, 4, 16, 0, 0.f, 0, 0, 0, 1,
                             1, 0.f) == FA04_INVALID_ARGUMENT);
  CHECK(std::string(fa04_last_error()).find("--kv-heads") != std::string::npos);
  // A good call clears the message; window 0, 0 is the diagonal alone: O = V's row, LSE = its score.
  CHECK(fa04_forward_variant(Q.data(), Q.data(), Q.data(), O.data(), L.data(), 1, 1, 1, 4, 4, 16, 0, 0.f, 0, 0, 1, 0,
                             0, 0.f) == FA04_OK);
  CHECK(std::string(fa04_last_error()).empty());
  for (float x : O) CHECK(x == 1.f);
  for (float x : L) CHECK(x == doctest::Approx(16.f / 4.f));  // scale 1/sqrt(16) times q.k = 16
}

namespace {

// fa04_forward_varlen on the whole packed batch of `in`, into outputs poisoned with NaN.
fa::ForwardRun forward_varlen_via_capi(const fa::Inputs& in, int64_t Br, int64_t Bc, int threads) {
  const fa::AttnProblem& p = in.p;
  const fa::VarlenHost& v = in.varlen;
  fa::ForwardRun r;
  r.O = fa::Tensor(fa::o_shape(in), std::numeric_limits<float>::quiet_NaN());
  r.LSE = fa::Tensor(fa::lse_shape(in), std::numeric_limits<float>::quiet_NaN());
  const int s = fa04_forward_varlen(in.Q.ptr(), in.K.ptr(), in.V.ptr(), r.O.ptr(), r.LSE.ptr(), v.cu_q.data(),
                                    v.cu_k.data(), v.batch(), v.total_q(), v.total_k(), p.H, p.H_kv, p.d, p.causal,
                                    p.scale, Br, Bc, threads, p.window_left, p.window_right, p.softcap);
  REQUIRE_MESSAGE(s == FA04_OK, fa04_last_error());
  return r;
}


}  // namespace

TEST_CASE("04 C ABI: fa04_forward_varlen gives varlen_forward(tiled::forward)'s bits on the varlen battery") {
  // The C++ path (fa::run_forward on a packed batch: tiled::forward per sequence on offset
  // pointers) is the one test_tiled.cpp holds to stage 01 and float64 on this battery; the C ABI
  // must give its bits, every element written (lengths 0, 1, 127, 129, 1000, N_q != N_k, windows,
  // softcaps, GQA and MQA, 40 short sequences).
  for (const fa::Case& c : fa::varlen_battery()) {
    INFO(c.name);
    const fa::Inputs in = fa::case_inputs(c);
    for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{0, 0}, {7, 13}}) {
      INFO("Br=" << Br << " Bc=" << Bc);
      const fa::ForwardRun direct = fa::run_forward(
          [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, float* O, float* L) {
            tiled::Blocks b;
            b.Br = Br, b.Bc = Bc, b.threads = 2;
            tiled::forward<float>(q, Q, K, V, O, L, b);
          }, in);
      const fa::ForwardRun via = forward_varlen_via_capi(in, Br, Bc, 2);
      CHECK(fa::same_bits(direct.O, via.O));
      CHECK(fa::same_bits(direct.LSE, via.LSE));
      CHECK_FALSE(fa::has_nan(via.O));
      CHECK_FALSE(fa::has_nan(via.LSE));
    }
  }
}

TEST_CASE("04 C ABI: fa04_forward_varlen of one sequence is fa04_forward_variant's [1, H, N, d] problem") {
  // The layouts differ (token-major [N, H, d] and LSE [H, N] against [1, H, N, d] and [1, H, N]),
  // the numbers must not: the same sequence, transposed, through the two doors.
  for (bool causal : {false, true}) {
    fa::AttnProblem p = fa::make_problem(1, 4, 2, 150, 97, 24, causal);
    p.scale = 0.7f, p.window_left = 20, p.window_right = causal ? 0 : 5, p.softcap = 7.5f;
    INFO(p.describe());
    const fa::Inputs plain = fa::random_inputs(p, 21);
    const fa::ForwardRun a = fa::run_forward(
        [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, float* O, float* L) {
          REQUIRE(fa04_forward_variant(Q, K, V, O, L, 1, q.H, q.H_kv, q.N_q, q.N_k, q.d, q.causal, q.scale, 0, 0, 2,
                                       q.window_left, q.window_right, q.softcap) == FA04_OK);
        }, plain);
    fa::Inputs packed;
    packed.varlen = fa::VarlenHost{{0, int32_t(p.N_q)}, {0, int32_t(p.N_k)}};
    packed.p = fa::varlen_problem(p, packed.varlen);
    packed.Q = fa::Tensor({p.N_q, p.H, p.d}), packed.K = fa::Tensor({p.N_k, p.H_kv, p.d});
    packed.V = fa::Tensor({p.N_k, p.H_kv, p.d});
    fa::scatter_rows(plain.Q, p.H, p.d, 0, p.N_q, packed.Q);
    fa::scatter_rows(plain.K, p.H_kv, p.d, 0, p.N_k, packed.K);
    fa::scatter_rows(plain.V, p.H_kv, p.d, 0, p.N_k, packed.V);
    const fa::ForwardRun b = forward_varlen_via_capi(packed, 0, 0, 2);
    CHECK(fa::same_bits(fa::gather_rows(b.O, p.H, p.d, 0, p.N_q), a.O));
    CHECK(std::memcmp(b.LSE.ptr(), a.LSE.ptr(), size_t(a.LSE.numel()) * sizeof(float)) == 0);  // [H, N] = [1, H, N]
  }
}

TEST_CASE("04 C ABI: fa04_forward_varlen refuses bad offsets with a status and one line; outputs untouched") {
  // Two sequences of 3 and 2 queries, 4 and 1 keys, H = 2, H_kv = 1, d = 8.
  const int64_t H = 2, H_kv = 1, d = 8;
  std::vector<float> Q(5 * H * d, 1.f), K(5 * H_kv * d, 1.f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Bad {
    const char* what;  // words the message must contain
    const char* also;
    std::vector<int32_t> cu_q, cu_k;
    int64_t B, total_q, total_k, H_kv;
    bool null_cu;
  };
  const std::vector<int32_t> good_q = {0, 3, 5}, good_k = {0, 4, 5};
  const Bad bad[] = {
      {"--cu-seqlens-q", "cu[0] = 1", {1, 3, 5}, good_k, 2, 5, 5, H_kv, false},
      {"--cu-seqlens-k", "cu[2] = 3 < cu[1] = 4", good_q, {0, 4, 3}, 2, 5, 3, H_kv, false},
      {"--cu-seqlens-q", "total_q = 6", good_q, good_k, 2, 6, 5, H_kv, false},
      {"--cu-seqlens-k", "total_k = 4", good_q, good_k, 2, 5, 4, H_kv, false},
      {"--cu-seqlens-q", "B = 0", good_q, good_k, 0, 5, 5, H_kv, false},
      {"--cu-seqlens-q", "B = -3", good_q, good_k, -3, 5, 5, H_kv, false},
      {"--cu-seqlens-q", "at least one query", {0, 0, 0}, good_k, 2, 0, 5, H_kv, false},
      {"--cu-seqlens-k", "at least one key", good_q, {0, 0, 0}, 2, 5, 0, H_kv, false},
      {"cu_seqlens_q", "NULL", good_q, good_k, 2, 5, 5, H_kv, true},
      {"--kv-heads", "divisor", good_q, good_k, 2, 5, 5, 3, false},
  };
  for (const Bad& b : bad) {
    INFO(std::string(b.what) << " " << b.also);
    std::vector<float> O(Q.size(), nan), L(size_t(H) * 5, nan);
    const int s = fa04_forward_varlen(Q.data(), K.data(), K.data(), O.data(), L.data(),
                                      b.null_cu ? nullptr : b.cu_q.data(), b.cu_k.data(), b.B, b.total_q, b.total_k,
                                      H, b.H_kv, d, 0, 0.f, 0, 0, 0, -1, -1, 0.f);
    CHECK(s == FA04_INVALID_ARGUMENT);
    const std::string msg = fa04_last_error();
    CHECK(msg.find(b.what) != std::string::npos);
    CHECK(msg.find(b.also) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    for (float x : O) CHECK(std::isnan(x));
    for (float x : L) CHECK(std::isnan(x));
  }
  // The variant and size checks are fa04_forward_variant's, with their words.
  std::vector<float> O(Q.size(), nan), L(size_t(H) * 5, nan);
  CHECK(fa04_forward_varlen(Q.data(), K.data(), K.data(), O.data(), L.data(), good_q.data(), good_k.data(), 2, 5, 5,
                            H, H_kv, d, 0, 0.f, 0, 0, 0, -2, 0, 0.f) == FA04_INVALID_ARGUMENT);
  CHECK(std::string(fa04_last_error()).find("--window") != std::string::npos);
  CHECK(fa04_forward_varlen(Q.data(), K.data(), K.data(), O.data(), L.data(), good_q.data(), good_k.data(), 2, 5, 5,
                            H, H_kv, d, 0, -1.f, 0, 0, 0, -1, -1, 0.f) == FA04_INVALID_ARGUMENT);
  CHECK(std::string(fa04_last_error()).find("--scale") != std::string::npos);
  CHECK(fa04_forward_varlen(Q.data(), K.data(), K.data(), O.data(), L.data(), good_q.data(), good_k.data(), 2, 5, 5,
                            H, H_kv, 0, 0, 0.f, 0, 0, 0, -1, -1, 0.f) == FA04_INVALID_ARGUMENT);
  CHECK(std::string(fa04_last_error()).find("--head-dim") != std::string::npos);
  for (float x : O) CHECK(std::isnan(x));
  // A good call clears the message; all-ones inputs give O = 1 and LSE = log(N_k(b)) + scale q.k.
  CHECK(fa04_forward_varlen(Q.data(), K.data(), K.data(), O.data(), L.data(), good_q.data(), good_k.data(), 2, 5, 5,
                            H, H_kv, d, 0, 0.f, 0, 0, 0, -1, -1, 0.f) == FA04_OK);
  CHECK(std::string(fa04_last_error()).empty());
  for (float x : O) CHECK(x == doctest::Approx(1.f));
  const float qk = float(d) / std::sqrt(float(d));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < 5; ++t) CHECK(L[size_t(h * 5 + t)] == doctest::Approx(qk + std::log(t < 3 ? 4.f : 1.f)));
}

TEST_CASE("04 C ABI: libfa04.so exports fa04_* and nothing else") {
  // The library this test runs, as the dynamic linker loaded it.
  const std::string path = fa::test::loaded_library("libfa04.so");
  REQUIRE(!path.empty());
  int fa04 = 0;
  for (const std::string& sym : fa::test::defined_symbols(path)) {
    INFO("exported: " << sym);
    if (sym.rfind("fa04_", 0) == 0) ++fa04;
    else CHECK(false);
  }
  CHECK(fa04 == 8);  // the eight functions of fa04.h
}

TEST_CASE("04 C ABI: block buffers larger than the memory are refused before any allocation") {
  // One query row per head, Br = Bc = 1, and a head dimension so large that the two threads'
  // buffers (Qi, Vj and Oi rows of d floats and Kt, d x row_stride(1): at least 4 d floats, 16
  // bytes, each) need about 2 x 16 x phys / 20 bytes, 1.6 times the machine's memory, whatever
  // the vector width. The inputs are never read: the refusal comes first.
  const double phys = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  REQUIRE(phys > 0);
  const int64_t d = (int64_t(phys / 20) + 15) / 16 * 16;
  tiled::Blocks one;
  one.Br = 1, one.Bc = 1, one.threads = 2;
  REQUIRE(2.0 * 4.0 * double(tiled::sram_floats(d, one)) > phys);  // the premise, checked
  std::vector<float> tiny(16, 1.f), O(16, std::numeric_limits<float>::quiet_NaN()), L(2, 0.f);
  const int s = fa04_forward(tiny.data(), tiny.data(), tiny.data(), O.data(), L.data(), 1, 2, 2, 1, 1, d, 0, 0.f,
                             0, 0, 2);
  CHECK(s == FA04_OUT_OF_MEMORY);
  CHECK(std::string(fa04_last_error()).find("--block-q/--block-k/--threads") != std::string::npos);
  for (float x : O) CHECK(std::isnan(x));
}

TEST_CASE("04 C ABI: blocks, ISA and the FMA peak report what the build uses") {
  int64_t Br = 0, Bc = 0;
  for (int64_t N : {100, 1024, 4096})
    for (int causal : {0, 1}) {
      INFO("N = " << N << " causal " << causal);
      REQUIRE(fa04_blocks_for(1, 8, N, N, 128, causal, 2, &Br, &Bc) == FA04_OK);
      fa::AttnProblem p = fa::make_problem(1, 8, 1, N, N, 128, causal != 0);
      const tiled::Blocks b = tiled::blocks_for(p, tiled::Blocks{0, 0, 2});
      CHECK(Br == b.Br);
      CHECK(Bc == b.Bc);
    }
  CHECK(fa04_blocks_for(1, 8, 64, 64, 0, 0, 2, &Br, &Bc) == FA04_INVALID_ARGUMENT);
  CHECK(std::string(fa04_last_error()).find("--head-dim") != std::string::npos);
  CHECK(fa04_blocks_for(1, 8, 64, 64, 64, 0, 2, nullptr, &Bc) == FA04_INVALID_ARGUMENT);
  CHECK(fa04_blocks_for(1, 8, 64, 64, 64, 0, -1, &Br, &Bc) == FA04_INVALID_ARGUMENT);
  CHECK(std::string(fa04_isa()) == tiled::mk::kIsa);
  CHECK(fa04_vector_floats() == tiled::mk::VW);
  const double peak = fa04_fma_peak_gflops(1, 1);
  CHECK(peak > 0.1);  // any machine does more than 0.1 GFLOP/s; a broken loop or timer gives 0 or inf
  CHECK(std::isfinite(peak));
  CHECK(fa04_fma_peak_gflops(0, 1) < 0);
  CHECK(fa04_fma_peak_gflops(1, 0) < 0);
  CHECK(fa04_fma_peak_gflops(257, 1) < 0);
}
