// Stage 01's tests: the conformance battery (against float64 only: stage 01 is the baseline of
// every other stage), its backward against central finite differences in float64, the overflow
// it is known for, its O(N^2) memory, and the program's CLI contract.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <tuple>

#include <nlohmann/json.hpp>

#include "conformance.hpp"
#include "naive_backward.hpp"
#include "npy.hpp"
#include "reference.hpp"
#include "rng.hpp"
#include "varlen.hpp"

TEST_CASE("01_naive forward: conformance battery vs float64 (and its overflow where logits > 88.7)") {
  fa::check_forward_battery(naive::forward<float>, /*is_stage01=*/true);
}

TEST_CASE("01_naive backward: conformance battery vs the float64 reference backward") {
  fa::check_backward_battery(naive::backward<float>, /*is_stage01=*/true);
}

// Loss L = sum(O * dO); its gradient w.r.t. X is what backward() returns for X in {Q, K, V}.
TEST_CASE("01_naive forward: variant battery (windows, softcaps) vs float64") {
  fa::check_variant_forward_battery(naive::forward<float>, /*is_stage01=*/true);
}

TEST_CASE("01_naive backward: variant battery vs the float64 reference backward") {
  fa::check_variant_backward_battery(naive::backward<float>, /*is_stage01=*/true);
}

TEST_CASE("01_naive forward and backward: packed variable-length batches (varlen battery) vs float64") {
  fa::check_varlen_forward_battery(naive::forward<float>, /*is_stage01=*/true);
  fa::check_varlen_backward_battery(naive::backward<float>, /*is_stage01=*/true);
}

TEST_CASE("01_naive backward in float64 equals central finite differences") {
  for (bool causal : {false, true}) {
    fa::AttnProblem p;
    p.B = 2, p.H = 4, p.H_kv = 2, p.N_q = 5, p.N_k = 7, p.d = 3, p.causal = causal;
    if (causal) p.N_q = 9;  // N_q > N_k: two rows see no key
    INFO("causal " << causal);
    fa::Rng rng(7);
    fa::TensorD Q({p.B, p.H, p.N_q, p.d}), K({p.B, p.H_kv, p.N_k, p.d}), V(K.shape), dO(Q.shape);
    for (auto* t : {&Q, &K, &V, &dO}) rng.fill_normal(*t);
    fa::TensorD O(Q.shape), LSE({p.B, p.H, p.N_q}), dQ(Q.shape), dK(K.shape), dV(K.shape);
    naive::forward<double>(p, Q.ptr(), K.ptr(), V.ptr(), O.ptr(), LSE.ptr());
    naive::backward<double>(p, Q.ptr(), K.ptr(), V.ptr(), O.ptr(), dO.ptr(), LSE.ptr(), dQ.ptr(),
                            dK.ptr(), dV.ptr());
    auto loss = [&]() {
      fa::TensorD O2(Q.shape), L2({p.B, p.H, p.N_q});
      naive::forward<double>(p, Q.ptr(), K.ptr(), V.ptr(), O2.ptr(), L2.ptr());
      double s = 0;
      for (int64_t e = 0; e < O2.numel(); ++e) s += O2[e] * dO[e];
      return s;
    };
    const double h = 1e-6;
    for (auto [X, dX, name] : {std::tuple{&Q, &dQ, "dQ"}, {&K, &dK, "dK"}, {&V, &dV, "dV"}}) {
      double worst = 0;
      for (int64_t e = 0; e < X->numel(); ++e) {
        const double x0 = (*X)[e];
        (*X)[e] = x0 + h;
        const double up = loss();
        (*X)[e] = x0 - h;
        const double down = loss();
        (*X)[e] = x0;
        worst = std::max(worst, std::fabs((up - down) / (2 * h) - (*dX)[e]));
      }
      INFO(name << " max |analytic - finite difference| = " << worst);
      CHECK(worst < 1e-7);
    }
  }
}

TEST_CASE("01_naive overflows exactly where the lesson says: a logit of 89 gives NaN") {
  // d = 1, scale = 1, one query q = 1, keys k = {89, 0}: S = {89, 0}. exp(89) > FLT_MAX (ln
  // FLT_MAX = 88.72), so l = inf and P_0 = inf / inf = NaN. The true answer is O ~= V_0.
  fa::AttnProblem p;
  p.N_q = 1, p.N_k = 2, p.d = 1, p.scale = 1.f;
  const float Q[1] = {1.f}, K[2] = {89.f, 0.f}, V[2] = {2.f, -3.f};
  float O[1], LSE[1];
  naive::forward<float>(p, Q, K, V, O, LSE);
  CHECK(std::isnan(O[0]));
  CHECK(std::isinf(LSE[0]));
  // One step below the threshold the same code is right: S = {88, 0}.
  const float K88[2] = {88.f, 0.f};
  naive::forward<float>(p, Q, K88, V, O, LSE);
  CHECK(O[0] == doctest::Approx(2.0).epsilon(1e-6));
  CHECK(LSE[0] == doctest::Approx(88.0).epsilon(1e-6));
  // The float64 reference (safe softmax) has no such limit.
  fa::Tensor q({1, 1, 1, 1}, 1.f), k({1, 1, 2, 1}), v({1, 1, 2, 1});
  k[0] = 89.f, v[0] = 2.f, v[1] = -3.f;
  fa::TensorD o, lse;
  fa::reference_forward(p, q, k, v, o, lse);
  CHECK(o[0] == doctest::Approx(2.0 - 5.0 * std::exp(-89.0)));
}

TEST_CASE("01_naive materialises S and P: measured extra memory >= 2 * B*H*N_q*N_k floats") {
  fa::AttnProblem p;
  p.B = 2, p.H = 3, p.H_kv = 3, p.N_q = 300, p.N_k = 200, p.d = 16;
  const fa::Inputs in = fa::random_inputs(p, 1);
  const fa::ForwardRun r = fa::run_forward(naive::forward<float>, in);
  const int64_t SP = 2 * p.B * p.H * p.N_q * p.N_k * int64_t(sizeof(float));
  CHECK(r.extra_bytes >= SP);
  CHECK(r.extra_bytes < SP + SP / 10);
}

// ---- The program's CLI contract (README.md, "Every program takes the same flags"): run the real binary. ----
namespace {
namespace fs = std::filesystem;

struct Ran {
  int code;
  std::string err;
};
Ran run(const std::string& args, const fs::path& dir) {
  const fs::path err = dir / "stderr.txt";
  const std::string cmd = std::string(STAGE_BIN) + " " + args + " >" + (dir / "stdout.txt").string() +
                          " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  std::ifstream f(err);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, all};
}
int lines(const std::string& s) { return int(std::count(s.begin(), s.end(), '\n')); }

// A hand-made .npy whose header claims `descr` (to make float64 / Fortran-order files).
void write_raw_npy(const fs::path& path, const std::string& descr, bool fortran, int n) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': (1, " + std::to_string(n) + "), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)header.size(), 0};
  f.write((const char*)pre, 10);
  f << header;
  std::string zeros(size_t(n) * 8, '\0');
  f.write(zeros.data(), std::streamsize(zeros.size()));
}
}  // namespace

TEST_CASE("01_naive program: --q/--k/--v files in, O and LSE out, matching float64 to 1e-6") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_01_cli_ok";
  fs::create_directories(dir);
  const std::string data = FA_DATA_DIR;
  const std::string args = "--q " + data + "/minilm_l0_q.npy --k " + data + "/minilm_l0_k.npy --v " +
                           data + "/minilm_l0_v.npy --out " + (dir / "o.npy").string() + " --lse " +
                           (dir / "l.npy").string() + " --no-check";
  const Ran r = run(args, dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const fa::Tensor O = fa::read_npy((dir / "o.npy").string(), "o");
  const fa::Tensor L = fa::read_npy((dir / "l.npy").string(), "l");
  const fa::Inputs in = fa::load_inputs(data + "/minilm_l0_q.npy", data + "/minilm_l0_k.npy",
                                        data + "/minilm_l0_v.npy", false, 0.f);
  fa::TensorD O64, L64;
  fa::reference_forward(in.p, in.Q, in.K, in.V, O64, L64);
  REQUIRE(O.shape == O64.shape);
  REQUIRE(L.shape == L64.shape);
  const fa::ErrorStats eo = fa::compare(O.ptr(), O64.ptr(), O.numel());
  const fa::ErrorStats el = fa::compare(L.ptr(), L64.ptr(), L.numel());
  CHECK(eo.max_abs <= 1e-6 * std::max(1.0, fa::max_abs_finite(O64.ptr(), O64.numel())));
  CHECK(el.max_abs <= 1e-6 * std::max(1.0, fa::max_abs_finite(L64.ptr(), L64.numel())));
  fs::remove_all(dir);
}

// --window and --softcap reach the problem whatever the input (files here), and the --json
// report names them.
TEST_CASE("01_naive program: --window and --softcap with file inputs match float64 with both") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_01_cli_variants";
  fs::create_directories(dir);
  const std::string data = FA_DATA_DIR;
  const Ran r = run("--q " + data + "/minilm_l0_q.npy --k " + data + "/minilm_l0_k.npy --v " + data +
                        "/minilm_l0_v.npy --causal --window 16,4 --softcap 20 --json --out " +
                        (dir / "o.npy").string() + " --lse " + (dir / "l.npy").string(),
                    dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::ifstream js(dir / "stdout.txt");
  const nlohmann::json j = nlohmann::json::parse(js);
  CHECK(j["problem"]["softcap"] == 20.0);
  CHECK(j["problem"]["window"] == nlohmann::json::array({16, 4}));
  fa::Inputs in = fa::load_inputs(data + "/minilm_l0_q.npy", data + "/minilm_l0_k.npy",
                                  data + "/minilm_l0_v.npy", true, 0.f);
  in.p.window_left = 16, in.p.window_right = 4, in.p.softcap = 20.f;
  fa::TensorD O64, L64;
  fa::reference_forward(in.p, in.Q, in.K, in.V, O64, L64);
  const fa::Tensor O = fa::read_npy((dir / "o.npy").string(), "o");
  const fa::Tensor L = fa::read_npy((dir / "l.npy").string(), "l");
  CHECK(fa::compare(O.ptr(), O64.ptr(), O.numel()).max_abs <= 1e-6 * std::max(1.0, fa::max_abs_finite(O64.ptr(), O64.numel())));
  CHECK(fa::compare(L.ptr(), L64.ptr(), L.numel()).max_abs <= 1e-6 * std::max(1.0, fa::max_abs_finite(L64.ptr(), L64.numel())));
  // Without the flags the same files give another answer: the flags were not ignored.
  in.p.window_left = in.p.window_right = -1, in.p.softcap = 0.f;
  fa::reference_forward(in.p, in.Q, in.K, in.V, O64, L64);
  CHECK(fa::compare(O.ptr(), O64.ptr(), O.numel()).max_abs > 1e-3);
  fs::remove_all(dir);
}

TEST_CASE("01_naive program: bad input -> one line on stderr, exit 2, no output file") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_01_cli_bad";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string data = FA_DATA_DIR;
  const std::string K = data + "/minilm_l0_k.npy", V = data + "/minilm_l0_v.npy";
  const fs::path out = dir / "o.npy";
  // A 3x5 Q against K with d = 32.
  fa::write_npy((dir / "q35.npy").string(), fa::Tensor({3, 5}, 1.f), "q");
  // A float64 .npy and a Fortran-order one.
  write_raw_npy(dir / "f64.npy", "<f8", false, 32);
  write_raw_npy(dir / "fortran.npy", "<f4", true, 32);
  // A NaN in Q.
  fa::Tensor qn = fa::read_npy(data + "/minilm_l0_q.npy", "q");
  qn[123] = std::numeric_limits<float>::quiet_NaN();
  fa::write_npy((dir / "qnan.npy").string(), qn, "q");
  // A truncated file.
  { std::ofstream f(dir / "short.npy", std::ios::binary); f << "\x93NUMPY"; }
  // A 64-byte file whose header claims 4e9 floats (must be refused before allocating 16 GB).
  {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 4000000000, 1), }";
    while ((10 + header.size() + 1) % 64) header += ' ';
    header += '\n';
    std::ofstream f(dir / "forged.npy", std::ios::binary);
    const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)header.size(), 0};
    f.write((const char*)pre, 10);
    f << header;
  }
  // Values whose float32 dot products overflow (1e30 * 1e30).
  fa::write_npy((dir / "huge.npy").string(), fa::Tensor({1, 1, 4, 32}, 1e30f), "q");
  fa::write_npy((dir / "v4.npy").string(), fa::Tensor({1, 1, 4, 32}, 1.f), "v");
  // dO so large that float32 gradients would overflow, a named pipe as an input.
  fa::write_npy((dir / "do_huge.npy").string(), fa::Tensor({1, 1, 4, 32}, 1e38f), "do");
  mkfifo((dir / "pipe.npy").c_str(), 0600);
  // A symbolic link as an output (a missing file name with a newline is below).
  fs::create_symlink(dir / "target.npy", dir / "link.npy");

  const std::pair<std::string, std::string> cases[] = {
      {"--q " + (dir / "q35.npy").string() + " --k " + K + " --v " + V, "--q"},
      {"--q " + (dir / "missing.npy").string() + " --k " + K + " --v " + V, "--q"},
      {"--heads 8 --kv-heads 3", "--kv-heads"},
      {"--q " + (dir / "f64.npy").string() + " --k " + K + " --v " + V, "float32"},
      {"--q " + (dir / "fortran.npy").string() + " --k " + K + " --v " + V, "C order"},
      {"--q " + (dir / "qnan.npy").string() + " --k " + K + " --v " + V, "NaN"},
      {"--q " + (dir / "short.npy").string() + " --k " + K + " --v " + V, "--q"},
      {"--seq-q 0", "--seq-q"},
      {"--head-dim abc", "--head-dim"},
      {"--scale -1 --seq-q 4", "--scale"},
      {"--dtype fp16 --seq-q 4", "--dtype"},
      {"--q " + K, "--k"},
      {"--seq-q 4 --q " + K + " --k " + K + " --v " + V, "--q"},
      {"--no-such-flag", "no-such-flag"},
      {"--seq-q 4 --out /nonexistent-dir/o.npy", "--out"},
      // An empty value is refused, not taken as "not given".
      {"--seq-q 4 --out ''", "--out"},
      {"--seq-q 4 --lse ''", "--lse"},
      {"--q '' --k " + K + " --v " + V, "--q"},
      {"--seq-q 4 --window ''", "--window"},
      {"--seq-q 4 --softcap ''", "--softcap"},
      {"--heads 4611686018427387904 --seq-q 4 --head-dim 4", "2^40"},
      {"--seq-q 2000000000 --head-dim 2000000000 --heads 1", "2^40"},
      {"--q " + (dir / "forged.npy").string() + " --k " + K + " --v " + V, "bytes"},
      {"--q " + (dir / "huge.npy").string() + " --k " + (dir / "huge.npy").string() + " --v " +
           (dir / "v4.npy").string(), "overflow"},
      {"--q " + dir.string() + " --k " + K + " --v " + V, "folder"},
      {"--q '" + (dir / "missing\nname.npy").string() + "' --k " + K + " --v " + V, "--q"},
      {"--q " + data + "/minilm_l0_q.npy --k " + K + " --v " + V + " --out " + data + "/minilm_l0_q.npy", "the same file"},
      {"--seq-q 4 --out " + out.string() + " --lse " + out.string(), "the same file"},
      {"--seq-q 4 --out " + out.string() + " --lse " + (dir / "link.npy").string(), "symbolic link"},
      {"--seq-q 4 --out " + out.string() + " --lse /proc/l.npy", "--lse"},
      {"--seq-q 4 --scale 0", "--scale"},
      // Quoted as typed, not as rounded to float32 ("found 0", "found inf").
      {"--seq-q 4 --scale 1e-50", "found 1e-50"},
      {"--seq-q 4 --scale 1e39", "found 1e39"},
      {"--seq-q 4 --seq-k 0", "--seq-k"},
      {"--seq-q 4 --kv-heads 0", "--kv-heads"},
      {"--seq-q 4 --out " + out.string() + " --lse " + (dir / "." / "o.npy").string(), "the same file"},
      {"--q " + (dir / "pipe.npy").string() + " --k " + K + " --v " + V, "pipe"},
      {"--q " + (dir / "v4.npy").string() + " --k " + (dir / "v4.npy").string() + " --v " +
           (dir / "v4.npy").string() + " --do " + (dir / "do_huge.npy").string(), "--do"},
      // The variants (issue 34): a window side below -1 or not L,R; a softcap <= 0, not finite,
      // not a number, or beyond float32 (quoted as typed); with files as with shape flags.
      {"--seq-q 4 --window=-2,0", "--window"},
      {"--seq-q 4 --window 5", "--window"},
      {"--seq-q 4 --window 1,2,3", "--window"},
      {"--seq-q 4 --window a,0", "--window"},
      {"--q " + data + "/minilm_l0_q.npy --k " + K + " --v " + V + " --window 3,-7", "--window"},
      {"--seq-q 4 --softcap 0", "--softcap"},
      {"--seq-q 4 --softcap -1", "--softcap"},
      {"--seq-q 4 --softcap nan", "--softcap"},
      {"--seq-q 4 --softcap inf", "--softcap"},
      {"--seq-q 4 --softcap 30x", "--softcap"},
      {"--seq-q 4 --softcap 1e39", "found '1e39'"},
      // The KV cache is stage 05's (kernel v14): every other program refuses its flags.
      {"--seq-q 4 --cache-lens 4", "--cache-lens: expected no KV cache flags (stage 05 takes them, kernel v14), found --cache-lens 4"},
      {"--seq-q 4 --page-size 16", "--page-size: expected no KV cache flags"},
      {"--seq-q 4 --page-size 16 --block-table t.npy", "--page-size: expected no KV cache flags"},
      {"--seq-q 4 --block-table t.npy", "--block-table"},
      {"--q " + data + "/minilm_l0_q.npy --k " + K + " --v " + V + " --softcap 0", "--softcap"},
      // Fits the 2^40 limit but not the machine: refused before allocating (no OOM kill).
      {"--seq-q 200000 --heads 1 --head-dim 8", "memory available"},
  };
  for (const auto& [args, mention] : cases) {
    INFO("args: " << args);
    const bool has_out = args.find("--out") != std::string::npos;
    const Ran r = run(has_out ? args : args + " --out " + out.string(), dir);
    INFO("stderr: " << r.err);
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(mention) != std::string::npos);
    CHECK(!fs::exists(out));
    CHECK(!fs::exists(out.string() + ".tmp"));
  }
  fs::remove_all(dir);
}

// ---- Packed variable-length batches (--cu-seqlens-q/-k, common/varlen.hpp) ----

namespace {
fa::Tensor normal_tensor(std::vector<int64_t> shape, uint64_t seed) {
  fa::Tensor t(std::move(shape));
  fa::Rng(seed).fill_normal(t);
  return t;
}
}  // namespace

TEST_CASE("01_naive program: a packed batch from files gives O [total_q,H,d] and LSE [H,total_q], the float64 reference per sequence") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_01_cli_varlen";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Four sequences: 3 x 5, 0 x 4 (keys only), 7 x 0 (queries only: O = 0, LSE = -inf), 130 x 191.
  const std::vector<int32_t> cu_q = {0, 3, 3, 10, 140}, cu_k = {0, 5, 9, 9, 200};
  fa::write_npy_i32(dir / "cuq.npy", {5}, cu_q, "test");
  fa::write_npy_i32(dir / "cuk.npy", {5}, cu_k, "test");
  fa::Inputs in;
  in.Q = normal_tensor({140, 4, 16}, 1), in.K = normal_tensor({200, 2, 16}, 2), in.V = normal_tensor({200, 2, 16}, 3);
  for (auto [t, name] : {std::pair{&in.Q, "q"}, {&in.K, "k"}, {&in.V, "v"}})
    fa::write_npy((dir / (std::string(name) + ".npy")).string(), *t, name);
  const auto f = [&](const char* n) { return (dir / n).string(); };
  const Ran r = run("--q " + f("q.npy") + " --k " + f("k.npy") + " --v " + f("v.npy") + " --cu-seqlens-q " + f("cuq.npy") +
                        " --cu-seqlens-k " + f("cuk.npy") + " --causal --window 20,-1 --json --out " + f("o.npy") +
                        " --lse " + f("l.npy") + " --dq " + f("dq.npy") + " --dk " + f("dk.npy"),
                    dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::ifstream js(dir / "stdout.txt");
  const nlohmann::json j = nlohmann::json::parse(js);
  CHECK(j["varlen"]["B"] == 4);
  CHECK(j["varlen"]["cu_seqlens_k"] == std::vector<int>{0, 5, 9, 9, 200});
  CHECK(j["problem"]["N_q"] == 130);  // the longest sequence's
  const fa::AttnProblem p0 = fa::make_problem(1, 4, 2, 1, 1, 16, true);
  fa::AttnProblem p = p0;
  p.window_left = 20;
  const fa::VarlenHost v{cu_q, cu_k};
  // FLOPs counted per sequence (3 x 5 and 130 x 191 with their masks), not the padded 4 x 130 x 191.
  CHECK(j["forward"]["gflops"].get<double>() * j["forward"]["ms"].get<double>() * 1e6 ==
        doctest::Approx(fa::varlen_forward_flops(p, v)));
  fa::TensorD O64, L64;
  fa::reference_varlen_forward(p, v, in.Q, in.K, in.V, O64, L64);
  const fa::Tensor O = fa::read_npy(f("o.npy"), "o"), L = fa::read_npy(f("l.npy"), "l");
  CHECK(O.shape == std::vector<int64_t>{140, 4, 16});
  CHECK(L.shape == std::vector<int64_t>{4, 140});
  CHECK(fa::compare(O.ptr(), O64.ptr(), O.numel()).max_abs <= 1e-6 * std::max(1.0, fa::max_abs_finite(O64.ptr(), O64.numel())));
  CHECK(fa::compare(L.ptr(), L64.ptr(), L.numel()).max_abs <= 1e-6 * std::max(1.0, fa::max_abs_finite(L64.ptr(), L64.numel())));
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t t = 3; t < 10; ++t) CHECK(L[h * 140 + t] == -INFINITY);  // the sequence without keys
  CHECK(fa::read_npy(f("dq.npy"), "dq").shape == std::vector<int64_t>{140, 4, 16});
  CHECK(fa::read_npy(f("dk.npy"), "dk").shape == std::vector<int64_t>{200, 2, 16});
  // The offsets were not ignored: the same tokens as one sequence give another O.
  fa::TensorD O1, L1;
  fa::reference_varlen_forward(p, fa::VarlenHost{{0, 140}, {0, 200}}, in.Q, in.K, in.V, O1, L1);
  CHECK(fa::compare(O.ptr(), O1.ptr(), O.numel()).max_abs > 1e-2);
  // Generated inputs in the same shape: --heads, --kv-heads, --head-dim, and --batch = B.
  const Ran g = run("--cu-seqlens-q " + f("cuq.npy") + " --cu-seqlens-k " + f("cuk.npy") +
                        " --batch 4 --heads 4 --kv-heads 2 --head-dim 16 --json --out " + f("o.npy"),
                    dir);
  INFO(g.err);
  REQUIRE(g.code == 0);
  CHECK(fa::read_npy(f("o.npy"), "o").shape == std::vector<int64_t>{140, 4, 16});
  fs::remove_all(dir);
}

TEST_CASE("01_naive program: bad packed-batch input (--cu-seqlens-q/-k) -> one line on stderr naming the flag, exit 2, no output file") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_01_cli_varlen_bad";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto f = [&](const char* n) { return (dir / n).string(); };
  fa::write_npy_i32(dir / "ok_q.npy", {3}, {0, 4, 10}, "test");
  fa::write_npy_i32(dir / "ok_k.npy", {3}, {0, 0, 12}, "test");
  fa::write_npy_i32(dir / "ok4.npy", {4}, {0, 4, 10, 10}, "test");
  fa::write_npy_i32(dir / "first.npy", {3}, {1, 4, 10}, "test");
  fa::write_npy_i32(dir / "down.npy", {3}, {0, 6, 5}, "test");
  fa::write_npy_i32(dir / "one.npy", {1}, {0}, "test");
  fa::write_npy_i32(dir / "empty.npy", {3}, {0, 0, 0}, "test");
  fa::write_npy_i32(dir / "rank2.npy", {1, 3}, {0, 4, 10}, "test");
  fa::write_npy(f("float.npy"), fa::Tensor({3}, 0.f), "float");
  fa::write_npy(f("q.npy"), normal_tensor({10, 2, 8}, 1), "q");   // [total_q = 10, H = 2, d = 8]
  fa::write_npy(f("k.npy"), normal_tensor({12, 1, 8}, 2), "k");   // [total_k = 12, H_kv = 1, d = 8]
  fa::write_npy(f("q4.npy"), normal_tensor({1, 10, 2, 8}, 1), "q");
  fa::write_npy(f("q11.npy"), normal_tensor({11, 2, 8}, 1), "q");
  fa::write_npy(f("do.npy"), normal_tensor({1, 2, 10, 8}, 3), "do");
  const std::string files = " --q " + f("q.npy") + " --k " + f("k.npy") + " --v " + f("k.npy");
  const std::string ok = " --cu-seqlens-q " + f("ok_q.npy") + " --cu-seqlens-k " + f("ok_k.npy");
  const fs::path out = dir / "o.npy";
  const std::pair<std::string, std::string> cases[] = {
      {"--cu-seqlens-q " + f("ok_q.npy"), "--cu-seqlens-k: expected --cu-seqlens-k F with --cu-seqlens-q"},
      {"--cu-seqlens-k " + f("ok_k.npy"), "--cu-seqlens-q: expected --cu-seqlens-q F with --cu-seqlens-k"},
      {"--cu-seqlens-q " + f("first.npy") + " --cu-seqlens-k " + f("ok_k.npy"), "expected cu[0] = 0, found cu[0] = 1"},
      {"--cu-seqlens-q " + f("ok_q.npy") + " --cu-seqlens-k " + f("down.npy"), "--cu-seqlens-k " + f("down.npy") + ": expected non-decreasing"},
      {"--cu-seqlens-q " + f("one.npy") + " --cu-seqlens-k " + f("one.npy"), "B + 1 >= 2 offsets"},
      {"--cu-seqlens-q " + f("empty.npy") + " --cu-seqlens-k " + f("ok_k.npy"), "--cu-seqlens-q: expected at least one query"},
      {"--cu-seqlens-q " + f("ok4.npy") + " --cu-seqlens-k " + f("ok_k.npy"), "--cu-seqlens-k " + f("ok_k.npy") + ": expected 4 offsets"},
      {"--cu-seqlens-q " + f("float.npy") + " --cu-seqlens-k " + f("ok_k.npy"), "--cu-seqlens-q " + f("float.npy") + ": expected dtype int32"},
      {"--cu-seqlens-q " + f("rank2.npy") + " --cu-seqlens-k " + f("ok_k.npy"), "expected an int32 .npy of shape [B + 1], found shape [1, 3]"},
      {"--cu-seqlens-q " + f("missing.npy") + " --cu-seqlens-k " + f("ok_k.npy"), "--cu-seqlens-q"},
      {ok + " --batch 3", "--batch: expected 2"},
      {ok + " --seq-q 10", "--seq-q: expected no sequence length"},
      {ok + " --seq-k 12", "--seq-k: expected no sequence length"},
      {ok + " --heads 3 --kv-heads 2", "--kv-heads"},
      {ok + " --cache-lens 4,4", "--cache-lens"},
      {"--cu-seqlens-q " + f("ok4.npy") + " --cu-seqlens-k " + f("ok4.npy") + files, "--cu-seqlens-k " + f("ok4.npy") + ": expected a last offset cu[B] = 12 (the tokens of --k)"},
      {"--q " + f("q11.npy") + " --k " + f("k.npy") + " --v " + f("k.npy") + ok, "--cu-seqlens-q " + f("ok_q.npy") + ": expected a last offset cu[B] = 11 (the tokens of --q)"},
      {"--q " + f("q4.npy") + " --k " + f("k.npy") + " --v " + f("k.npy") + ok, "expected a packed batch [total_tokens, heads, d]"},
      {files + ok + " --do " + f("do.npy"), "--do"},
      {files + ok + " --window=-2,0", "--window"},
  };
  for (const auto& [args, mention] : cases) {
    INFO("args: " << args);
    const Ran r = run(args + " --out " + out.string(), dir);
    INFO("stderr: " << r.err);
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(mention) != std::string::npos);
    CHECK(!fs::exists(out));
  }
  // The same offsets and files are good input: the cases above fail for their one defect.
  const Ran good = run(files + ok + " --out " + out.string(), dir);
  INFO(good.err);
  CHECK(good.code == 0);
  CHECK(fs::exists(out));
  fs::remove_all(dir);
}

// Stage 01 fails two ways and says which (issue 12): exp overflows above ln(FLT_MAX) = 88.72 (or
// the row's sum does, its logits below it: P = exp(S) / inf = 0), and
// a row whose every logit is below ln(FLT_MIN) = -87.34 underflows: its sum loses precision, and
// below -103.97 it is 0 and O = 0 / 0. The right O of the underflow example is tanh(0.5).
TEST_CASE("01_naive program: says whether exp overflowed or a row underflowed") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_01_diagnosis";
  fs::create_directories(dir);
  auto file = [&](const char* name, std::vector<float> values, int64_t rows) {
    fa::Tensor t({rows, int64_t(values.size()) / rows});
    t.data = std::move(values);
    fa::write_npy((dir / name).string(), t, name);
    return (dir / name).string();
  };
  const std::string q = file("q.npy", {1.f}, 1), v = file("v.npy", {1.f, -1.f}, 2);
  const std::string inputs[][2] = {
      {file("k_over.npy", {89.f, 0.f}, 2), "overflows"},     // S = {89, 0}
      {file("k_under.npy", {-200.f, -201.f}, 2), "underflows"},  // S = {-200, -201}: sum 0
      {file("k_low.npy", {-95.f, -96.f}, 2), "underflows"},      // subnormal sum: precision lost
      {file("k_sum.npy", {88.5f, 88.5f}, 2), "row sum of exp overflows"},  // S below 88.72, their sum past FLT_MAX
      {file("k_fine.npy", {3.f, 1.f}, 2), ""},                   // neither
  };
  for (const auto& [k, word] : inputs) {
    INFO("K = " << k);
    const Ran r = run("--q " + q + " --k " + k + " --v " + v + " --scale 1", dir);
    CHECK(r.code == 0);
    if (word.empty()) {
      CHECK(r.err.find("flows") == std::string::npos);
    } else {
      CHECK(r.err.find(word) != std::string::npos);
      const bool over = word.find("overflows") != std::string::npos;
      CHECK(r.err.find(over ? "underflows" : "overflows") == std::string::npos);
    }
  }
  fs::remove_all(dir);
}
