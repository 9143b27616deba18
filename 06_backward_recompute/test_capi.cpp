// libfa06.so's C ABI (fa06.h), the door python/fa_course's autograd uses: the backward battery
// run through it, the same bits as calling bwd::backward directly, and every refusal (a status,
// one line naming the argument, outputs left untouched) instead of a crash. Needs no GPU: the
// GPU half is checked here only for what it refuses before touching a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backward_tiled.hpp"
#include "conformance.hpp"
#include "fa06.h"
#include "harness.hpp"
#include "tiled.hpp"
#include "test_exports.hpp"
#include "varlen.hpp"

namespace {

// Stage 04's forward: the O and LSE the backward consumes (as python/fa_course pairs them).
void forward04(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
  tiled::forward<float>(p, Q, K, V, O, LSE);
}

// Stage 06 through the C ABI, as the Python op calls it (blocks and threads: the defaults).
void backward_via_capi(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
                       const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
  const int s = fa06_backward_cpu(Q, K, V, O, dO, LSE, dQ, dK, dV, p.B, p.H, p.H_kv, p.N_q, p.N_k, p.d, p.causal,
                                  p.scale, 0, 0, 0);
  REQUIRE_MESSAGE(s == FA06_OK, fa06_last_error());
}

// The same with the problem's window and softcap (fa06_backward_cpu_variant).
void backward_variant_via_capi(const fa::AttnProblem& p, const float* Q, const float* K, const float* V,
                               const float* O, const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
  const int s = fa06_backward_cpu_variant(Q, K, V, O, dO, LSE, dQ, dK, dV, p.B, p.H, p.H_kv, p.N_q, p.N_k, p.d,
                                          p.causal, p.scale, 0, 0, 0, p.window_left, p.window_right, p.softcap);
  REQUIRE_MESSAGE(s == FA06_OK, fa06_last_error());
}

}  // namespace

TEST_CASE("06 C ABI: the backward battery through fa06_backward_cpu") {
  fa::check_backward_battery(backward_via_capi, false, forward04);
}

TEST_CASE("06 C ABI: the variant backward battery (windows, softcaps) through fa06_backward_cpu_variant") {
  fa::check_variant_backward_battery(backward_variant_via_capi, false, forward04);
}

TEST_CASE("06 C ABI: fa06_backward_cpu_variant gives bwd::backward's bits with a window and a softcap") {
  struct W {
    int64_t left, right;
    bool causal;
    float cap;
  };
  for (const W& w : {W{9, 4, false, 0.f}, W{30, -1, true, 5.f}, W{-1, 2, false, 1.5f}, W{-1, -1, true, 0.f}}) {
    fa::AttnProblem p = fa::make_problem(2, 4, 2, 131, 77, 40, w.causal);
    p.scale = 0.6f;
    p.window_left = w.left, p.window_right = w.right, p.softcap = w.cap;
    INFO(p.describe());
    fa::Inputs in = fa::random_inputs(p, 8);
    fa::add_grad_output(in, "", 9);
    const fa::ForwardRun fwd = fa::run_forward(forward04, in);
    for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{0, 0}, {7, 13}}) {
      INFO("Br=" << Br << " Bc=" << Bc);
      const fa::BackwardRun direct = fa::run_backward(
          [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, const float* O,
              const float* dO, const float* L, float* dQ, float* dK, float* dV) {
            bwd::Blocks b;
            b.Br = Br, b.Bc = Bc, b.threads = 2;
            bwd::backward<float>(q, Q, K, V, O, dO, L, dQ, dK, dV, b);
          }, in, fwd);
      const fa::BackwardRun via = fa::run_backward(
          [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, const float* O,
              const float* dO, const float* L, float* dQ, float* dK, float* dV) {
            REQUIRE(fa06_backward_cpu_variant(Q, K, V, O, dO, L, dQ, dK, dV, q.B, q.H, q.H_kv, q.N_q, q.N_k, q.d,
                                              q.causal, q.scale, Br, Bc, 2, q.window_left, q.window_right,
                                              q.softcap) == FA06_OK);
          }, in, fwd);
      CHECK(fa::same_bits(direct.dQ, via.dQ));
      CHECK(fa::same_bits(direct.dK, via.dK));
      CHECK(fa::same_bits(direct.dV, via.dV));
    }
  }
}

TEST_CASE("06 C ABI: the same bits as bwd::backward, for default and explicit blocks") {
  fa::AttnProblem p = fa::make_problem(2, 4, 2, 131, 77, 40, true);
  p.scale = 0.3f;
  fa::Inputs in = fa::random_inputs(p, 5);
  fa::add_grad_output(in, "", 6);
  const fa::ForwardRun fwd = fa::run_forward(forward04, in);
  for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{0, 0}, {7, 13}}) {
    INFO("Br=" << Br << " Bc=" << Bc);
    const fa::BackwardRun direct = fa::run_backward(
        [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, const float* O, const float* dO,
            const float* L, float* dQ, float* dK, float* dV) {
          bwd::Blocks b;
          b.Br = Br, b.Bc = Bc, b.threads = 2;
          bwd::backward<float>(q, Q, K, V, O, dO, L, dQ, dK, dV, b);
        }, in, fwd);
    const fa::BackwardRun via = fa::run_backward(
        [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, const float* O, const float* dO,
            const float* L, float* dQ, float* dK, float* dV) {
          REQUIRE(fa06_backward_cpu(Q, K, V, O, dO, L, dQ, dK, dV, q.B, q.H, q.H_kv, q.N_q, q.N_k, q.d, q.causal,
                                    q.scale, Br, Bc, 2) == FA06_OK);
        }, in, fwd);
    CHECK(fa::same_bits(direct.dQ, via.dQ));
    CHECK(fa::same_bits(direct.dK, via.dK));
    CHECK(fa::same_bits(direct.dV, via.dV));
  }
}

TEST_CASE("06 C ABI: bad arguments get a status and one line naming them; outputs untouched") {
  std::vector<float> X(64, 1.f), L(4, 0.f);
  const float poison = std::numeric_limits<float>::quiet_NaN();
  struct Bad {
    const char* what;  // a word the message must contain
    int64_t B, H, H_kv, N, d;
    float scale;
    int64_t Br, Bc;
    int threads;
    bool null_do;
  };
  const Bad bad[] = {
      {"NULL", 1, 1, 1, 4, 16, 0.f, 0, 0, 0, true},
      {"--heads", 1, 0, 1, 4, 16, 0.f, 0, 0, 0, false},
      {"--kv-heads", 1, 3, 2, 1, 16, 0.f, 0, 0, 0, false},
      {"--seq-q", 1, 1, 1, 0, 16, 0.f, 0, 0, 0, false},
      {"--head-dim", 1, 1, 1, 4, -1, 0.f, 0, 0, 0, false},
      {"--scale", 1, 1, 1, 4, 16, -1.f, 0, 0, 0, false},
      {"--scale", 1, 1, 1, 4, 16, std::numeric_limits<float>::quiet_NaN(), 0, 0, 0, false},
      {"--block-q", 1, 1, 1, 4, 16, 0.f, -1, 0, 0, false},
      {"--threads", 1, 1, 1, 4, 16, 0.f, 0, 0, -2, false},
      {"--threads", 1, 1, 1, 4, 16, 0.f, 0, 0, 257, false},
      {"2^40", 1 << 20, 1 << 20, 1, 1 << 20, 16, 0.f, 0, 0, 0, false},
  };
  for (const Bad& b : bad) {
    INFO(b.what);
    std::vector<float> dQ(64, poison), dK(64, poison), dV(64, poison);
    const int s = fa06_backward_cpu(X.data(), X.data(), X.data(), X.data(), b.null_do ? nullptr : X.data(), L.data(),
                                    dQ.data(), dK.data(), dV.data(), b.B, b.H, b.H_kv, b.N, b.N, b.d, 0, b.scale,
                                    b.Br, b.Bc, b.threads);
    CHECK(s == FA06_INVALID_ARGUMENT);
    const std::string msg = fa06_last_error();
    CHECK(msg.find(b.what) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    for (const auto* t : {&dQ, &dK, &dV})
      for (float x : *t) CHECK(std::isnan(x));
  }
  // A good call clears the message.
  std::vector<float> dQ(64), dK(64), dV(64);
  CHECK(fa06_backward_cpu(X.data(), X.data(), X.data(), X.data(), X.data(), L.data(), dQ.data(), dK.data(), dV.data(),
                          1, 1, 1, 4, 4, 16, 0, 0.f, 0, 0, 1) == FA06_OK);
  CHECK(std::string(fa06_last_error()).empty());
}

TEST_CASE("06 C ABI: a bad window or softcap is refused naming its flag; outputs untouched") {
  std::vector<float> X(64, 1.f), L(4, 0.f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Bad {
    const char* what;
    int64_t left, right;
    float cap;
  };
  for (const Bad& b : {Bad{"--window", -2, 4, 0.f}, Bad{"--window", 3, -9, 0.f}, Bad{"--softcap", -1, -1, -0.5f},
                       Bad{"--softcap", 2, 2, nan}, Bad{"--softcap", -1, -1, inf}}) {
    INFO(b.what << " " << b.left << "," << b.right << " " << b.cap);
    std::vector<float> dQ(64, nan), dK(64, nan), dV(64, nan);
    CHECK(fa06_backward_cpu_variant(X.data(), X.data(), X.data(), X.data(), X.data(), L.data(), dQ.data(), dK.data(),
                                    dV.data(), 1, 1, 1, 4, 4, 16, 0, 0.f, 0, 0, 0, b.left, b.right,
                                    b.cap) == FA06_INVALID_ARGUMENT);
    const std::string msg = fa06_last_error();
    CHECK(msg.find(b.what) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    for (const auto* t : {&dQ, &dK, &dV})
      for (float x : *t) CHECK(std::isnan(x));
    // The GPU half refuses the same values the same way, before any kernel or GPU.
    CHECK(fa06_backward_variant("auto", X.data(), X.data(), X.data(), X.data(), X.data(), X.data(), X.data(),
                                X.data(), X.data(), 1, 1, 1, 4, 4, 16, FA06_BF16, 0, 0.f, b.left, b.right,
                                b.cap, nullptr) == (fa06_has_gpu() ? FA06_INVALID_ARGUMENT : FA06_UNSUPPORTED));
    if (fa06_has_gpu()) CHECK(std::string(fa06_last_error()).find(b.what) != std::string::npos);
  }
  // The other checks are fa06_backward_cpu's.
  std::vector<float> dQ(64), dK(64), dV(64);
  CHECK(fa06_backward_cpu_variant(X.data(), X.data(), X.data(), X.data(), nullptr, L.data(), dQ.data(), dK.data(),
                                  dV.data(), 1, 1, 1, 4, 4, 16, 0, 0.f, 0, 0, 0, 1, 1, 0.f) == FA06_INVALID_ARGUMENT);
  CHECK(std::string(fa06_last_error()).find("NULL") != std::string::npos);
  CHECK(fa06_backward_cpu_variant(X.data(), X.data(), X.data(), X.data(), X.data(), L.data(), dQ.data(), dK.data(),
                                  dV.data(), 1, 1, 1, 4, 4, 16, 0, 0.f, 0, 0, -3, 1, 1, 0.f) == FA06_INVALID_ARGUMENT);
  CHECK(std::string(fa06_last_error()).find("--threads") != std::string::npos);
  CHECK(fa06_backward_cpu_variant(X.data(), X.data(), X.data(), X.data(), X.data(), L.data(), dQ.data(), dK.data(),
                                  dV.data(), 1, 1, 1, 4, 4, 16, 0, 0.f, 0, 0, 1, 1, 1, 3.f) == FA06_OK);
  CHECK(std::string(fa06_last_error()).empty());
}

TEST_CASE("06 C ABI: fa06_backward_variant: a window the GPU plan does not take is unsupported, with its line") {
  if (!fa06_has_gpu()) return;  // the build without CUDA: every GPU call is FA06_UNSUPPORTED (above)
  // Host memory, 16-byte aligned: a call the plan accepts is then refused at the pointers (or the
  // missing GPU), exactly as fa06_backward refuses it; one the plan does not take, before that.
  std::vector<float> big(4 * 16 + 64, 1.f);
  float* a = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(big.data()) + 15) / 16 * 16);
  const int plain = fa06_backward("auto", a, a, a, a, a, a, a, a, a, 1, 1, 1, 4, 4, 16, FA06_BF16, 0, 0.f, nullptr);
  const std::string plain_msg = fa06_last_error();
  REQUIRE((plain == FA06_INVALID_ARGUMENT || plain == FA06_CUDA_ERROR));
  struct V {
    const char* flag;
    int64_t left, right;
    float cap;
  };
  for (const char* k : {"auto", "gpu_v1", "gpu_v2", "gpu_v4"})
    for (const V& v : {V{"--window", 2, 0, 0.f}, V{"--window", -1, 5, 0.f}, V{"--softcap", -1, -1, 30.f}}) {
      INFO(k << " " << v.flag);
      const int s = fa06_backward_variant(k, a, a, a, a, a, a, a, a, a, 1, 1, 1, 4, 4, 16, FA06_BF16, 0, 0.f, v.left,
                                          v.right, v.cap, nullptr);
      const std::string msg = fa06_last_error();
      CHECK(msg.find('\n') == std::string::npos);
      if (s == FA06_UNSUPPORTED) {
        CHECK(msg.find(v.flag) != std::string::npos);
      } else {  // the plan took it: the same answer as without the variant
        CHECK(s == plain);
        CHECK(msg == plain_msg);
      }
    }
  // -1, -1, 0 is no variant: fa06_backward's answer. The kernel and d are checked first.
  CHECK(fa06_backward_variant("auto", a, a, a, a, a, a, a, a, a, 1, 1, 1, 4, 4, 16, FA06_BF16, 0, 0.f, -1, -1, 0.f,
                              nullptr) == plain);
  CHECK(fa06_backward_variant("gpu_v9", a, a, a, a, a, a, a, a, a, 1, 1, 1, 4, 4, 16, FA06_BF16, 0, 0.f, 3, 0, 0.f,
                              nullptr) == FA06_INVALID_ARGUMENT);
  CHECK(std::string(fa06_last_error()).find("--bwd-kernel") != std::string::npos);
  CHECK(fa06_backward_variant("gpu_v1", a, a, a, a, a, a, a, a, a, 1, 1, 1, 4, 4, 300, FA06_BF16, 0, 0.f, 3, 0, 0.f,
                              nullptr) == FA06_INVALID_ARGUMENT);
  CHECK(std::string(fa06_last_error()).find("--head-dim") != std::string::npos);
  CHECK(fa06_backward_variant(nullptr, a, a, a, a, a, a, a, a, a, 1, 1, 1, 4, 4, 16, FA06_BF16, 0, 0.f, 3, 0, 0.f,
                              nullptr) == FA06_INVALID_ARGUMENT);
}

namespace {

// fa06_backward_cpu_varlen on the whole packed batch of `in` (dO: in.dO), from the forward `fwd`
// (O [total_q, H, d], LSE [H, total_q]), into gradients poisoned with NaN.
fa::BackwardRun backward_varlen_via_capi(const fa::Inputs& in, const fa::ForwardRun& fwd, int64_t Br, int64_t Bc) {
  const fa::AttnProblem& p = in.p;
  const fa::VarlenHost& v = in.varlen;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  fa::BackwardRun r;
  r.dQ = fa::Tensor(in.Q.shape, nan), r.dK = fa::Tensor(in.K.shape, nan), r.dV = fa::Tensor(in.V.shape, nan);
  const int s = fa06_backward_cpu_varlen(in.Q.ptr(), in.K.ptr(), in.V.ptr(), fwd.O.ptr(), in.dO.ptr(), fwd.LSE.ptr(),
                                         r.dQ.ptr(), r.dK.ptr(), r.dV.ptr(), v.cu_q.data(), v.cu_k.data(), v.batch(),
                                         v.total_q(), v.total_k(), p.H, p.H_kv, p.d, p.causal, p.scale, Br, Bc, 2,
                                         p.window_left, p.window_right, p.softcap);
  REQUIRE_MESSAGE(s == FA06_OK, fa06_last_error());
  return r;
}


}  // namespace

TEST_CASE("06 C ABI: fa06_backward_cpu_varlen gives varlen_backward(bwd::backward)'s bits on the varlen battery") {
  // The C++ path (fa::run_backward on a packed batch: bwd::backward per sequence on offset
  // pointers) is the one test_backward.cpp holds to stage 01 and float64 on this battery; the C
  // ABI must give its bits, every element written (dQ = 0 where a sequence has no key, dK = dV = 0
  // where it has no query).
  for (const fa::Case& c : fa::varlen_backward_battery()) {
    INFO(c.name);
    const fa::Inputs in = fa::case_inputs(c);
    const fa::ForwardRun fwd = fa::run_forward(forward04, in);  // per sequence: the O and LSE the op pairs
    for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{0, 0}, {7, 13}}) {
      INFO("Br=" << Br << " Bc=" << Bc);
      const fa::BackwardRun direct = fa::run_backward(
          [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, const float* O,
              const float* dO, const float* L, float* dQ, float* dK, float* dV) {
            bwd::Blocks b;
            b.Br = Br, b.Bc = Bc, b.threads = 2;
            bwd::backward<float>(q, Q, K, V, O, dO, L, dQ, dK, dV, b);
          }, in, fwd);
      const fa::BackwardRun via = backward_varlen_via_capi(in, fwd, Br, Bc);
      CHECK(fa::same_bits(direct.dQ, via.dQ));
      CHECK(fa::same_bits(direct.dK, via.dK));
      CHECK(fa::same_bits(direct.dV, via.dV));
      CHECK_FALSE(fa::has_nan(via.dQ));
      CHECK_FALSE(fa::has_nan(via.dK));
      CHECK_FALSE(fa::has_nan(via.dV));
    }
  }
}

TEST_CASE("06 C ABI: fa06_backward_cpu_varlen of one sequence is fa06_backward_cpu_variant's [1, H, N, d] problem") {
  for (bool causal : {false, true}) {
    fa::AttnProblem p = fa::make_problem(1, 4, 2, 131, 77, 40, causal);
    p.scale = 0.6f, p.window_left = 30, p.window_right = causal ? 0 : 4, p.softcap = 5.f;
    INFO(p.describe());
    fa::Inputs plain = fa::random_inputs(p, 31);
    fa::add_grad_output(plain, "", 32);
    const fa::ForwardRun fa_ = fa::run_forward(forward04, plain);
    const fa::BackwardRun a = fa::run_backward(
        [&](const fa::AttnProblem& q, const float* Q, const float* K, const float* V, const float* O, const float* dO,
            const float* L, float* dQ, float* dK, float* dV) {
          REQUIRE(fa06_backward_cpu_variant(Q, K, V, O, dO, L, dQ, dK, dV, 1, q.H, q.H_kv, q.N_q, q.N_k, q.d,
                                            q.causal, q.scale, 0, 0, 2, q.window_left, q.window_right,
                                            q.softcap) == FA06_OK);
        }, plain, fa_);
    // The same sequence token-major: [N, H, d] and LSE [H, N] (= [1, H, N]).
    fa::Inputs packed;
    packed.varlen = fa::VarlenHost{{0, int32_t(p.N_q)}, {0, int32_t(p.N_k)}};
    packed.p = fa::varlen_problem(p, packed.varlen);
    const auto pack = [](const fa::Tensor& X, int64_t heads, int64_t d, int64_t n) {
      fa::Tensor Y({n, heads, d});
      fa::scatter_rows(X, heads, d, 0, n, Y);
      return Y;
    };
    packed.Q = pack(plain.Q, p.H, p.d, p.N_q), packed.dO = pack(plain.dO, p.H, p.d, p.N_q);
    packed.K = pack(plain.K, p.H_kv, p.d, p.N_k), packed.V = pack(plain.V, p.H_kv, p.d, p.N_k);
    fa::ForwardRun fb;
    fb.O = pack(fa_.O, p.H, p.d, p.N_q), fb.LSE = fa_.LSE;
    const fa::BackwardRun b = backward_varlen_via_capi(packed, fb, 0, 0);
    CHECK(fa::same_bits(fa::gather_rows(b.dQ, p.H, p.d, 0, p.N_q), a.dQ));
    CHECK(fa::same_bits(fa::gather_rows(b.dK, p.H_kv, p.d, 0, p.N_k), a.dK));
    CHECK(fa::same_bits(fa::gather_rows(b.dV, p.H_kv, p.d, 0, p.N_k), a.dV));
  }
}

TEST_CASE("06 C ABI: fa06_backward_cpu_varlen refuses bad offsets with a status and one line; outputs untouched") {
  const int64_t H = 2, H_kv = 1, d = 8;
  std::vector<float> X(5 * H * d, 1.f), L(size_t(H) * 5, 0.f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Bad {
    const char* what;
    const char* also;
    std::vector<int32_t> cu_q, cu_k;
    int64_t B, total_q, total_k;
    bool null_cu;
  };
  const std::vector<int32_t> good_q = {0, 3, 5}, good_k = {0, 4, 5};
  const Bad bad[] = {
      {"--cu-seqlens-q", "cu[0] = 2", {2, 3, 5}, good_k, 2, 5, 5, false},
      {"--cu-seqlens-q", "cu[2] = 5 < cu[1] = 6", {0, 6, 5}, good_k, 2, 5, 5, false},
      {"--cu-seqlens-k", "total_k = 6", good_q, good_k, 2, 5, 6, false},
      {"--cu-seqlens-q", "B = 0", good_q, good_k, 0, 5, 5, false},
      {"cu_seqlens_k", "NULL", good_q, good_k, 2, 5, 5, true},
  };
  for (const Bad& b : bad) {
    INFO(std::string(b.what) << " " << b.also);
    std::vector<float> dQ(X.size(), nan), dK(5 * H_kv * d, nan), dV(5 * H_kv * d, nan);
    const int s = fa06_backward_cpu_varlen(X.data(), X.data(), X.data(), X.data(), X.data(), L.data(), dQ.data(),
                                           dK.data(), dV.data(), b.cu_q.data(), b.null_cu ? nullptr : b.cu_k.data(),
                                           b.B, b.total_q, b.total_k, H, H_kv, d, 0, 0.f, 0, 0, 0, -1, -1, 0.f);
    CHECK(s == FA06_INVALID_ARGUMENT);
    const std::string msg = fa06_last_error();
    CHECK(msg.find(b.what) != std::string::npos);
    CHECK(msg.find(b.also) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    for (const auto* t : {&dQ, &dK, &dV})
      for (float x : *t) CHECK(std::isnan(x));
  }
  std::vector<float> dQ(X.size(), nan), dK(5 * H_kv * d, nan), dV(5 * H_kv * d, nan);
  CHECK(fa06_backward_cpu_varlen(X.data(), X.data(), X.data(), X.data(), X.data(), L.data(), dQ.data(), dK.data(),
                                 dV.data(), good_q.data(), good_k.data(), 2, 5, 5, H, H_kv, d, 0, 0.f, 0, 0, 0, -1, -1,
                                 -2.f) == FA06_INVALID_ARGUMENT);
  CHECK(std::string(fa06_last_error()).find("--softcap") != std::string::npos);
  CHECK(fa06_backward_cpu_varlen(X.data(), X.data(), X.data(), X.data(), X.data(), L.data(), dQ.data(), dK.data(),
                                 dV.data(), good_q.data(), good_k.data(), 2, 5, 5, H, H_kv, d, 0, 0.f, 0, 0, 300, -1, -1,
                                 0.f) == FA06_INVALID_ARGUMENT);
  CHECK(std::string(fa06_last_error()).find("--threads") != std::string::npos);
  for (float x : dQ) CHECK(std::isnan(x));
}

TEST_CASE("06 C ABI: libfa06.so exports fa06_* and nothing else") {
  // The library this test runs, as the dynamic linker loaded it.
  const std::string path = fa::test::loaded_library("libfa06.so");
  REQUIRE(!path.empty());
  int fa06 = 0;
  for (const std::string& sym : fa::test::defined_symbols(path)) {
    INFO("exported: " << sym);
    if (sym.rfind("fa06_", 0) == 0) ++fa06;
    else CHECK(false);
  }
  CHECK(fa06 == 14);  // the fourteen functions of fa06.h, with or without the GPU half
}

TEST_CASE("06 C ABI: the GPU half refuses before it touches a GPU") {
  std::vector<float> X(64, 1.f);
  int64_t bytes = -1;
  if (!fa06_has_gpu()) {
    CHECK(fa06_backward("auto", X.data(), X.data(), X.data(), X.data(), X.data(), X.data(), X.data(), X.data(),
                        X.data(), 1, 1, 1, 4, 4, 16, 0, 0, 0.f, nullptr) == FA06_UNSUPPORTED);
    CHECK(std::string(fa06_last_error()).find("CUDA") != std::string::npos);
    CHECK(fa06_kernel_count() == 0);
    CHECK(fa06_runs_width("auto", 64, 2) == -1);
    CHECK(fa06_runs_note("auto", 64, 2) == nullptr);
    return;
  }
  REQUIRE(fa06_kernel_count() >= 1);
  CHECK(std::string(fa06_kernel_name(0)) == "gpu_v1");
  CHECK(fa06_kernel_name(fa06_kernel_count()) == nullptr);
  // Unknown kernel, bad dtype, bad scale, d above 256, NULL: refused on the arguments alone.
  struct Bad {
    const char* kernel;
    int dtype;
    float scale;
    int64_t d;
    const char* what;
  } bad[] = {{"gpu_v9", 2, 0.f, 64, "--bwd-kernel"}, {"auto", 7, 0.f, 64, "dtype"},
             {"auto", 2, -2.f, 64, "--scale"},      {"gpu_v1", 2, 0.f, 300, "--head-dim"},
             {nullptr, 2, 0.f, 64, "--bwd-kernel"}};
  for (const Bad& b : bad) {
    INFO(b.what);
    CHECK(fa06_backward(b.kernel, X.data(), X.data(), X.data(), X.data(), X.data(), X.data(), X.data(), X.data(),
                        X.data(), 1, 1, 1, 4, 4, b.d, b.dtype, 0, b.scale, nullptr) == FA06_INVALID_ARGUMENT);
    CHECK(std::string(fa06_last_error()).find(b.what) != std::string::npos);
  }
  // fa06_backward_varlen: NULL offsets, a kernel other than gpu_v3 / auto, fp32, a _det variant
  // and a bad window are refused on the arguments alone, each naming what is wrong.
  const int32_t cu[3] = {0, 2, 4};
  const auto varlen = [&](const char* k, const int32_t* cq, int dtype, int64_t left) {
    return fa06_backward_varlen(k, X.data(), X.data(), X.data(), X.data(), X.data(), X.data(), X.data(), X.data(),
                                X.data(), cq, cu, 2, 4, 4, 2, 2, 1, 1, 16, dtype, 1, 0.f, left, -1, 0.f, nullptr);
  };
  CHECK(varlen("gpu_v3", nullptr, 2, -1) == FA06_INVALID_ARGUMENT);
  CHECK(std::string(fa06_last_error()).find("cu_seqlens_q") != std::string::npos);
  for (const char* k : {"gpu_v2", "gpu_v4", "gpu_v3_det", "gpu_v1"}) {
    INFO(k);
    CHECK(varlen(k, cu, 2, -1) == FA06_INVALID_ARGUMENT);
    CHECK(std::string(fa06_last_error()).find("--cu-seqlens-q") != std::string::npos);
  }
  CHECK(varlen("gpu_v3", cu, 0, -1) == FA06_INVALID_ARGUMENT);  // fp32 runs gpu_v1
  CHECK(std::string(fa06_last_error()).find("--cu-seqlens-q") != std::string::npos);
  CHECK(varlen("auto", cu, 2, -4) == FA06_INVALID_ARGUMENT);
  CHECK(std::string(fa06_last_error()).find("--window") != std::string::npos);
  CHECK(varlen("auto", cu, 2, -1) != FA06_OK);  // host offsets (or no GPU): refused before a kernel
  CHECK(std::string(fa06_last_error()).find('\n') == std::string::npos);
  // Host memory (or, without a GPU, no GPU) is refused before any kernel could fault on it.
  std::vector<float> big(4 * 1 * 16 + 64, 1.f);
  float* a = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(big.data()) + 15) / 16 * 16);
  const int s = fa06_backward("gpu_v1", a, a, a, a, a, a, a, a, a, 1, 1, 1, 4, 4, 16, 0, 0, 0.f, nullptr);
  CHECK((s == FA06_INVALID_ARGUMENT || s == FA06_CUDA_ERROR));
  CHECK(std::string(fa06_last_error()).find('\n') == std::string::npos);
  // The workspace and the kernel that runs need no GPU.
  REQUIRE(fa06_workspace_bytes("gpu_v1", 1, 2, 1, 100, 100, 64, 2, 0, &bytes) == FA06_OK);
  CHECK(bytes == 4 * 2 * 100);  // D: one float per query row
  REQUIRE(fa06_workspace_bytes("gpu_v2", 1, 2, 1, 100, 100, 64, 2, 0, &bytes) == FA06_OK);
  CHECK(bytes >= 4 * 2 * 100 + 4 * 2 * 100 * 64);  // D and dQ's float32 accumulator
  CHECK(fa06_workspace_bytes("gpu_v2", 1, 2, 1, 100, 100, 64, 2, 0, nullptr) == FA06_INVALID_ARGUMENT);
  // d = 40 runs gpu_v2 at the native width 64, zero-padded; fp32 runs gpu_v1 at d itself.
  CHECK(std::string(fa06_runs("gpu_v2", 40, 2)) == "gpu_v2");
  CHECK(fa06_runs_width("gpu_v2", 40, 2) == 64);
  CHECK(std::string(fa06_runs_note("gpu_v2", 40, 2)).find("native width 64") != std::string::npos);
  CHECK(fa06_runs_width("auto", 80, 1) == 96);
  CHECK(fa06_runs_width("auto", 40, 0) == 40);
  CHECK(std::string(fa06_runs("auto", 40, 0)) == "gpu_v1");
  CHECK(std::string(fa06_runs_note("auto", 40, 0)).find("auto") != std::string::npos);
  CHECK(std::string(fa06_runs("gpu_v2", 200, 2)) == "gpu_v3");  // gpu_v2 runs d <= 128
  CHECK(fa06_runs_width("gpu_v2", 200, 2) == 256);
  CHECK(fa06_runs_width("gpu_v1", 300, 2) == -1);
  CHECK(std::string(fa06_last_error()).find("--head-dim") != std::string::npos);
  CHECK(fa06_runs_note(nullptr, 64, 2) == nullptr);
  CHECK(std::string(fa06_runs("gpu_v1", 64, 0)) == "gpu_v1");
  CHECK(fa06_runs("auto", 64, 0) != nullptr);
  CHECK(fa06_runs("nope", 64, 2) == nullptr);
  CHECK(std::string(fa06_last_error()).find("--bwd-kernel") != std::string::npos);
}
