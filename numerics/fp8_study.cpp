// numerics_fp8: what storing attention's operands in FP8 (e4m3) costs, before any kernel: the FP8
// storage model (fp8_model.hpp) against the float64 reference, FlashAttention-3's Table 3 choices
// (per-tensor and per-block scales, with and without incoherent processing) beside fp16 and bf16
// storage. docs/numerics.md, section "FP8".
//
//   build/numerics/numerics_fp8                 B = 1, H = 8, N = 2048, d = 128 and 64 (~1 min, 2 threads)
//   build/numerics/numerics_fp8 --quick         N = 256 (seconds)
//   options: --json F (default docs/results/fp8_numerics.json, none with --quick; "-" for none)
//
// Inputs: "randn" (every element N(0, 1)); "outliers" (N(0, 1) + N(0, 100) Bernoulli(0.001),
// FlashAttention-3's distribution for Table 3: one element in a thousand with standard deviation
// 10); "minilm_l0" (the course's real all-MiniLM-L6-v2 layer-0 Q, K, V, d = 32, N = 256). Not
// causal, scale 1/sqrt(d). RMSE over all elements of O.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "errors.hpp"
#include "fp8.hpp"
#include "fp8_model.hpp"
#include "harness.hpp"
#include "reference.hpp"
#include "rng.hpp"

namespace {

struct In {
  std::string name;
  fa::AttnProblem p;
  fa::TensorD Q, K, V;
};

fa::TensorD randn(std::vector<int64_t> shape, fa::Rng& rng, bool outliers) {
  fa::TensorD x(std::move(shape));
  for (double& e : x.data) {
    e = rng.normal();
    if (outliers && rng.uniform() < 0.001) e += 10.0 * rng.normal();
  }
  return x;
}

fa::TensorD widen(const fa::Tensor& x) {
  fa::TensorD y(x.shape);
  for (size_t e = 0; e < y.data.size(); ++e) y.data[e] = double(x.data[e]);
  return y;
}

std::vector<numx::Storage8> storages() {
  using K = numx::Storage8::Kind;
  std::vector<numx::Storage8> s;
  for (K k : {K::fp16, K::bf16}) s.push_back({k, false});
  for (K k : {K::e4m3_tensor, K::e4m3_block})
    for (bool inc : {false, true}) s.push_back({k, inc});
  numx::Storage8 unscaled{K::e4m3_block, true};
  unscaled.p_scale = 1;  // the ablation: P stored without a scale, small weights flushed
  s.push_back(unscaled);
  return s;
}

// Why incoherent processing helps (docs/numerics.md, "FP8"): Q alone rounded to e4m3 (one scale
// per 64 rows, per head), K, V, P exact. Returns {RMS of the error in S = scale Q K^T, RMSE of O}.
// An orthogonal transform leaves the error's energy in S (to first order, the sum of q_c^2 k_c^2
// u^2 terms) as it is; what it changes is the error's structure, and so its effect on O.
std::pair<double, double> q_only(const In& in, bool incoherent) {
  fa::TensorD q = in.Q, k = in.K;
  const int64_t d = in.p.d, rows_q = in.p.B * in.p.H * in.p.N_q, rows_k = in.p.B * in.p.H_kv * in.p.N_k;
  if (incoherent) {
    const std::vector<double> signs = fa::fp8::random_signs(d, 1);
    for (int64_t r = 0; r < rows_q; ++r) fa::fp8::incoherent_inplace(q.data.data() + r * d, signs);
    for (int64_t r = 0; r < rows_k; ++r) fa::fp8::incoherent_inplace(k.data.data() + r * d, signs);
  }
  fa::TensorD qs = q;
  numx::Storage8 block;  // e4m3, a scale per 64 rows of a head
  numx::store8(qs, in.p.B * in.p.H, in.p.N_q, d, block, block.Br);
  double se = 0;
  const double scale = in.p.resolved_scale();
  for (int64_t b = 0; b < in.p.B; ++b)
    for (int64_t h = 0; h < in.p.H; ++h)
      for (int64_t i = 0; i < in.p.N_q; ++i)
        for (int64_t j = 0; j < in.p.N_k; ++j) {
          double ds = 0;
          for (int64_t c = 0; c < d; ++c)
            ds += (qs.data[size_t(in.p.q_offset(b, h, i) + c)] - q.data[size_t(in.p.q_offset(b, h, i) + c)]) *
                  k.data[size_t(in.p.kv_offset(b, h, j) + c)];
          se += scale * ds * scale * ds;
        }
  fa::TensorD O, O_ref, LSE;
  fa::reference_forward(in.p, qs, k, in.V, O, LSE);
  fa::reference_forward(in.p, q, k, in.V, O_ref, LSE);
  return {std::sqrt(se / double(in.p.B * in.p.H * in.p.N_q * in.p.N_k)), numx::rmse(O, O_ref)};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    bool quick = false;
    std::string json_path;  // default: docs/results/fp8_numerics.json for the full run, none for --quick
    for (int a = 1; a < argc; ++a) {
      if (!std::strcmp(argv[a], "--quick")) {
        quick = true;
      } else if (!std::strcmp(argv[a], "--json")) {
        if (a + 1 >= argc) throw fa::InputError("--json", "a file name (or - for none)", "nothing after it");
        json_path = argv[++a];
      } else {
        throw fa::InputError(argv[a], "--quick or --json F", "an unknown argument");
      }
    }
    if (json_path.empty()) json_path = quick ? "-" : "docs/results/fp8_numerics.json";
    const int64_t N = quick ? 256 : 2048;
    std::vector<In> ins;
    for (int64_t d : {128, 64})
      for (bool outl : {false, true}) {
        fa::Rng rng(uint64_t(d) * 10 + outl);
        In in{std::string(outl ? "outliers" : "randn") + " d=" + std::to_string(d), fa::make_problem(1, 8, 8, N, N, d, false), {}, {}, {}};
        in.Q = randn({1, 8, N, d}, rng, outl), in.K = randn({1, 8, N, d}, rng, outl), in.V = randn({1, 8, N, d}, rng, outl);
        ins.push_back(std::move(in));
      }
    {
      const fa::Inputs real = fa::default_inputs(false, 0.f);
      ins.push_back({"minilm_l0 d=" + std::to_string(real.p.d), real.p, widen(real.Q), widen(real.K), widen(real.V)});
    }
    nlohmann::json rows = nlohmann::json::array();
    std::printf("numerics_fp8: RMSE of O against the float64 reference (storage model, exact arithmetic), %d threads\n",
                omp_get_max_threads());
    std::printf("%-22s", "storage");
    for (const In& in : ins) std::printf(" %16s", in.name.c_str());
    std::printf("\n");
    std::vector<fa::TensorD> refs;
    for (const In& in : ins) {
      fa::TensorD O, LSE;
      fa::reference_forward(in.p, in.Q, in.K, in.V, O, LSE);
      refs.push_back(std::move(O));
    }
    for (const numx::Storage8& s : storages()) {
      std::printf("%-22s", s.name().c_str());
      for (size_t i = 0; i < ins.size(); ++i) {
        const In& in = ins[i];
        const bool pow2 = (in.p.d & (in.p.d - 1)) == 0;
        if (s.incoherent && !pow2) {
          std::printf(" %16s", "-");
          continue;
        }
        const double e = numx::rmse(numx::storage8_forward(in.p, in.Q, in.K, in.V, s), refs[i]);
        std::printf(" %16.3e", e);
        std::fflush(stdout);
        rows.push_back({{"storage", s.name()}, {"input", in.name}, {"N", in.p.N_k}, {"d", in.p.d}, {"heads", in.p.H},
                        {"rmse", e}, {"rms_O_ref", numx::rmse(refs[i], fa::TensorD(refs[i].shape))}});
      }
      std::printf("\n");
    }
    // The mechanism, on the outlier input at d = 64 (ins[3]): Q alone quantised.
    nlohmann::json mech = nlohmann::json::array();
    for (bool inc : {false, true}) {
      const auto [s_rms, o_rmse] = q_only(ins[3], inc);
      std::printf("%s, Q alone in e4m3 (block scales)%s: RMS error of S %.3e, RMSE of O %.3e\n", ins[3].name.c_str(),
                  inc ? " + incoherent" : "", s_rms, o_rmse);
      mech.push_back({{"input", ins[3].name}, {"incoherent", inc}, {"S_error_rms", s_rms}, {"O_rmse", o_rmse}});
    }
    if (json_path != "-") {
      char date[16];
      const std::time_t t = std::time(nullptr);
      std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&t));
      std::ofstream out(json_path);
      out << nlohmann::json{{"tool", "numerics_fp8"}, {"date", date}, {"quick", quick},
                                                 {"note", "storage model: Q, K, V, P stored as named, arithmetic float64; "
                                                          "scales amax/448 per tensor or per block (Q 64 rows, K/V 128 rows, "
                                                          "per head); P scaled by 256 unless named"},
                                                 {"rows", rows}, {"q_only", mech}}
                                    .dump(1)
                               << "\n";
      out.close();
      if (!out) throw fa::InputError("--json " + json_path, "a writable file", "one that could not be written");
      std::printf("wrote %s\n", json_path.c_str());
    }
    return 0;
  } catch (const fa::InputError& e) {
    std::fprintf(stderr, "numerics_fp8: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "numerics_fp8: error: %s\n", e.what());
    return 1;
  }
}
