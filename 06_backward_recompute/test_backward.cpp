// Stage 06's tests: the backward battery (against the float64 reference backward and stage 01's
// materialised backward), fed by its own forward's O and LSE, at several block shapes;
// bit-identical gradients for 1, 2 and 4 threads; O(N d) extra memory; the program.
// No timing here: speed lives in bench_06_backward_recompute.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "conformance.hpp"
#include "naive_backward.hpp"
#include "reference.hpp"
#include "stage_06.hpp"

namespace {

fa::BackwardFn with_blocks(int64_t Br, int64_t Bc, int threads = 0) {
  return [=](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
             const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    tiled::Blocks b;
    b.Br = Br, b.Bc = Bc, b.threads = threads;
    bwd::backward<float>(p, Q, K, V, O, dO, LSE, dQ, dK, dV, b);
  };
}

}  // namespace

// The backward consumes its own forward's O and LSE (stage 04's tiled forward), as in training.
TEST_CASE("06 backward: battery, default blocks (bwd::default_blocks)") {
  fa::check_backward_battery(stage_06().backward, false, stage_06().forward);
}

TEST_CASE("06 backward: battery, blocks that divide nothing (Br = 7, Bc = 13)") {
  fa::check_backward_battery(with_blocks(7, 13), false, stage_06().forward);
}

TEST_CASE("06 backward: battery, Br = Bc = 1 and one block as big as the problem") {
  {
    INFO("Br = Bc = 1");
    fa::check_backward_battery(with_blocks(1, 1), false, stage_06().forward);
  }
  {
    INFO("one block as big as the problem");
    fa::check_backward_battery(with_blocks(100000, 100000), false, stage_06().forward);
  }
}

TEST_CASE("06 backward: variant battery (windows, softcaps), default blocks and Br = 7, Bc = 13") {
  fa::check_variant_backward_battery(stage_06().backward, false, stage_06().forward);
  fa::check_variant_backward_battery(with_blocks(7, 13), false, stage_06().forward);
}

TEST_CASE("06 backward: variant battery, Br = Bc = 1 and one block as big as the problem") {
  fa::check_variant_backward_battery(with_blocks(1, 1), false, stage_06().forward);
  fa::check_variant_backward_battery(with_blocks(100000, 100000), false, stage_06().forward);
}

TEST_CASE("06 forward and backward: packed variable-length batches (varlen battery), default blocks and Br = 7, Bc = 13") {
  fa::check_varlen_forward_battery(stage_06().forward);
  fa::check_varlen_backward_battery(stage_06().backward, false, stage_06().forward);
  fa::check_varlen_backward_battery(with_blocks(7, 13), false, stage_06().forward);
}

TEST_CASE("06 backward: 1, 2 and 4 threads give bit-identical dQ, dK, dV") {
  for (const fa::AttnProblem& p : {fa::make_problem(2, 4, 2, 301, 257, 40, true), fa::make_problem(1, 3, 1, 190, 333, 64, false),
                                   fa::make_problem(1, 2, 2, 257, 120, 33, true)}) {
    fa::Inputs in = fa::random_inputs(p, 3);
    fa::add_grad_output(in, "", 4);
    const fa::ForwardRun fwd = fa::run_forward(stage_06().forward, in);
    for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{16, 48}, {7, 13}}) {
      INFO(p.describe() << " Br=" << Br << " Bc=" << Bc);
      const fa::BackwardRun one = fa::run_backward(with_blocks(Br, Bc, 1), in, fwd);
      for (int t : {2, 4}) {
        INFO("threads " << t);
        const fa::BackwardRun many = fa::run_backward(with_blocks(Br, Bc, t), in, fwd);
        CHECK(fa::same_bits(one.dQ, many.dQ));
        CHECK(fa::same_bits(one.dK, many.dK));
        CHECK(fa::same_bits(one.dV, many.dV));
      }
    }
  }
}

TEST_CASE("06 backward: extra memory is O(N d): block buffers and one float per row, no N x N") {
  // Measured (common/memtrack.hpp), one thread, Br = Bc = 64: growing N from 512 to 2048 adds only
  // D (one float per query row, 4 * 1536 bytes) up to the allocator's slack, at most 64 bytes for
  // each of the 20 block buffers (64-byte aligned, mk::Buffer) and D; an N x N matrix would add
  // 16 MiB.
  int64_t bytes[2];
  int k = 0;
  for (int64_t N : {512, 2048}) {
    fa::Inputs in = fa::random_inputs(fa::make_problem(1, 1, 1, N, N, 64, false), 2);
    fa::add_grad_output(in, "", 5);
    const fa::ForwardRun fwd = fa::run_forward(stage_06().forward, in);
    bytes[k++] = fa::run_backward(with_blocks(64, 64, 1), in, fwd).extra_bytes;
  }
  INFO("bytes at N = 512: " << bytes[0] << ", at N = 2048: " << bytes[1]);
  CHECK(std::abs(bytes[1] - bytes[0] - 4 * 1536) <= 21 * 64);
  CHECK(bytes[1] < 1 << 20);  // the buffers: ~20 blocks of 64 x 64 floats
}

// ---- The program ----
namespace {
namespace fs = std::filesystem;
struct Ran {
  int code;
  std::string out, err;
};
Ran run(const std::string& args, const fs::path& dir) {
  const std::string cmd = std::string(STAGE_BIN) + " " + args + " >" + (dir / "o.txt").string() + " 2>" +
                          (dir / "e.txt").string();
  const int status = std::system(cmd.c_str());
  auto slurp = [](const fs::path& f) {
    std::ifstream s(f);
    return std::string((std::istreambuf_iterator<char>(s)), std::istreambuf_iterator<char>());
  };
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "o.txt"), slurp(dir / "e.txt")};
}
}  // namespace

TEST_CASE("06 program: forward, backward, the gradients written, its flags") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_06_cli";
  fs::create_directories(dir);
  const std::string outs = " --dq " + (dir / "dq.npy").string() + " --dk " + (dir / "dk.npy").string() +
                           " --dv " + (dir / "dv.npy").string();
  const Ran r = run("--batch 2 --heads 4 --kv-heads 2 --seq-q 100 --seq-k 90 --head-dim 16 --causal --block-q 7 "
                    "--block-k 13 --threads 2" + outs, dir);
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("backward :") != std::string::npos);
  CHECK(r.out.find("dQ/dK/dV vs float64") != std::string::npos);
  CHECK(r.err.empty());
  for (const char* f : {"dq.npy", "dk.npy", "dv.npy"}) CHECK(fs::file_size(dir / f) > 0);
  for (const char* bad : {"--block-q 0", "--block-k -3", "--threads 0", "--dtype bf16"}) {
    INFO(bad);
    const Ran e = run(std::string("--seq-q 8 ") + bad, dir);
    CHECK(e.code == 2);
    CHECK(std::count(e.err.begin(), e.err.end(), '\n') == 1);
  }
  fs::remove_all(dir);
}

TEST_CASE("06 program: the backward from O and LSE files (--o-in, --lse-in) equals the one that ran the forward") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_06_from_files";
  fs::create_directories(dir);
  auto p = [&](const char* f) { return (dir / f).string(); };
  const std::string problem = "--batch 1 --heads 4 --kv-heads 2 --seq-q 70 --seq-k 50 --head-dim 24 --causal --seed 5 ";
  // 1. forward and backward in one run, keeping O and LSE; 2. the backward alone from them.
  const Ran a = run(problem + "--out " + p("o.npy") + " --lse " + p("lse.npy") + " --dq " + p("dq1.npy") + " --dk " +
                    p("dk1.npy") + " --dv " + p("dv1.npy"), dir);
  REQUIRE_MESSAGE(a.code == 0, a.err);
  const Ran b = run(problem + "--o-in " + p("o.npy") + " --lse-in " + p("lse.npy") + " --dq " + p("dq2.npy") + " --dk " +
                    p("dk2.npy") + " --dv " + p("dv2.npy"), dir);
  INFO(b.out << b.err);
  REQUIRE(b.code == 0);
  CHECK(b.out.find("forward  : not run: O from") != std::string::npos);
  auto bytes = [](const std::string& f) {
    std::ifstream s(f, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(s)), std::istreambuf_iterator<char>());
  };
  for (const char* g : {"dq", "dk", "dv"})
    CHECK(bytes(p((std::string(g) + "1.npy").c_str())) == bytes(p((std::string(g) + "2.npy").c_str())));
  // What cannot be taken: a shape that is not O's or LSE's, one file without the other, an
  // output of the forward that does not run.
  // Another problem's LSE: the causal one (rows 0..19 see no key) for the same problem without the
  // mask is refused by the -inf rows even with --no-check; O and LSE of another seed by the check
  // against float64.
  const std::string other = "--batch 1 --heads 4 --kv-heads 2 --seq-q 70 --seq-k 50 --head-dim 24 --causal --seed 6 ";
  REQUIRE(run(other + "--out " + p("o6.npy") + " --lse " + p("lse6.npy"), dir).code == 0);
  const std::string no_mask = "--batch 1 --heads 4 --kv-heads 2 --seq-q 70 --seq-k 50 --head-dim 24 --seed 5 ";
  const std::pair<std::string, const char*> bad[] = {
      {"--o-in " + p("lse.npy") + " --lse-in " + p("lse.npy"), "--o-in"},
      {"--o-in " + p("o.npy") + " --lse-in " + p("o.npy"), "--lse-in"},
      {"--o-in " + p("o.npy"), "--lse-in"},
      {"--o-in " + p("o.npy") + " --lse-in " + p("lse.npy") + " --out " + p("x.npy"), "--out"},
  };
  for (const auto& [args, flag] : bad) {
    INFO(args);
    const Ran e = run(problem + args, dir);
    CHECK(e.code == 2);
    CHECK(e.err.find(flag) != std::string::npos);
    CHECK(std::count(e.err.begin(), e.err.end(), '\n') == 1);
    CHECK(!fs::exists(dir / "x.npy"));
  }
  const std::pair<std::string, const char*> wrong[] = {
      {no_mask + "--no-check --o-in " + p("o.npy") + " --lse-in " + p("lse.npy") + " --dq " + p("x.npy"), "--lse-in"},
      {problem + "--o-in " + p("o6.npy") + " --lse-in " + p("lse6.npy") + " --dq " + p("x.npy"), "--lse-in"},
      {problem + "--o-in " + p("o6.npy") + " --lse-in " + p("lse.npy") + " --dq " + p("x.npy"), "--o-in"},
  };
  for (const auto& [args, flag] : wrong) {
    INFO(args);
    const Ran e = run(args, dir);
    CHECK(e.code == 2);
    CHECK(e.err.find(flag) != std::string::npos);
    CHECK(std::count(e.err.begin(), e.err.end(), '\n') == 1);
    CHECK(!fs::exists(dir / "x.npy"));
  }
  fs::remove_all(dir);
}

// Issue 34 on the GPU: --device gpu takes --window and --softcap with every backward kernel (the
// forward: stage 05's auto, which takes them); only a bad value is refused, naming its flag, before
// anything touches the GPU. Without a GPU the run stops at the GPU's one line, not at the variants.
TEST_CASE("06 program: --device gpu takes --window and --softcap with every --bwd-kernel, refusing only bad values") {
  const fs::path dir = fs::temp_directory_path() / "fa_test_06_gpu_variants";
  fs::create_directories(dir);
  if (run("--help", dir).out.find("--device") == std::string::npos) {
    MESSAGE("this build has no GPU backward (no nvcc): nothing to test");
    fs::remove_all(dir);
    return;
  }
  for (const char* k : {"auto", "gpu_v1", "gpu_v2", "gpu_v2_det", "gpu_v3", "gpu_v3_det", "gpu_v4", "gpu_v4_det"})
    for (const char* dt : {"fp32", "bf16"}) {
      const std::string args = std::string("--device gpu --bwd-kernel ") + k + " --dtype " + dt +
                               " --batch 2 --heads 4 --kv-heads 2 --seq-q 300 --seq-k 200 --head-dim 128 --causal"
                               " --window 40,0 --softcap 20 --dq " + (dir / "dq.npy").string();
      INFO(args);
      const Ran r = run(args, dir);
      INFO(r.out << r.err);
      if (r.code == 2 && r.err.find("GPU: expected a CUDA GPU") != std::string::npos) {
        CHECK(r.err.find("--window") == std::string::npos);
        CHECK(r.err.find("--softcap") == std::string::npos);
        CHECK(!fs::exists(dir / "dq.npy"));
        continue;
      }
      REQUIRE(r.code == 0);  // on a GPU: it ran (the report compares the gradients with float64; the GPU tests judge them)
      CHECK(r.out.find("dQ/dK/dV vs float64") != std::string::npos);
      CHECK(fs::file_size(dir / "dq.npy") > 0);
      fs::remove(dir / "dq.npy");
    }
  const std::pair<const char*, const char*> bad[] = {{"--window 40,-3", "--window"}, {"--window 40", "--window"},
                                                    {"--softcap 0", "--softcap"},    {"--softcap -5", "--softcap"}};
  for (const auto& [flags, flag] : bad) {
    INFO(flags);
    const Ran e = run(std::string("--device gpu --dtype bf16 --seq-q 64 --head-dim 64 ") + flags, dir);
    CHECK(e.code == 2);
    CHECK(e.err.find(flag) != std::string::npos);
    CHECK(std::count(e.err.begin(), e.err.end(), '\n') == 1);
  }
  fs::remove_all(dir);
}
