// Stage 05's tests that need no GPU, so CI runs them: the launch arithmetic of every kernel
// (block sizes from M, shared memory, workspace, the limits it refuses), the C ABI's argument
// checks (libfa05.so answers with a status before touching the GPU), the dtype conversions the
// host adapter uses, the low-precision baseline of the battery, and the program's behaviour on
// this machine: without a GPU, one line on stderr and exit code 2.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "conformance.hpp"
#include "fa05.h"
#include "gpu.hpp"
#include "npy.hpp"
#include "reference.hpp"
#include "runner.hpp"
#include "runner_fp8.hpp"
#include "test_exports.hpp"

namespace {

struct Result {
  int code;
  std::string out, err;
};

// Runs the stage program with `args`; captures exit code, stdout and stderr.
Result run(const std::string& args) {
  const std::string o = "test_05_host_out.txt", e = "test_05_host_err.txt";
  const int status = std::system((std::string(STAGE_BIN) + " " + args + " >" + o + " 2>" + e).c_str());
  auto slurp = [](const std::string& f) {
    std::ifstream in(f);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(o), slurp(e)};
  std::remove(o.c_str());
  std::remove(e.c_str());
  return r;
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("05 plan: v1 blocks follow FA1 Alg. 1 line 1 with M = 48 KiB, clamped to N") {
  // M = 12288 floats: Bc = ceil(M / 4d), Br = min(Bc, d).
  struct Want {
    int64_t d, Br, Bc;
  };
  // d = 100 and 200 do not divide M: Bc is rounded up (12288 / 400 = 30.72 -> 31).
  for (const Want w : {Want{1, 1, 3072}, Want{16, 16, 192}, Want{64, 48, 48}, Want{100, 31, 31},
                       Want{128, 24, 24}, Want{200, 16, 16}, Want{256, 12, 12}}) {
    INFO("d = " << w.d);
    const fa05::Plan pl = fa05::plan("v1", fa::make_problem(1, 2, 2, 4096, 4096, w.d, false), fa::DType::bf16);
    CHECK(pl.Br == w.Br);
    CHECK(pl.Bc == w.Bc);
    CHECK(pl.threads == 128);
    CHECK(pl.blocks == 2 * ((4096 + w.Br - 1) / w.Br));
    CHECK(pl.workspace_bytes == 0);
    // Q_i, O_i (Br x d), K_j (Bc x (d|1)), V_j (Bc x d), S (Br x (Bc+1)), m, l, alpha: floats.
    CHECK(pl.smem_bytes == 4 * (2 * w.Br * w.d + w.Bc * (w.d | 1) + w.Bc * w.d + w.Br * (w.Bc + 1) + 3 * w.Br));
  }
  // No block larger than the problem; explicit Br, Bc and M win.
  const fa05::Plan small = fa05::plan("v1", fa::make_problem(1, 1, 1, 5, 3, 64, false), fa::DType::fp32);
  CHECK(small.Br == 5);
  CHECK(small.Bc == 3);
  fa05::Config cfg;
  cfg.Br = 7, cfg.Bc = 13;
  const fa05::Plan custom = fa05::plan("v1", fa::make_problem(1, 1, 1, 100, 100, 64, false), fa::DType::fp32, cfg);
  CHECK(custom.Br == 7);
  CHECK(custom.Bc == 13);
  CHECK(custom.blocks == 15);
  fa05::Config m;
  m.sram_bytes = 96 * 1024;  // 24576 floats: Bc = 96 at d = 64, Br = 64
  const fa05::Plan big = fa05::plan("v1", fa::make_problem(1, 1, 1, 1000, 1000, 64, false), fa::DType::fp32, m);
  CHECK(big.Bc == 96);
  CHECK(big.Br == 64);
}

TEST_CASE("05 plan: what a kernel cannot run is refused with the flag to change") {
  CHECK_THROWS_WITH_AS(fa05::plan("v1", fa::make_problem(1, 1, 1, 8, 8, 257, false), fa::DType::fp32),
                       doctest::Contains("--head-dim"), fa05::Unsupported);
  fa05::Config huge;
  huge.sram_bytes = 1 << 20;  // blocks needing ~1 MiB of shared memory
  CHECK_THROWS_WITH_AS(fa05::plan("v1", fa::make_problem(1, 1, 1, 4096, 4096, 64, false), fa::DType::fp32, huge),
                       doctest::Contains("--sram-bytes"), fa05::Unsupported);
  CHECK_THROWS_WITH_AS(fa05::plan("v99", fa::make_problem(1, 1, 1, 8, 8, 64, false), fa::DType::fp32),
                       doctest::Contains("--kernel"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa05::plan("v1", fa::make_problem(1, 3, 2, 8, 8, 64, false), fa::DType::fp32),
                       doctest::Contains("--kv-heads"), fa::InputError);
  // More than 2^31 - 1 thread blocks: 2^26 rows of d = 1 in blocks of Br = 1, times 64 heads.
  CHECK_THROWS_WITH_AS(fa05::plan("v1", fa::make_problem(1, 64, 64, int64_t(1) << 26, 2, 1, false), fa::DType::fp32),
                       doctest::Contains("thread blocks"), fa05::Unsupported);
  // Block rows whose byte count would overflow int are refused, not wrapped to a small size.
  fa05::Config wide;
  wide.Br = 2, wide.Bc = int64_t(1) << 31;
  CHECK_THROWS_WITH_AS(fa05::plan("v1", fa::make_problem(1, 1, 1, 64, (int64_t(1) << 31) + 5, 1, false), fa::DType::fp32, wide),
                       doctest::Contains("--block-q/--block-k"), fa05::Unsupported);
  // v1's knobs are refused, not ignored, where v1 does not run.
  fa05::Config knob;
  knob.Br = 32;
  CHECK_THROWS_WITH_AS(fa05::plan("v2", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::bf16, knob),
                       doctest::Contains("--sram-bytes/--block-q/--block-k"), fa05::Unsupported);
  CHECK_THROWS_AS(fa05::plan("cublas", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::bf16, knob), fa05::Unsupported);
  CHECK(fa05::plan("v2", fa::make_problem(1, 1, 1, 64, 64, 80, false), fa::DType::fp32, knob).runs == "v1");  // v1 runs
  // cuBLAS takes int sizes: N_k, (H / H_kv) N_q and B H_kv past 2^31 - 1 are refused.
  CHECK_THROWS_WITH_AS(fa05::plan("cublas", fa::make_problem(1, 1, 1, 1, (int64_t(1) << 31) + 1, 1, false), fa::DType::fp32),
                       doctest::Contains("--seq-k"), fa05::Unsupported);
  CHECK_THROWS_WITH_AS(fa05::plan("cublas", fa::make_problem(1, 4, 1, (int64_t(1) << 29) + 1, 1, 1, false), fa::DType::fp32),
                       doctest::Contains("--seq-q"), fa05::Unsupported);
  CHECK_THROWS_WITH_AS(fa05::plan("cublas", fa::make_problem((int64_t(1) << 31) + 1, 1, 1, 1, 1, 1, false), fa::DType::fp32),
                       doctest::Contains("--batch"), fa05::Unsupported);
}

TEST_CASE("05 plan: v2 runs fp16/bf16 at d <= 128 (64, 128, others padded) with 64 x 64 blocks; v1 otherwise, and says so") {
  for (int64_t d : {64, 128}) {
    const fa05::Plan pl = fa05::plan("v2", fa::make_problem(2, 4, 2, 1000, 300, d, true), fa::DType::bf16);
    CHECK(pl.runs == "v2");
    CHECK(pl.note.empty());
    CHECK(pl.Br == 64);
    CHECK(pl.Bc == 64);
    CHECK(pl.threads == 128);
    CHECK(pl.blocks == 2 * 4 * 16);
    CHECK(pl.smem_bytes == (64 + 2 * 64) * (d + 8) * 2);  // Q_i, K_j, V_j in 16 bits, rows padded
    CHECK(pl.workspace_bytes == 0);
  }
  // Other d up to 128: the next width's kernel on zero-padded copies, in the plan's workspace.
  for (auto [d, D] : {std::pair<int64_t, int64_t>{32, 64}, {1, 64}, {80, 128}, {127, 128}}) {
    const fa05::Plan pl = fa05::plan("v2", fa::make_problem(2, 4, 2, 100, 30, d, false), fa::DType::fp16);
    CHECK(pl.runs == "v2");
    CHECK(pl.d_kernel == D);
    CHECK(pl.d_buffers == D);
    CHECK(pl.padded_copies);
    CHECK(pl.smem_bytes == (64 + 2 * 64) * (D + 8) * 2);
    CHECK(pl.workspace_bytes == (2 * 2 * 4 * 100 + 2 * 2 * 2 * 30) * D * 2);  // Q, O; K, V
    CHECK(pl.note.find("zero-padded to " + std::to_string(D)) != std::string::npos);
  }
  for (auto [d, t] : {std::pair<int64_t, fa::DType>{64, fa::DType::fp32}, {160, fa::DType::bf16}, {256, fa::DType::fp16}}) {
    const fa05::Plan pl = fa05::plan("v2", fa::make_problem(1, 1, 1, 100, 100, d, false), t);
    CHECK(pl.runs == "v1");
    CHECK(pl.note.find("ran v1") != std::string::npos);
    CHECK(pl.Br == fa05::plan("v1", fa::make_problem(1, 1, 1, 100, 100, d, false), t).Br);
  }
}

TEST_CASE("05 plan: v3, v4 double-buffer K and V; v5, v6 take a compiled shape, refuse others") {
  for (const char* k : {"v3", "v4"})
    for (int64_t d : {64, 128}) {
      const fa05::Plan pl = fa05::plan(k, fa::make_problem(2, 4, 2, 1000, 300, d, false), fa::DType::fp16);
      CHECK(pl.runs == k);
      CHECK(pl.Br == 64);
      CHECK(pl.Bc == 64);
      CHECK(pl.threads == 128);
      CHECK(pl.smem_bytes == (64 + 4 * 64) * (d + 8) * 2);  // Q_i and two K_j, two V_j
      CHECK(fa05::plan(k, fa::make_problem(1, 1, 1, 100, 100, d, false), fa::DType::fp32).runs == "v1");
    }
  // v5 is also compiled for d = 192 and 256 (the mma.sync path of GPUs without wgmma), in one shape.
  for (int64_t d : {129, 192, 200, 256}) {
    const fa05::Plan pl = fa05::plan("v5", fa::make_problem(1, 2, 1, 100, 100, d, true), fa::DType::bf16);
    CHECK(pl.runs == "v5");
    CHECK(pl.d_kernel == (d <= 192 ? 192 : 256));
    CHECK(pl.Br == 64);
    CHECK(pl.Bc == 32);
    CHECK(pl.smem_bytes <= 163 * 1024);  // fits an A100's thread block
  }
  for (const char* k : {"v5", "v6"}) {
    INFO(k);
    const int64_t rows_per_warp = std::string(k) == "v5" ? 16 : 32;
    for (int64_t d : {64, 128}) {
      REQUIRE(!fa05::block_shapes(k, d).empty());
      for (const fa05::BlockShape& sh : fa05::block_shapes(k, d)) {
        fa05::Config cfg;
        cfg.Br = sh.Br, cfg.Bc = sh.Bc;
        const fa05::Plan pl = fa05::plan(k, fa::make_problem(2, 4, 2, 1000, 300, d, true), fa::DType::bf16, cfg);
        CHECK(pl.runs == k);
        CHECK(pl.Br == sh.Br);
        CHECK(pl.Bc == sh.Bc);
        CHECK(pl.threads == 32 * sh.Br / rows_per_warp);  // a warp per 16 (v5) or 32 (v6) query rows
        CHECK(pl.blocks == 2 * 4 * ((1000 + sh.Br - 1) / sh.Br));
        CHECK(pl.smem_bytes == (sh.Br + 4 * sh.Bc) * (d + 8) * 2);
        CHECK(pl.smem_bytes <= fa05::kMaxSmemSm90);
      }
    }
    for (int64_t d : {64, 128}) {  // the default is one of the compiled shapes
      const fa05::BlockShape def = fa05::default_shape(k, d);
      const fa05::Plan pl = fa05::plan(k, fa::make_problem(1, 2, 2, 500, 500, d, false), fa::DType::bf16);
      CHECK(pl.Br == def.Br);
      CHECK(pl.Bc == def.Bc);
    }
  }
  CHECK(fa05::block_shapes("v4", 64).empty());
  // v6 at d = 128 only with Bc = 32 (Bc = 64 would spill registers): refused, naming the flags.
  fa05::Config wide;
  wide.Br = 128, wide.Bc = 64;
  CHECK(fa05::plan("v6", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::bf16, wide).Bc == 64);
  CHECK_THROWS_WITH_AS(fa05::plan("v6", fa::make_problem(1, 1, 1, 64, 64, 128, false), fa::DType::bf16, wide),
                       doctest::Contains("--block-q/--block-k"), fa05::Unsupported);
  fa05::Config odd;
  odd.Br = 96, odd.Bc = 64;
  CHECK_THROWS_WITH_AS(fa05::plan("v5", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::bf16, odd),
                       doctest::Contains("--block-q/--block-k"), fa05::Unsupported);
  fa05::Config sram;
  sram.sram_bytes = 65536;
  CHECK_THROWS_WITH_AS(fa05::plan("v5", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::bf16, sram),
                       doctest::Contains("--sram-bytes"), fa05::Unsupported);
  fa05::Config knob;
  knob.Bc = 32;
  CHECK_THROWS_AS(fa05::plan("v4", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::bf16, knob), fa05::Unsupported);
}

TEST_CASE("05 plan: v7 takes whole warpgroups and 64-key tiles, swizzled K/V; off sm_90 it runs v5") {
  fa05::Config hopper;
  hopper.sm = 90;
  for (int64_t d : {64, 128}) {
    REQUIRE(fa05::block_shapes("v7", d).size() == 4);
    for (const fa05::BlockShape& sh : fa05::block_shapes("v7", d)) {
      INFO("d " << d << " shape " << sh.Br << "x" << sh.Bc);
      CHECK(sh.Br % 64 == 0);  // 16 rows per warp, whole warpgroups of 4 warps
      CHECK(sh.Bc % 64 == 0);  // whole m64n64k16 tiles of keys
      fa05::Config cfg = hopper;
      cfg.Br = sh.Br, cfg.Bc = sh.Bc;
      const fa05::Plan pl = fa05::plan("v7", fa::make_problem(2, 4, 2, 1000, 300, d, true), fa::DType::bf16, cfg);
      CHECK(pl.runs == "v7");
      CHECK(pl.note.empty());
      CHECK(pl.threads == 32 * sh.Br / 16);
      CHECK(pl.blocks == 2 * 4 * ((1000 + sh.Br - 1) / sh.Br));
      // two K and two V tiles, swizzled (no padding), Q_i padded, 1024 bytes to align the tiles
      CHECK(pl.smem_bytes == 4 * sh.Bc * d * 2 + sh.Br * (d + 8) * 2 + 1024);
      CHECK(pl.smem_bytes <= fa05::kMaxSmemSm90);
      // on an A100 (sm_80): v5 at the same shape, and the note says why
      fa05::Config ampere = cfg;
      ampere.sm = 80;
      const fa05::Plan fb = fa05::plan("v7", fa::make_problem(2, 4, 2, 1000, 300, d, true), fa::DType::bf16, ampere);
      CHECK(fb.runs == "v5");
      CHECK(fb.Br == sh.Br);
      CHECK(fb.Bc == sh.Bc);
      CHECK(fb.note.find("sm_80") != std::string::npos);
    }
    const fa05::Plan def = fa05::plan("v7", fa::make_problem(1, 2, 2, 500, 500, d, false), fa::DType::bf16, hopper);
    CHECK(def.Br == fa05::default_shape("v7", d).Br);
    CHECK(def.Bc == fa05::default_shape("v7", d).Bc);
  }
  // On an A100 (sm_80, 163 KiB of shared memory a block) v7's default 128 x 128 at d = 128 does not
  // fit as a v5 block (174,080 bytes): the plan takes the largest v5 shape that does, and says so.
  fa05::Config a100;
  a100.sm = 80, a100.smem_optin = 166912;
  const fa05::Plan small = fa05::plan("v7", fa::make_problem(1, 2, 2, 500, 500, 128, false), fa::DType::bf16, a100);
  CHECK(small.runs == "v5");
  CHECK(small.Br == 128);
  CHECK(small.Bc == 64);
  CHECK(small.smem_bytes <= 166912);
  CHECK(small.note.find("shared memory") != std::string::npos);
  CHECK(fa05::plan("v5", fa::make_problem(1, 2, 2, 500, 500, 128, false), fa::DType::bf16, a100).Bc == 64);
  fa05::Config asked = a100;  // a shape asked for is kept (and refused at launch where it does not fit)
  asked.Br = 128, asked.Bc = 128;
  CHECK(fa05::plan("v7", fa::make_problem(1, 2, 2, 500, 500, 128, false), fa::DType::bf16, asked).Bc == 128);
  // fp32, and head dims past 128: v1, as for every tensor-core version but v5 and v13; d = 96 runs
  // the d = 128 kernel on padded copies
  CHECK(fa05::plan("v7", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::fp32, hopper).runs == "v1");
  CHECK(fa05::plan("v7", fa::make_problem(1, 1, 1, 64, 64, 160, false), fa::DType::bf16, hopper).runs == "v1");
  CHECK(fa05::plan("v7", fa::make_problem(1, 1, 1, 64, 64, 96, false), fa::DType::bf16, hopper).d_kernel == 128);
  fa05::Config narrow = hopper;
  narrow.Br = 128, narrow.Bc = 32;  // a v5 shape, not a v7 one
  CHECK_THROWS_WITH_AS(fa05::plan("v7", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::bf16, narrow),
                       doctest::Contains("--block-q/--block-k"), fa05::Unsupported);
}

TEST_CASE("05 plan: v8 has v7's shapes and a second Q tile, plans tiles, takes a cap on its blocks; d = 64: v7; off sm_90: v5") {
  fa05::Config hopper;
  hopper.sm = 90;
  for (int64_t d : {128}) {
    const std::vector<fa05::BlockShape> shapes = fa05::block_shapes("v8", d);
    REQUIRE(shapes.size() == fa05::block_shapes("v7", d).size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      const fa05::BlockShape sh = shapes[i];
      INFO("d " << d << " shape " << sh.Br << "x" << sh.Bc);
      CHECK(sh.Br == fa05::block_shapes("v7", d)[i].Br);
      CHECK(sh.Bc == fa05::block_shapes("v7", d)[i].Bc);
      fa05::Config cfg = hopper;
      cfg.Br = sh.Br, cfg.Bc = sh.Bc, cfg.persistent_blocks = 3;
      const fa::AttnProblem p = fa::make_problem(2, 4, 2, 1000, 300, d, true);
      const fa05::Plan pl = fa05::plan("v8", p, fa::DType::bf16, cfg);
      CHECK(pl.runs == "v8");
      CHECK(pl.note.empty());
      CHECK(pl.threads == 32 * sh.Br / 16);
      CHECK(pl.blocks == 2 * 4 * ((1000 + sh.Br - 1) / sh.Br));  // the tiles; the launch runs fewer blocks
      CHECK(pl.persistent_blocks == 3);
      // v7's shared memory and a second Q_i tile; the cap is v8's alone
      fa05::Config v7cfg = cfg;
      v7cfg.persistent_blocks = 0;
      CHECK(pl.smem_bytes == fa05::plan("v7", p, fa::DType::bf16, v7cfg).smem_bytes + sh.Br * (d + 8) * 2);
      CHECK_THROWS_WITH_AS(fa05::plan("v7", p, fa::DType::bf16, cfg), doctest::Contains("--persistent-blocks"),
                           fa05::Unsupported);
      CHECK(pl.smem_bytes <= fa05::kMaxSmemSm90);
      fa05::Config ampere = cfg;
      ampere.sm = 80;
      const fa05::Plan fb = fa05::plan("v8", p, fa::DType::bf16, ampere);
      CHECK(fb.runs == "v5");
      CHECK(fb.Br == sh.Br);
      CHECK(fb.persistent_blocks == 0);
      CHECK(fb.note.find("v8 runs on sm_90 only") != std::string::npos);
    }
    const fa05::Plan def = fa05::plan("v8", fa::make_problem(1, 2, 2, 500, 500, d, false), fa::DType::bf16, hopper);
    CHECK(def.Br == fa05::default_shape("v7", d).Br);
    CHECK(def.Bc == fa05::default_shape("v7", d).Bc);
    CHECK(def.persistent_blocks == 0);
  }
  CHECK(fa05::plan("v8", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::fp32, hopper).runs == "v1");
  // d = 64: v7, at v7's shapes (v8's are the same list), a cap ignored; off sm_90 v5 as for v7
  fa05::Config capped = hopper;
  capped.persistent_blocks = 4;
  const fa05::Plan d64 = fa05::plan("v8", fa::make_problem(1, 2, 2, 500, 500, 64, false), fa::DType::bf16, capped);
  CHECK(d64.runs == "v7");
  CHECK(d64.note.find("d = 128 only") != std::string::npos);
  CHECK(d64.note.find("--persistent-blocks does not apply") != std::string::npos);
  CHECK(d64.Br == fa05::default_shape("v7", 64).Br);
  CHECK(d64.Bc == fa05::default_shape("v7", 64).Bc);
  CHECK(d64.persistent_blocks == 0);
  CHECK(d64.smem_bytes == fa05::plan("v7", fa::make_problem(1, 2, 2, 500, 500, 64, false), fa::DType::bf16, hopper).smem_bytes);
  fa05::Config ampere = hopper;
  ampere.sm = 80;
  CHECK(fa05::plan("v8", fa::make_problem(1, 2, 2, 500, 500, 64, false), fa::DType::bf16, ampere).runs == "v5");
}

TEST_CASE("05 plan: v9 runs v7's shapes in v7's shared memory at d = 64 and 128; off sm_90: v5") {
  fa05::Config hopper;
  hopper.sm = 90;
  for (int64_t d : {64, 128}) {
    const std::vector<fa05::BlockShape> shapes = fa05::block_shapes("v9", d);
    REQUIRE(shapes.size() == fa05::block_shapes("v7", d).size());
    for (size_t i = 0; i < shapes.size(); ++i) {
      const fa05::BlockShape sh = shapes[i];
      INFO("d " << d << " shape " << sh.Br << "x" << sh.Bc);
      CHECK(sh.Br == fa05::block_shapes("v7", d)[i].Br);
      CHECK(sh.Bc == fa05::block_shapes("v7", d)[i].Bc);
      fa05::Config cfg = hopper;
      cfg.Br = sh.Br, cfg.Bc = sh.Bc;
      const fa::AttnProblem p = fa::make_problem(2, 4, 2, 1000, 300, d, true);
      const fa05::Plan pl = fa05::plan("v9", p, fa::DType::bf16, cfg);
      CHECK(pl.runs == "v9");
      CHECK(pl.note.empty());
      const fa05::Plan v7 = fa05::plan("v7", p, fa::DType::bf16, cfg);
      CHECK(pl.threads == v7.threads);
      CHECK(pl.blocks == v7.blocks);
      CHECK(pl.smem_bytes == v7.smem_bytes);  // the same tiles: only the order of the work changes
      CHECK_THROWS_WITH_AS(
          [&] {
            fa05::Config capped = cfg;
            capped.persistent_blocks = 2;
            return fa05::plan("v9", p, fa::DType::bf16, capped);
          }(),
          doctest::Contains("--persistent-blocks"), fa05::Unsupported);
      fa05::Config ampere = cfg;
      ampere.sm = 80;
      const fa05::Plan fb = fa05::plan("v9", p, fa::DType::bf16, ampere);
      CHECK(fb.runs == "v5");
      CHECK(fb.Br == sh.Br);
      CHECK(fb.Bc == sh.Bc);
    }
    const fa05::Plan def = fa05::plan("v9", fa::make_problem(1, 2, 2, 500, 500, d, false), fa::DType::bf16, hopper);
    CHECK(def.Br == fa05::default_shape("v9", d).Br);
    CHECK(def.Bc == fa05::default_shape("v9", d).Bc);
  }
  CHECK(fa05::plan("v9", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::fp32, hopper).runs == "v1");
  CHECK(fa05::plan("v9", fa::make_problem(1, 1, 1, 64, 64, 160, false), fa::DType::bf16, hopper).runs == "v1");
}

TEST_CASE("05 plan: v10 runs v9's two-warpgroup shapes with v8's second Q tile, a 4-byte counter, any grid cap; d = 64: v9; off sm_90: v5") {
  fa05::Config hopper;
  hopper.sm = 90;
  for (int64_t d : {128}) {
    const std::vector<fa05::BlockShape> shapes = fa05::block_shapes("v10", d);
    REQUIRE(shapes.size() == 2);
    for (const fa05::BlockShape& sh : shapes) {
      INFO("d " << d << " shape " << sh.Br << "x" << sh.Bc);
      CHECK(sh.Br == 128);  // two warpgroups
      fa05::Config cfg = hopper;
      cfg.Br = sh.Br, cfg.Bc = sh.Bc, cfg.persistent_blocks = 3;
      const fa::AttnProblem p = fa::make_problem(2, 4, 2, 1000, 300, d, true);
      const fa05::Plan pl = fa05::plan("v10", p, fa::DType::bf16, cfg);
      CHECK(pl.runs == "v10");
      CHECK(pl.note.empty());
      CHECK(pl.persistent_blocks == 3);
      CHECK(pl.workspace_bytes == 4);  // the tile counter
      fa05::Config uncapped = cfg;
      uncapped.persistent_blocks = 0;
      const fa05::Plan v8 = fa05::plan("v8", p, fa::DType::bf16, uncapped);
      const fa05::Plan v9 = fa05::plan("v9", p, fa::DType::bf16, uncapped);
      CHECK(pl.threads == v9.threads);
      CHECK(pl.blocks == v9.blocks);  // the tiles; the launch runs fewer blocks
      CHECK(pl.smem_bytes == v9.smem_bytes + sh.Br * (d + 8) * 2);  // a second Q_i tile, as v8
      if (d == 128) CHECK(pl.smem_bytes == v8.smem_bytes);
      CHECK(v9.workspace_bytes == 0);
      CHECK(pl.smem_bytes <= fa05::kMaxSmemSm90);
      fa05::Config ampere = cfg;
      ampere.sm = 80;
      const fa05::Plan fb = fa05::plan("v10", p, fa::DType::bf16, ampere);
      CHECK(fb.runs == "v5");
      CHECK(fb.Br == sh.Br);
      CHECK(fb.Bc == sh.Bc);
      CHECK(fb.persistent_blocks == 0);
      CHECK(fb.workspace_bytes == 0);
      CHECK(fb.note.find("v10 runs on sm_90 only") != std::string::npos);
      CHECK(fb.note.find("--persistent-blocks does not apply") != std::string::npos);
    }
    // Shapes v9 has and v10 does not are refused, naming v10's.
    fa05::Config one_wg = hopper;
    one_wg.Br = 64, one_wg.Bc = 128;
    CHECK_THROWS_WITH_AS(fa05::plan("v10", fa::make_problem(1, 2, 2, 500, 500, d, false), fa::DType::bf16, one_wg),
                         doctest::Contains("128x64, 128x128"), fa05::Unsupported);
    const fa05::Plan def = fa05::plan("v10", fa::make_problem(1, 2, 2, 500, 500, d, false), fa::DType::bf16, hopper);
    CHECK(def.Br == fa05::default_shape("v9", d).Br);
    CHECK(def.Bc == fa05::default_shape("v9", d).Bc);
    CHECK(def.persistent_blocks == 0);
  }
  // d = 64: v9, at v10's shapes (v9's too), a cap ignored and said so; off sm_90 v5
  for (const fa05::BlockShape& sh : fa05::block_shapes("v10", 64)) {
    fa05::Config capped = hopper;
    capped.Br = sh.Br, capped.Bc = sh.Bc, capped.persistent_blocks = 4;
    const fa::AttnProblem p64 = fa::make_problem(1, 2, 2, 500, 500, 64, false);
    const fa05::Plan d64 = fa05::plan("v10", p64, fa::DType::bf16, capped);
    CHECK(d64.runs == "v9");
    CHECK(d64.note.find("d = 128 only") != std::string::npos);
    CHECK(d64.note.find("--persistent-blocks does not apply") != std::string::npos);
    CHECK(d64.persistent_blocks == 0);
    CHECK(d64.workspace_bytes == 0);
    fa05::Config v9cfg = capped;
    v9cfg.persistent_blocks = 0;
    CHECK(d64.smem_bytes == fa05::plan("v9", p64, fa::DType::bf16, v9cfg).smem_bytes);
    fa05::Config ampere = capped;
    ampere.sm = 80;
    CHECK(fa05::plan("v10", p64, fa::DType::bf16, ampere).runs == "v5");
  }
  CHECK(fa05::plan("v10", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::fp32, hopper).runs == "v1");
  CHECK(fa05::plan("v10", fa::make_problem(1, 1, 1, 64, 64, 160, false), fa::DType::bf16, hopper).runs == "v1");
}

// `kernel` launches as `ref` does (shapes, blocks, shared memory, tile counter, grid cap) with
// `extra` more threads where it runs itself (d = 128); at d = 64 both run v9 and say why; off
// sm_90 it runs v5, with no workspace; fp32 runs v1.
void check_plans_as(const std::string& kernel, const std::string& ref, int64_t extra) {
  fa05::Config hopper;
  hopper.sm = 90;
  for (int64_t d : {64, 128}) {
    CHECK(fa05::block_shapes(kernel, d).size() == fa05::block_shapes(ref, d).size());
    CHECK(fa05::default_shape(kernel, d).Br == fa05::default_shape(ref, d).Br);
    CHECK(fa05::default_shape(kernel, d).Bc == fa05::default_shape(ref, d).Bc);
    for (const fa05::BlockShape& sh : fa05::block_shapes(kernel, d))
      for (int64_t cap : {0, 3}) {
        INFO(kernel << " against " << ref << ", d " << d << " shape " << sh.Br << "x" << sh.Bc << " cap " << cap);
        fa05::Config cfg = hopper;
        cfg.Br = sh.Br, cfg.Bc = sh.Bc, cfg.persistent_blocks = cap;
        const fa::AttnProblem p = fa::make_problem(2, 4, 2, 1000, 300, d, true);
        const fa05::Plan k = fa05::plan(kernel, p, fa::DType::bf16, cfg);
        const fa05::Plan r = fa05::plan(ref, p, fa::DType::bf16, cfg);
        CHECK(k.runs == (d == 128 ? kernel : "v9"));
        CHECK((r.runs == "v9") == (k.runs == "v9"));
        CHECK(k.Br == r.Br);
        CHECK(k.Bc == r.Bc);
        CHECK(k.threads == r.threads + (d == 128 ? extra : 0));
        CHECK(k.blocks == r.blocks);
        CHECK(k.smem_bytes == r.smem_bytes);
        CHECK(k.workspace_bytes == r.workspace_bytes);
        CHECK(k.persistent_blocks == r.persistent_blocks);
        if (d == 128) CHECK(k.note.empty());
        if (d == 64) CHECK(k.note.find(kernel + " runs d = 128 only") != std::string::npos);
        fa05::Config ampere = cfg;
        ampere.sm = 80;
        const fa05::Plan fb = fa05::plan(kernel, p, fa::DType::bf16, ampere);
        CHECK(fb.runs == "v5");
        CHECK(fb.threads == r.threads);
        CHECK(fb.workspace_bytes == 0);
        CHECK(fb.note.find(kernel + " runs on sm_90 only") != std::string::npos);
      }
  }
  CHECK(fa05::plan(kernel, fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::fp32, hopper).runs == "v1");
}

// v11 changes only how O leaves a tile (through the Q buffer it already has): every launch number
// is v10's, and so are its fallbacks.
TEST_CASE("05 plan: v11 launches exactly as v10 (shapes, blocks, shared memory, counter, grid cap); d = 64: v9; off sm_90: v5") {
  check_plans_as("v11", "v10", 0);
  fa05::Config capped;
  capped.sm = 90, capped.persistent_blocks = 2;
  CHECK_THROWS_WITH_AS(fa05::plan("v9", fa::make_problem(1, 2, 2, 500, 500, 128, false), fa::DType::bf16, capped),
                       doctest::Contains("only with v8, v10, v11, v12 or v13"), fa05::Unsupported);
}

// v12 keeps v11's tile, shapes and shared memory (its barriers are static shared memory, on top);
// it launches a producer warpgroup, 128 threads, beyond v11's compute warps. Its fallbacks are v11's.
TEST_CASE("05 plan: v12 launches as v11 plus a producer warpgroup (128 threads); d = 64: v9; off sm_90: v5") {
  check_plans_as("v12", "v11", 128);
}

// v13 serves every d <= 256 from six native widths: d itself where it is one, else the next one up;
// rows of d columns where d is a multiple of 8 (TMA fills the rest of a box with zeros), else
// zero-padded copies d rounded up to 8 wide. Shared memory: two K, two V buffers and one or two Q
// tiles of the width rounded up to 64 columns.
TEST_CASE("05 plan: v13 runs every head dim at the next native width, padding only where TMA cannot") {
  fa05::Config hopper;
  hopper.sm = 90;
  const int64_t B = 2, H = 4, H_kv = 2, N_q = 300, N_k = 200;
  for (int64_t d = 1; d <= 256; ++d) {
    INFO("d " << d);
    const fa05::Plan pl = fa05::plan("v13", fa::make_problem(B, H, H_kv, N_q, N_k, d, true), fa::DType::bf16, hopper);
    REQUIRE(pl.runs == "v13");
    int64_t D = 0;  // the next native width, by the rule
    for (int64_t w : {32, 64, 96, 128, 192, 256})
      if (D == 0 && w >= d) D = w;
    CHECK(pl.d_kernel == D);
    const int64_t d8 = (d + 7) / 8 * 8;
    CHECK(pl.d_buffers == d8);
    CHECK(pl.padded_copies == (d % 8 != 0));
    CHECK(pl.threads == 256 + 128);
    CHECK(pl.Br == 128);
    CHECK(pl.Bc == (D <= 128 ? 128 : 64));
    const int64_t slab = (D + 63) / 64 * 64, q_tiles = (4 * pl.Bc + 2 * 128) * slab * 2 + 1024 <= fa05::kMaxSmemSm90 ? 2 : 1;
    CHECK(pl.smem_bytes == (4 * pl.Bc + q_tiles * 128) * slab * 2 + 1024);
    CHECK(pl.smem_bytes <= fa05::kMaxSmemSm90);
    CHECK(q_tiles == (D == 256 ? 1 : 2));  // two Q tiles fit everywhere but at d = 256
    const int64_t copies = d % 8 != 0 ? (2 * B * H * N_q + 2 * B * H_kv * N_k) * d8 * 2 : 0;
    CHECK(pl.workspace_bytes == int64_t(sizeof(unsigned)) + copies);
    CHECK((pl.note.empty()) == (D == d));
  }
  // v12 past d = 128 runs v13, and says so; off sm_90, v13 runs v5 (whose widths reach 256 too).
  const fa05::Plan big = fa05::plan("v12", fa::make_problem(1, 2, 2, 100, 100, 256, false), fa::DType::fp16, hopper);
  CHECK(big.runs == "v13");
  CHECK(big.note.find("ran v13") != std::string::npos);
  fa05::Config ampere;
  ampere.sm = 80, ampere.smem_optin = 166912;
  for (int64_t d : {32, 96, 200, 256}) {
    const fa05::Plan fb = fa05::plan("v13", fa::make_problem(1, 2, 2, 100, 100, d, false), fa::DType::bf16, ampere);
    CHECK(fb.runs == "v5");
    CHECK(fb.d_kernel >= d);
    CHECK(fb.smem_bytes <= 166912);
  }
  CHECK(fa05::plan("v13", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::fp32, hopper).runs == "v1");
  // Its shapes: 128 x 64 and 128 x 128 up to d = 128, 192 x 128 (three consumer warpgroups) up
  // to 64; above 128, where 128 keys' K and V rings do not fit, 128 x 64 and 128 x
  // 80. Each plans its threads (a warp per 16 rows and the producer warpgroup) and its shared
  // memory (two K, two V buffers, one or two Q tiles) within the limit.
  const auto count = [](int64_t d) { return fa05::block_shapes("v13", d).size(); };
  CHECK(count(32) == 3);
  CHECK(count(64) == 3);
  CHECK(count(96) == 2);
  CHECK(count(128) == 2);
  CHECK(count(192) == 2);
  CHECK(count(256) == 2);
  for (int64_t D : {32, 64, 96, 128, 192, 256})
    for (const fa05::BlockShape& sh : fa05::block_shapes("v13", D)) {
      INFO("d " << D << ", " << sh.Br << "x" << sh.Bc);
      fa05::Config c = hopper;
      c.Br = sh.Br, c.Bc = sh.Bc;
      const fa05::Plan pl = fa05::plan("v13", fa::make_problem(1, 2, 1, 1000, 300, D, true), fa::DType::bf16, c);
      CHECK(pl.runs == "v13");
      CHECK(pl.Br == sh.Br);
      CHECK(pl.Bc == sh.Bc);
      CHECK(pl.threads == 2 * sh.Br + 128);
      const int64_t slab = (D + 63) / 64 * 64;
      const int64_t q_tiles = (4 * sh.Bc + 2 * sh.Br) * slab * 2 + 1024 <= fa05::kMaxSmemSm90 ? 2 : 1;
      CHECK(pl.smem_bytes == (4 * sh.Bc + q_tiles * sh.Br) * slab * 2 + 1024);
      CHECK(pl.smem_bytes <= fa05::kMaxSmemSm90);
      // Off sm_90 v5 stands in with its own shapes: a v13 shape it lacks is refused, not launched.
      fa05::Config off = c;
      off.sm = 80;
      if (sh.Br > 128 || sh.Bc == 80)
        CHECK_THROWS_WITH_AS(fa05::plan("v13", fa::make_problem(1, 2, 1, 100, 100, D, false), fa::DType::bf16, off),
                             doctest::Contains("--block-q/--block-k"), fa05::Unsupported);
    }
  // The default follows the sweep (lab notebook, v13): the larger blocks only on long sequences,
  // exactly from the thresholds; off sm_90 the same problems run v5 at its own default.
  const auto shape_for = [&](int64_t d, int64_t N_q, int64_t N_k, const fa05::Config& c) {
    const fa05::Plan pl = fa05::plan("v13", fa::make_problem(1, 2, 1, N_q, N_k, d, true), fa::DType::bf16, c);
    return std::to_string(pl.Br) + "x" + std::to_string(pl.Bc) + " " + pl.runs;
  };
  for (int64_t d : {8, 32, 40, 64}) {
    CHECK(shape_for(d, 2048, 64, hopper) == "192x128 v13");
    CHECK(shape_for(d, 2047, 100000, hopper) == "128x128 v13");
    CHECK(shape_for(d, 4096, 4096, ampere) == "128x128 v5");
  }
  for (int64_t d : {72, 96, 128}) CHECK(shape_for(d, 16384, 16384, hopper) == "128x128 v13");
  for (int64_t d : {136, 192, 200, 256}) {
    CHECK(shape_for(d, 64, 8192, hopper) == "128x80 v13");
    CHECK(shape_for(d, 100000, 8191, hopper) == "128x64 v13");
    CHECK(shape_for(d, 8192, 8192, ampere) == "64x32 v5");
  }
  // One side asked for: the other from the default where that pair is compiled, else from the
  // short-sequence default (192 x 64 does not exist: --block-k 64 alone at a long d = 64 runs 128 x 64).
  fa05::Config bc64 = hopper, br128 = hopper, bc128 = hopper;
  bc64.Bc = 64, br128.Br = 128, bc128.Bc = 128;
  CHECK(shape_for(64, 4096, 4096, bc64) == "128x64 v13");
  CHECK(shape_for(64, 4096, 4096, br128) == "128x128 v13");
  CHECK(shape_for(64, 4096, 4096, bc128) == "192x128 v13");
  CHECK(shape_for(256, 8192, 8192, br128) == "128x80 v13");
  CHECK(shape_for(256, 8192, 8192, bc64) == "128x64 v13");
  fa05::Config wide = hopper;
  wide.Br = 128, wide.Bc = 128;
  CHECK_THROWS_WITH_AS(fa05::plan("v13", fa::make_problem(1, 1, 1, 64, 64, 192, false), fa::DType::bf16, wide),
                       doctest::Contains("--block-q/--block-k"), fa05::Unsupported);
}

// "auto" (the list of head dims): a tensor-core kernel in fp16 and bf16 on sm_90 (v13) and
// on sm_80 (v5), at the next width of the kernel that runs; v1 in fp32; the note names the choice.
TEST_CASE("05 plan: auto runs tensor cores at every head dim in fp16/bf16, on sm_90 and sm_80") {
  for (int sm : {90, 80})
    for (fa::DType t : {fa::DType::fp16, fa::DType::bf16})
      for (int64_t d : {1, 8, 16, 32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256}) {
        INFO("sm " << sm << " " << fa::dtype_name(t) << " d " << d);
        fa05::Config cfg;
        cfg.sm = sm, cfg.smem_optin = sm == 90 ? fa05::kMaxSmemSm90 : 166912;
        const fa::AttnProblem p = fa::make_problem(2, 8, 2, 257, 1000, d, true);
        const fa05::Plan pl = fa05::plan("auto", p, t, cfg);
        CHECK(fa05::kernel_info(pl.runs).tensor_cores);
        CHECK(pl.runs == fa05::auto_kernel(p, t, cfg).kernel);
        CHECK(pl.runs == (sm == 90 ? "v13" : "v5"));
        CHECK(pl.d_kernel >= d);
        CHECK(pl.smem_bytes <= cfg.smem_optin);
        CHECK(pl.note.rfind("auto: " + pl.runs, 0) == 0);
        // the same plan as asking for that kernel by name, but for the note
        const fa05::Plan named = fa05::plan(pl.runs, p, t, cfg);
        CHECK(named.d_kernel == pl.d_kernel);
        CHECK(named.Br == pl.Br);
        CHECK(named.Bc == pl.Bc);
        CHECK(named.workspace_bytes == pl.workspace_bytes);
      }
  fa05::Config hopper;
  hopper.sm = 90;
  CHECK(fa05::plan("auto", fa::make_problem(1, 1, 1, 64, 64, 64, false), fa::DType::fp32, hopper).runs == "v1");
  CHECK_THROWS_WITH_AS(fa05::plan("auto", fa::make_problem(1, 1, 1, 64, 64, 257, false), fa::DType::bf16, hopper),
                       doctest::Contains("kernel auto (v13 here)"), fa05::Unsupported);
  // No knob with auto, on every GPU alike (what it would mean depends on what auto picks).
  for (int sm : {90, 80}) {
    fa05::Config knob;
    knob.sm = sm, knob.persistent_blocks = 4;
    CHECK_THROWS_WITH_AS(fa05::plan("auto", fa::make_problem(1, 2, 2, 100, 100, 64, false), fa::DType::bf16, knob),
                         doctest::Contains("--persistent-blocks"), fa05::Unsupported);
    knob.persistent_blocks = 0, knob.Bc = 64;
    CHECK_THROWS_WITH_AS(fa05::plan("auto", fa::make_problem(1, 2, 2, 100, 100, 64, false), fa::DType::bf16, knob),
                         doctest::Contains("--block-q/--block-k"), fa05::Unsupported);
  }
  // v12 and v13 address rows and (batch, head) slices with TMA's 32-bit coordinates: refused past
  // them (d = 128: v12 runs itself; v13 at d = 8 too, where nothing is padded).
  CHECK_THROWS_WITH_AS(fa05::plan("v13", fa::make_problem(1, 1, 1, 16, int64_t(1) << 31, 8, false), fa::DType::bf16, hopper),
                       doctest::Contains("--seq-k"), fa05::Unsupported);
  for (const char* k : {"v12", "v13"}) {
    CHECK_THROWS_WITH_AS(fa05::plan(k, fa::make_problem(1, 1, 1, 16, int64_t(1) << 31, 128, false), fa::DType::bf16, hopper),
                         doctest::Contains("--seq-k"), fa05::Unsupported);
    CHECK_THROWS_WITH_AS(fa05::plan(k, fa::make_problem(1, 1, 1, int64_t(1) << 31, 16, 128, false), fa::DType::bf16, hopper),
                         doctest::Contains("--seq-q"), fa05::Unsupported);
    CHECK_NOTHROW(fa05::plan(k, fa::make_problem(1, 1, 1, 16, (int64_t(1) << 31) - 1 - 128, 128, false), fa::DType::bf16, hopper));
  }
  // A knob kept is not reported as dropped; one dropped is.
  fa05::Config capped = hopper;
  capped.persistent_blocks = 4;
  const fa05::Plan wide = fa05::plan("v12", fa::make_problem(1, 2, 2, 100, 100, 192, false), fa::DType::bf16, capped);
  CHECK(wide.runs == "v13");
  CHECK(wide.persistent_blocks == 4);
  CHECK(wide.note.find("does not apply") == std::string::npos);
  CHECK(fa05::plan("v13", fa::make_problem(1, 2, 2, 100, 100, 64, false), fa::DType::fp32, capped).note.find(
            "--persistent-blocks does not apply to v1") != std::string::npos);
}

TEST_CASE("05 plan: v14 packs a kv head's query heads into 16-row tiles and splits the keys to fill the SMs") {
  fa05::Config h200;
  h200.sm = 90, h200.sm_count = 132;
  // The decode shapes: B = 8, H = 32, H_kv = 8, N_k = 32768 (64 units on 132 SMs: split);
  // B = 64, H = H_kv = 32, N_k = 4096 (2048 units: no split, no workspace).
  for (int64_t d : {64, 128, 256}) {
    INFO("d " << d);
    const fa05::Plan few = fa05::plan("v14", fa::make_problem(8, 32, 8, 1, 32768, d, false), fa::DType::bf16, h200);
    CHECK(few.runs == "v14");
    CHECK(few.row_tiles == 1);  // 4 query heads x 1 row: one 16-row tile
    CHECK(few.splits > 1);
    CHECK(few.blocks == 8 * 8 * few.splits);
    CHECK(few.blocks >= 0.85 * 132);  // (nearly) every SM streams K/V: one block per SM at d = 256
    CHECK(few.keys_per_split % 64 == 0);
    CHECK(few.splits * few.keys_per_split >= 32768);           // every key in a split
    CHECK((few.splits - 1) * few.keys_per_split < 32768);      // and no split empty
    CHECK(few.workspace_bytes == few.splits * 8 * 32 * 1 * (d + 1) * 4);
    const fa05::Plan many = fa05::plan("v14", fa::make_problem(64, 32, 32, 1, 4096, d, false), fa::DType::bf16, h200);
    CHECK(many.splits == 1);
    CHECK(many.workspace_bytes == 0);
    CHECK(many.blocks == 64 * 32);
  }
  // Rows: (H / H_kv) N_q packed rows per kv head, in tiles of 16; N_q = 5 with 8 heads per kv head: 40 rows, 3 tiles.
  const fa05::Plan rows = fa05::plan("v14", fa::make_problem(1, 16, 2, 5, 1000, 128, true), fa::DType::fp16, h200);
  CHECK(rows.row_tiles == 3);
  CHECK(rows.blocks == 2 * 3 * rows.splits);
  // The split count's two regimes (split_kv_plan): one wave of one block per SM where that keeps
  // 85 % of the SMs busy (units 8: 132 / 8 = 16 splits; MQA's 2 row tiles: 66 asked, 2048 tiles cut
  // into 32 a split, so 64; 64 units: 2), else
  // the fewest splits within 85 % of the best wave efficiency over two resident blocks an SM (72
  // units, 264 slots: 7 splits fill 504 of 528, 95 %; 3 fill 216 of 264, 82 %).
  CHECK(fa05::plan("v14", fa::make_problem(1, 32, 8, 1, 131072, 128, false), fa::DType::bf16, h200).splits == 16);
  CHECK(fa05::plan("v14", fa::make_problem(1, 32, 1, 1, 131072, 128, false), fa::DType::bf16, h200).splits == 64);
  CHECK(fa05::plan("v14", fa::make_problem(8, 32, 8, 1, 32768, 128, false), fa::DType::bf16, h200).splits == 2);
  CHECK(fa05::plan("v14", fa::make_problem(9, 32, 8, 1, 32768, 128, false), fa::DType::bf16, h200).splits == 7);
  // More SMs, more splits (the split count follows the GPU); at most one per 4 tiles of keys.
  fa05::Config big = h200;
  big.sm_count = 264;
  const fa::AttnProblem dec = fa::make_problem(2, 8, 8, 1, 65536, 128, false);
  CHECK(fa05::plan("v14", dec, fa::DType::bf16, big).splits > fa05::plan("v14", dec, fa::DType::bf16, h200).splits);
  CHECK(fa05::plan("v14", fa::make_problem(1, 1, 1, 1, 1000, 64, false), fa::DType::bf16, h200).splits <= 16 / 4);  // 16 tiles
  // --splits: taken by v14, refused past one split per tile, by the other kernels and by auto.
  fa05::Config forced = h200;
  forced.splits = 7;
  const fa05::Plan seven = fa05::plan("v14", fa::make_problem(1, 4, 1, 1, 7 * 64, 64, false), fa::DType::bf16, forced);
  CHECK(seven.splits == 7);
  CHECK(seven.keys_per_split == 64);
  forced.splits = 8;
  CHECK_THROWS_WITH_AS(fa05::plan("v14", fa::make_problem(1, 4, 1, 1, 7 * 64, 64, false), fa::DType::bf16, forced),
                       doctest::Contains("--splits"), fa05::Unsupported);
  for (const char* k : {"v5", "v13", "auto"})
    CHECK_THROWS_WITH_AS(fa05::plan(k, fa::make_problem(1, 4, 1, 1, 7 * 64, 64, false), fa::DType::bf16, forced),
                         doctest::Contains("--splits"), fa05::Unsupported);
  // Every head dim on tensor cores, on sm_90 and sm_80 (mma.sync: no wgmma needed); d not a
  // multiple of 8 on padded copies, the others read in place with zero-filled columns.
  for (int sm : {90, 80})
    for (int64_t d : {1, 8, 16, 32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256}) {
      INFO("sm " << sm << " d " << d);
      fa05::Config cfg = h200;
      cfg.sm = sm, cfg.smem_optin = sm == 90 ? fa05::kMaxSmemSm90 : 166912;
      const fa05::Plan pl = fa05::plan("v14", fa::make_problem(2, 8, 2, 1, 5000, d, false), fa::DType::bf16, cfg);
      CHECK(pl.runs == "v14");
      CHECK(pl.d_kernel >= d);
      CHECK(pl.smem_bytes <= cfg.smem_optin);
      CHECK(pl.padded_copies == (d % 8 != 0));
      // auto takes v14 for decode on Hopper (the crossover measured there), a prefill kernel else
      CHECK(fa05::plan("auto", fa::make_problem(2, 8, 2, 1, 5000, d, true), fa::DType::bf16, cfg).runs == (sm == 90 ? "v14" : "v5"));
    }
  CHECK(fa05::plan("v14", fa::make_problem(1, 1, 1, 1, 100, 64, false), fa::DType::fp32, h200).runs == "v1");
}

// auto's decode rule (runner.cu, auto_kernel(); the crossover in the lab notebook): v14 while the
// packed rows of a kv head fit two 16-row tiles, or v13's B H blocks do not fill the SMs.
TEST_CASE("05 auto: v14 for decode where it won on the H200, v13 past the crossover") {
  fa05::Config h200;
  h200.sm = 90, h200.sm_count = 132;
  const auto runs = [&](int64_t B, int64_t H, int64_t H_kv, int64_t N_q) {
    return fa05::plan("auto", fa::make_problem(B, H, H_kv, N_q, 8192, 128, false), fa::DType::bf16, h200).runs;
  };
  CHECK(runs(8, 32, 8, 1) == "v14");    // 4 packed rows
  CHECK(runs(16, 32, 8, 8) == "v14");   // 32 packed rows: v14 1.24x v13
  CHECK(runs(16, 32, 8, 16) == "v13");  // 64 packed rows, 512 v13 blocks: v13 won
  CHECK(runs(1, 32, 8, 16) == "v14");   // 64 packed rows, but 32 v13 blocks on 132 SMs
  CHECK(runs(1, 32, 1, 16) == "v14");   // MQA: 512 packed rows, 32 v13 blocks
  CHECK(runs(64, 32, 32, 16) == "v14"); // MHA: 16 packed rows
  CHECK(runs(4, 32, 8, 17) == "v13");   // past decode's N_q
  CHECK(runs(1, 8, 8, 1024) == "v13");  // prefill
  h200.sm_count = 16;                   // fewer SMs: v13's 32 blocks fill them
  CHECK(runs(1, 32, 8, 16) == "v13");
  CHECK(fa05::auto_kernel(fa::make_problem(8, 32, 8, 1, 8192, 128, false), fa::DType::bf16, h200).why.find("decode") != std::string::npos);
}

TEST_CASE("05 plan: the cuBLAS baseline's workspace is S (float32) and P (in 16 bits)") {
  const fa::AttnProblem p = fa::make_problem(2, 8, 2, 300, 500, 64, true);
  const int64_t nxn = 2 * 8 * 300 * 500;
  CHECK(fa05::plan("cublas", p, fa::DType::fp32).workspace_bytes == 4 * nxn);  // P overwrites S
  CHECK(fa05::plan("cublas", p, fa::DType::bf16).workspace_bytes == 6 * nxn);
  CHECK(fa05::plan("cublas", p, fa::DType::fp16).workspace_bytes == 6 * nxn);
  CHECK(fa05::plan("cublas", p, fa::DType::bf16).blocks == 2 * 8 * 300);  // one per row of S
}

TEST_CASE("05 C ABI: kernels listed; bad arguments answered with a status, no GPU touched") {
  REQUIRE(fa05_kernel_count() == int(fa05::kernels().size()));
  CHECK(std::string(fa05_kernel_name(0)) == "v1");
  CHECK(std::string(fa05_kernel_name(1)) == "v2");
  CHECK(fa05_kernel_name(fa05_kernel_count()) == nullptr);
  CHECK(fa05_kernel_idea(-1) == nullptr);
  float dummy = 0;
  void* x = &dummy;  // never dereferenced: every call below fails its checks first
  CHECK(fa05_forward("v1", nullptr, x, x, x, &dummy, 1, 1, 1, 8, 8, 64, FA05_FP32, 0, 0.f, nullptr) ==
        FA05_INVALID_ARGUMENT);
  CHECK(std::string(fa05_last_error()).find("NULL") != std::string::npos);
  CHECK(fa05_forward(nullptr, x, x, x, x, &dummy, 1, 1, 1, 8, 8, 64, FA05_FP32, 0, 0.f, nullptr) ==
        FA05_INVALID_ARGUMENT);
  CHECK(fa05_forward("v1", x, x, x, x, &dummy, 1, 1, 1, 8, 8, 64, 7, 0, 0.f, nullptr) == FA05_INVALID_ARGUMENT);
  CHECK(std::string(fa05_last_error()).find("dtype") != std::string::npos);
  CHECK(fa05_forward("v1", x, x, x, x, &dummy, 1, 1, 1, 8, 8, 64, FA05_FP32, 0, -1.f, nullptr) ==
        FA05_INVALID_ARGUMENT);
  CHECK(fa05_forward("v1", x, x, x, x, &dummy, 1, 1, 1, 8, 8, 64, FA05_FP32, 0, NAN, nullptr) ==
        FA05_INVALID_ARGUMENT);
  CHECK(fa05_forward("v1", x, x, x, x, &dummy, 1, 1, 1, 8, 8, 64, FA05_FP32, 0, -0.f, nullptr) ==
        FA05_INVALID_ARGUMENT);
  // Alignment is checked before any CUDA call: element size for every kernel, 16 bytes for v2.
  alignas(16) static unsigned char mem[256];
  void* a16 = mem;
  void* a2 = mem + 2;
  float* lse = reinterpret_cast<float*>(mem + 128);
  CHECK(fa05_forward("v2", a2, a16, a16, a16, lse, 1, 1, 1, 8, 8, 64, FA05_FP16, 0, 0.f, nullptr) ==
        FA05_UNSUPPORTED);
  CHECK(std::string(fa05_last_error()).find("16-byte") != std::string::npos);
  CHECK(fa05_forward("v1", mem + 1, a16, a16, a16, lse, 1, 1, 1, 8, 8, 64, FA05_FP16, 0, 0.f, nullptr) ==
        FA05_INVALID_ARGUMENT);
  CHECK(fa05_forward("v1", a16, a16, a16, a16, reinterpret_cast<float*>(mem + 2), 1, 1, 1, 8, 8, 64, FA05_FP16,
                     0, 0.f, nullptr) == FA05_INVALID_ARGUMENT);
  // A message is one line, whatever the caller passed.
  CHECK(fa05_runs("v1\nsecond line", 64, FA05_BF16) == nullptr);
  CHECK(std::string(fa05_last_error()).find('\n') == std::string::npos);
  CHECK(std::string(fa05_last_error()).find("\\x0a") != std::string::npos);
  CHECK(fa05_runs(std::string(100000, 'k').c_str(), 64, FA05_BF16) == nullptr);
  CHECK(std::string(fa05_last_error()).size() < 400);
  CHECK(fa05_forward("v1", x, x, x, x, &dummy, 0, 1, 1, 8, 8, 64, FA05_FP32, 0, 0.f, nullptr) ==
        FA05_INVALID_ARGUMENT);
  CHECK(fa05_forward("v1", x, x, x, x, &dummy, 1, 4, 3, 8, 8, 64, FA05_FP32, 0, 0.f, nullptr) ==
        FA05_INVALID_ARGUMENT);
  CHECK(fa05_forward("nope", x, x, x, x, &dummy, 1, 1, 1, 8, 8, 64, FA05_FP32, 0, 0.f, nullptr) ==
        FA05_INVALID_ARGUMENT);
  CHECK(fa05_forward("v1", x, x, x, x, &dummy, 1, 1, 1, 8, 8, 300, FA05_FP32, 0, 0.f, nullptr) ==
        FA05_UNSUPPORTED);
  CHECK(std::string(fa05_runs("v2", 64, FA05_BF16)) == "v2");
  CHECK(std::string(fa05_runs("v2", 160, FA05_BF16)) == "v1");
  CHECK(std::string(fa05_runs("v2", 80, FA05_BF16)) == "v2");  // on copies padded to 128
  CHECK(std::string(fa05_runs("v2", 64, FA05_FP32)) == "v1");
  CHECK(std::string(fa05_runs("cublas", 80, FA05_FP32)) == "cublas");
  CHECK(fa05_runs("v99", 64, FA05_BF16) == nullptr);
  CHECK(fa05_runs("v2", 0, FA05_BF16) == nullptr);
  int64_t bytes = -1;
  CHECK(fa05_workspace_bytes("cublas", 1, 2, 1, 10, 20, 8, FA05_BF16, 0, &bytes) == FA05_OK);
  CHECK(bytes == 6 * 2 * 10 * 20);
  CHECK(fa05_workspace_bytes("v1", 1, 2, 1, 10, 20, 8, FA05_BF16, 0, &bytes) == FA05_OK);
  CHECK(bytes == 0);
  CHECK(fa05_workspace_bytes("v1", 1, 2, 1, 10, 20, 8, FA05_BF16, 0, nullptr) == FA05_INVALID_ARGUMENT);
  // fa05_forward_variant: a window side below -1, a negative or NaN softcap, each named; a kernel
  // that takes no variant is refused as unsupported. All before the GPU (there is none here).
  const auto variant = [&](const char* k, int64_t left, int64_t right, float cap) {
    return fa05_forward_variant(k, a16, a16, a16, a16, lse, 1, 1, 1, 8, 8, 64, FA05_BF16, 0, 0.f, left, right, cap,
                                nullptr);
  };
  CHECK(variant("v1", -2, 4, 0.f) == FA05_INVALID_ARGUMENT);
  CHECK(std::string(fa05_last_error()).find("--window") != std::string::npos);
  CHECK(variant("v1", -1, -1, -1.f) == FA05_INVALID_ARGUMENT);
  CHECK(std::string(fa05_last_error()).find("--softcap") != std::string::npos);
  CHECK(variant("v1", -1, -1, NAN) == FA05_INVALID_ARGUMENT);
  CHECK(variant("v12", 16, 0, 0.f) == FA05_UNSUPPORTED);
  CHECK(std::string(fa05_last_error()).find("--window") != std::string::npos);
  CHECK(variant("cublas", -1, -1, 30.f) == FA05_UNSUPPORTED);
  CHECK(std::string(fa05_last_error()).find("--softcap") != std::string::npos);
  // fa05_forward_varlen: offsets pointers required; a kernel other than v13 / auto, or fp32, is
  // refused naming --cu-seqlens-q; a window side below -1 is named. All before the GPU.
  const int32_t* cu = reinterpret_cast<const int32_t*>(mem + 192);
  const auto varlen = [&](const char* k, const int32_t* cq, int dtype, int64_t left) {
    return fa05_forward_varlen(k, a16, a16, a16, a16, lse, cq, cu, 2, 10, 12, 6, 7, 2, 1, 64, dtype, 1, 0.f, left, -1,
                               0.f, nullptr);
  };
  CHECK(varlen("v13", nullptr, FA05_BF16, -1) == FA05_INVALID_ARGUMENT);
  CHECK(std::string(fa05_last_error()).find("cu_seqlens_q") != std::string::npos);
  CHECK(varlen("v12", cu, FA05_BF16, -1) == FA05_UNSUPPORTED);
  CHECK(std::string(fa05_last_error()).find("--cu-seqlens-q") != std::string::npos);
  CHECK(varlen("v13", cu, FA05_FP32, -1) == FA05_UNSUPPORTED);
  CHECK(std::string(fa05_last_error()).find("fp32") != std::string::npos);
  CHECK(varlen("v13", cu, FA05_BF16, -3) == FA05_INVALID_ARGUMENT);
  CHECK(std::string(fa05_last_error()).find("--window") != std::string::npos);
  // A longest sequence past the tokens, no tokens: named as the arguments they are.
  CHECK(fa05_forward_varlen("v13", a16, a16, a16, a16, lse, cu, cu, 2, 10, 12, 100, 7, 2, 1, 64, FA05_BF16, 1, 0.f, -1,
                            -1, 0.f, nullptr) == FA05_INVALID_ARGUMENT);
  CHECK(std::string(fa05_last_error()).find("max_seqlen_q") != std::string::npos);
  CHECK(fa05_forward_varlen("v13", a16, a16, a16, a16, lse, cu, cu, 2, -5, 12, 6, 7, 2, 1, 64, FA05_BF16, 1, 0.f, -1,
                            -1, 0.f, nullptr) == FA05_INVALID_ARGUMENT);
  CHECK(std::string(fa05_last_error()).find("total_q") != std::string::npos);
  // fa05_forward_fp8 and _e4m3 (v15): NULLs refused, d != 128 refused as unsupported naming
  // --head-dim, a bad scale named; all before the GPU.
  const float* sc = reinterpret_cast<const float*>(mem + 192);
  CHECK(fa05_forward_fp8(nullptr, a16, a16, a16, lse, 1, 2, 1, 8, 8, 128, 0, 0.f, nullptr) == FA05_INVALID_ARGUMENT);
  CHECK(fa05_forward_fp8(a16, a16, a16, a16, lse, 1, 2, 1, 8, 8, 64, 0, 0.f, nullptr) == FA05_UNSUPPORTED);
  CHECK(std::string(fa05_last_error()).find("--head-dim") != std::string::npos);
  CHECK(fa05_forward_fp8(a16, a16, a16, a16, lse, 1, 2, 1, 8, 8, 128, 0, -1.f, nullptr) == FA05_INVALID_ARGUMENT);
  CHECK(std::string(fa05_last_error()).find("scale") != std::string::npos);
  CHECK(fa05_forward_fp8_e4m3(a16, a16, a16, sc, nullptr, sc, a16, lse, 1, 2, 1, 8, 8, 128, 0, 0.f, nullptr) ==
        FA05_INVALID_ARGUMENT);
  CHECK(fa05_forward_fp8_e4m3(a16, a16, a16, sc, sc, sc, a16, lse, 1, 3, 2, 8, 8, 128, 0, 0.f, nullptr) ==
        FA05_INVALID_ARGUMENT);  // H % H_kv != 0
}

TEST_CASE("05 C ABI: libfa05.so exports fa05_* and nothing else") {
  const std::string path = FA05_LIB;
  int fa05 = 0;
  for (const std::string& sym : fa::test::defined_symbols(path)) {
    INFO("exported: " << sym);
    if (sym.rfind("fa05_", 0) == 0) ++fa05;
    else CHECK(false);
  }
  CHECK(fa05 == 13);  // the thirteen functions of fa05.h
}

TEST_CASE("05 dtypes: encode/decode round trips; rounding is to nearest even") {
  const float xs[] = {0.f, -0.f, 1.f, 1.0009765625f /* 1 + 2^-10 */, 3.14159265f, -2.5e-5f, 65504.f, 1e30f};
  for (fa::DType t : {fa::DType::fp32, fa::DType::fp16, fa::DType::bf16}) {
    uint16_t b16[8];
    float b32[8], back[8];
    void* buf = t == fa::DType::fp32 ? static_cast<void*>(b32) : static_cast<void*>(b16);
    fa::encode(t, xs, 8, buf);
    fa::decode(t, buf, 8, back);
    for (int i = 0; i < 8; ++i) {
      INFO(std::string(fa::dtype_name(t)) << " x = " << xs[i]);
      if (t == fa::DType::fp16 && xs[i] > 65504.f) {
        CHECK(std::isinf(back[i]));  // outside fp16: the adapter refuses such inputs
        continue;
      }
      CHECK(back[i] == fa::round_to(t, xs[i]));
      // Relative error u, or half the smallest fp16 subnormal (2^-25) where fp16 is subnormal.
      CHECK(std::fabs(back[i] - xs[i]) <= fa::dtype_unit_roundoff(t) * std::fabs(xs[i]) + (t == fa::DType::fp16 ? 0x1p-25 : 0.0));
    }
  }
  // Ties to even: 1 + 2^-11 lies halfway between two fp16 values and rounds to 1; 1 + 3 * 2^-11
  // lies halfway and rounds up to the even 1 + 2^-9.
  CHECK(fa::round_to(fa::DType::fp16, 1.f + 0x1p-11f) == 1.f);
  CHECK(fa::round_to(fa::DType::fp16, 1.f + 3 * 0x1p-11f) == 1.f + 0x1p-9f);
  CHECK(fa::round_to(fa::DType::bf16, 1.f + 0x1p-8f) == 1.f);
  CHECK_THROWS_WITH_AS(fa::parse_dtype("fp8"), doctest::Contains("--dtype"), fa::InputError);
}

TEST_CASE("battery's low-precision baseline: storing O (and P) in 16 bits, nothing else") {
  const fa::Inputs in = fa::random_inputs(fa::make_problem(1, 2, 1, 33, 47, 16, true), 4);
  fa::TensorD O, L, O32, L32, Ob, Lb, Obp, Lbp;
  fa::reference_forward(in.p, in.Q, in.K, in.V, O, L);
  fa::reference_forward_stored(in.p, in.Q, in.K, in.V, fa::DType::fp32, fa::DType::fp32, O32, L32);
  fa::reference_forward_stored(in.p, in.Q, in.K, in.V, fa::DType::fp32, fa::DType::bf16, Ob, Lb);
  fa::reference_forward_stored(in.p, in.Q, in.K, in.V, fa::DType::bf16, fa::DType::bf16, Obp, Lbp);
  const double u = fa::dtype_unit_roundoff(fa::DType::bf16);
  double e32 = 0, eb = 0, ebp = 0;
  for (int64_t i = 0; i < O.numel(); ++i) {
    e32 = std::max(e32, std::fabs(O32[i] - O[i]));
    CHECK(std::fabs(Ob[i] - O[i]) <= u * std::fabs(O[i]));  // O rounded once to bf16
    eb = std::max(eb, std::fabs(Ob[i] - O[i]));
    ebp = std::max(ebp, std::fabs(Obp[i] - O[i]));
    CHECK(Ob[i] == fa::round_to(fa::DType::bf16, O[i]));
  }
  CHECK(e32 < 1e-6);
  CHECK(eb > 0);
  CHECK(ebp > 0);
  for (int64_t i = 0; i < L.numel(); ++i) CHECK((L[i] == Lbp[i] || (std::isinf(L[i]) && std::isinf(Lbp[i]))));
}

TEST_CASE("05 program: without a GPU, one line and exit code 2; bad flags are named first") {
  std::string why;
  const bool gpu = fa::gpu_available(&why);
  const Result r = run("--seq-q 8 --heads 1 --head-dim 16");
  if (!gpu) {
    INFO("no GPU here (" << why << "): stderr was " << r.err);
    CHECK(r.code == 2);
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("GPU") != std::string::npos);
    CHECK(r.out.empty());
  } else {
    CHECK(r.code == 0);
  }
  // Checked before the GPU is needed, GPU or not:
  const std::pair<const char*, const char*> bad[] = {
      {"--kernel v99 --seq-q 8", "--kernel"},
      {"--dtype fp4 --seq-q 8", "--dtype"},  // (fp8 is v15's: its own test below)
      {"--head-dim 300 --seq-q 8", "--head-dim"},
      {"--seq-q 8 --heads 3 --kv-heads 2", "--kv-heads"},
      {"--sram-bytes 8 --seq-q 8", "--sram-bytes"},
      {"--block-q 0 --seq-q 8", "--block-q"},
      {"--block-q 4096 --block-k 4096 --seq-q 4096", "--sram-bytes/--block-q/--block-k"},  // plan()'s limit
      {"--kernel cublas --block-q 32 --seq-q 64", "--sram-bytes/--block-q/--block-k"},    // v1-only knob
      {"--kernel v2 --dtype bf16 --block-k 32 --seq-q 64", "--sram-bytes/--block-q/--block-k"},
      {"--kernel v5 --dtype bf16 --block-q 96 --seq-q 64", "--block-q/--block-k"},  // not a compiled shape
      {"--kernel v5 --dtype bf16 --sram-bytes 65536 --seq-q 64", "--sram-bytes"},
      {"--kernel v6 --dtype bf16 --block-q 64 --block-k 64 --seq-q 64", "--block-q/--block-k"},  // v6: Br >= 128
  };
  for (auto [args, flag] : bad) {
    INFO(args);
    const Result b = run(args);
    CHECK(b.code == 2);
    CHECK(lines(b.err) == 1);
    CHECK(b.err.find(flag) != std::string::npos);
    CHECK(b.out.empty());
  }
  // No output file is left behind when the run cannot happen.
  const Result o = run(std::string("--seq-q 8 --head-dim 300 --out test_05_host_O.npy"));
  CHECK(o.code == 2);
  CHECK(!std::ifstream("test_05_host_O.npy").good());
}

// Issue 33: bad KV cache input is refused with one line naming the flag, before the GPU is needed
// (so on this machine too), and no output file is left behind.
TEST_CASE("05 program: bad KV cache input, one line naming the flag and exit code 2, GPU or not") {
  const std::string dir = "test_05_host_cache";
  std::filesystem::create_directories(dir);
  const auto i32 = [&](const std::string& name, const std::vector<int64_t>& shape, const std::vector<int32_t>& x) {
    fa::write_npy_i32(dir + "/" + name, shape, x, "test");
    return dir + "/" + name;
  };
  const std::string lens3 = i32("lens3.npy", {3}, {5, 6, 7});
  const std::string lens_2d = i32("lens_2d.npy", {2, 1}, {5, 6});
  const std::string t_rank1 = i32("t_rank1.npy", {4}, {0, 1, 2, 3});
  const std::string t_2x2 = i32("t_2x2.npy", {2, 2}, {0, 1, 2, -1});  // sequence 1's second page: -1
  fa::Tensor f32({2});
  fa::write_npy(dir + "/lens_f32.npy", f32, "test");
  const std::string shape = "--kernel v14 --batch 2 --seq-q 1 --seq-k 32 --head-dim 64";
  const std::pair<std::string, const char*> bad[] = {
      {shape + " --cache-lens 3", "--cache-lens: expected 2 lengths"},
      {shape + " --cache-lens 3,33", "--cache-lens: expected lengths 0 ... N_k = 32, found 33"},
      {shape + " --cache-lens 3,-1", "--cache-lens: expected lengths 0 ... N_k = 32, found -1"},
      {shape + " --cache-lens 3,x", "--cache-lens"},
      {shape + " --cache-lens 3,,4", "--cache-lens"},
      {shape + " --cache-lens 99999999999,1", "--cache-lens"},
      {shape + " --cache-lens " + lens3, "--cache-lens: expected 2 lengths"},
      {shape + " --cache-lens " + lens_2d, "--cache-lens"},
      {shape + " --cache-lens " + dir + "/lens_f32.npy", "int32"},
      {shape + " --cache-lens " + dir + "/none.npy", "--cache-lens"},
      {shape + " --page-size 8", "--page-size: expected 16 ... 256"},
      {shape + " --page-size 512", "--page-size: expected 16 ... 256"},
      {shape + " --block-table " + t_2x2, "--block-table"},  // no --page-size
      {"--kernel v14 --page-size 16 --block-table " + t_2x2, "--block-table: expected --q/--k/--v files"},
      {shape + " --page-size 16 --block-table " + t_rank1, "--block-table"},
      {shape + " --page-size 32 --block-table " + t_2x2, "--block-table: expected pages_per_seq * page size = N_k (32)"},
      {"--kernel v14 --batch 2 --seq-q 1 --head-dim 64 --page-size 16 --block-table " + t_2x2, "found -1 at [1, 1]"},
      {"--kernel v14 --batch 3 --seq-q 1 --head-dim 64 --page-size 16 --block-table " + t_2x2, "--block-table"},
  };
  for (const auto& [args, flag] : bad) {
    INFO(args);
    const Result b = run(args + " --out " + dir + "/O.npy");
    INFO("stderr: " << b.err);
    CHECK(b.code == 2);
    CHECK(lines(b.err) == 1);
    CHECK(b.err.find(flag) != std::string::npos);
    CHECK(b.out.empty());
    CHECK(!std::filesystem::exists(dir + "/O.npy"));
  }
  std::filesystem::remove_all(dir);
}

// Issue 34: v1, v13 and v14 take a sliding window and a softcap; auto runs one of them (v13 on
// Hopper in 16 bits, v14 for decode shapes and KV caches, v1 for fp32 and off Hopper); every other
// kernel refuses them, naming the flag, rather than computing full attention.
TEST_CASE("05 plan: a window or a softcap runs v1, v13 or v14; the other kernels refuse them") {
  fa::AttnProblem w = fa::make_problem(1, 2, 1, 64, 64, 64, true);
  w.window_left = 16;
  fa::AttnProblem c = fa::make_problem(1, 2, 1, 64, 64, 64, false);
  c.softcap = 30.f;
  fa05::Config hopper;
  hopper.sm = 90, hopper.sm_count = 132;
  for (const fa::AttnProblem& p : {w, c}) {
    const std::string flag = p.has_window() ? "--window" : "--softcap";
    INFO(flag);
    for (const char* k : {"v2", "v5", "v12", "cublas"})
      CHECK_THROWS_WITH_AS(fa05::plan(k, p, fa::DType::bf16, hopper), doctest::Contains(flag.c_str()), fa05::Unsupported);
    CHECK(fa05::plan("v1", p, fa::DType::bf16, hopper).runs == "v1");
    CHECK(fa05::plan("auto", p, fa::DType::fp32, hopper).runs == "v1");
    CHECK(fa05::plan("v13", p, fa::DType::bf16, hopper).runs == "v13");
    CHECK(fa05::plan("v14", p, fa::DType::bf16, hopper).runs == "v14");
    CHECK(fa05::plan("auto", p, fa::DType::bf16, hopper).runs == "v13");
    fa::AttnProblem decode = p;  // auto's v14 shape: one query row a sequence
    decode.N_q = 1, decode.N_k = 4096;
    CHECK(fa05::plan("auto", decode, fa::DType::bf16, hopper).runs == "v14");
    fa05::Config ampere;
    ampere.sm = 80;  // no wgmma: auto would run v5, which takes no variant, so v1 runs
    CHECK(fa05::plan("auto", p, fa::DType::bf16, ampere).runs == "v1");
    int32_t dummy = 0;
    const fa05::KvCache lens{&dummy, nullptr, 0, 0, 0};
    CHECK(fa05::plan("auto", decode, fa::DType::bf16, hopper, lens).runs == "v14");
  }
  // v14's splits cut the window's band, not the cache: w + N_q keys split as a cache of that length.
  fa::AttnProblem band = fa::make_problem(1, 8, 8, 1, 65536, 128, true);
  band.window_left = 1023;
  const fa::AttnProblem short_cache = fa::make_problem(1, 8, 8, 1, 1024, 128, true);
  CHECK(fa05::plan("v14", band, fa::DType::bf16, hopper).splits == fa05::plan("v14", short_cache, fa::DType::bf16, hopper).splits);
  CHECK(fa05::plan("v14", band, fa::DType::bf16, hopper).splits < fa05::plan("v14", fa::make_problem(1, 8, 8, 1, 65536, 128, true), fa::DType::bf16, hopper).splits);
}

// A packed batch (issue 34): what plan() takes and refuses (the GPU test runs it).
TEST_CASE("05 plan: a packed batch runs v13 in one launch; other kernels, fp32, no wgmma and a KV cache refuse it") {
  // 3 sequences, the longest of 300 queries and 500 keys; 600 queries and 900 keys in all.
  const fa::AttnProblem p = fa::make_problem(3, 8, 2, 300, 500, 128, true);
  int32_t dummy = 0;
  const fa05::Varlen packed{&dummy, &dummy, 600, 900};
  fa05::Config hopper;
  hopper.sm = 90, hopper.sm_count = 132;
  const fa05::Plan pl = fa05::plan("v13", p, fa::DType::bf16, hopper, {}, packed);
  CHECK(pl.runs == "v13");
  CHECK(pl.blocks == 3 * 8 * 3);  // the longest sequence's tiles: ceil(300 / 128) per (sequence, head)
  CHECK(fa05::plan("auto", p, fa::DType::fp16, hopper, {}, packed).runs == "v13");
  fa::AttnProblem decode = p;  // auto would pick v14 for one row a sequence, which reads no packed batch
  decode.N_q = 1;
  CHECK(fa05::plan("auto", decode, fa::DType::bf16, hopper, {}, packed).runs == "v13");
  for (const char* k : {"v1", "v2", "v12", "v14", "cublas"})
    CHECK_THROWS_WITH_AS(fa05::plan(k, p, fa::DType::bf16, hopper, {}, packed), doctest::Contains("--cu-seqlens-q"),
                         fa05::Unsupported);
  CHECK_THROWS_WITH_AS(fa05::plan("v13", p, fa::DType::fp32, hopper, {}, packed), doctest::Contains("fp32"), fa05::Unsupported);
  fa05::Config ampere;
  ampere.sm = 80;  // no wgmma: v13 would run v5
  CHECK_THROWS_WITH_AS(fa05::plan("auto", p, fa::DType::bf16, ampere, {}, packed), doctest::Contains("--cu-seqlens-q"),
                       fa05::Unsupported);
  const fa05::KvCache lens{&dummy, nullptr, 0, 0, 0};
  CHECK_THROWS_WITH_AS(fa05::plan("v13", p, fa::DType::bf16, hopper, lens, packed), doctest::Contains("KV cache"),
                       fa::InputError);
  const fa05::Varlen short_batch{&dummy, &dummy, 299, 900};  // fewer tokens than its longest sequence
  CHECK_THROWS_WITH_AS(fa05::plan("v13", p, fa::DType::bf16, hopper, {}, short_batch), doctest::Contains("--cu-seqlens-q/-k"),
                       fa::InputError);
  // The padded problem may pass validate()'s 2^40 where no sequence does (one sequence of 16384
  // tokens among 4999 of one: 5000 x 16384^2 padded scores): taken, its longest sequence checked.
  const fa::AttnProblem wide = fa::make_problem(5000, 1, 1, 16384, 16384, 8, true);
  const fa05::Varlen wide_batch{&dummy, &dummy, 16384 + 4999, 16384 + 4999};
  CHECK_THROWS(fa::validate(wide));
  CHECK(fa05::plan("v13", wide, fa::DType::bf16, hopper, {}, wide_batch).runs == "v13");
  // d = 60 runs on zero-padded copies of the packed tensors: total rows, not B N rows.
  const fa::AttnProblem p60 = fa::make_problem(3, 8, 2, 300, 500, 60, true);
  const fa05::Plan pad = fa05::plan("v13", p60, fa::DType::bf16, hopper, {}, packed);
  CHECK(pad.d_buffers == 64);
  CHECK(pad.workspace_bytes == int64_t(sizeof(unsigned)) + (2 * 600 * 8 + 2 * 900 * 2) * 64 * 2);
}

// A KV cache (issue 33): what plan() refuses (the GPU test runs what it takes).
TEST_CASE("05 KV cache: only v14 and auto take one; a paged cache needs d % 8 == 0 and pages that make N_k") {
  const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1, 256, 128, false);
  int32_t dummy = 0;
  const fa05::KvCache lens{&dummy, nullptr, 0, 0, 0}, paged{&dummy, &dummy, 64, 4, 8};
  CHECK(fa05::plan("auto", p, fa::DType::bf16, {}, lens).runs == "v14");
  CHECK_THROWS_WITH_AS(fa05::plan("v13", p, fa::DType::bf16, {}, lens), doctest::Contains("--cache-lens"), fa05::Unsupported);
  CHECK_THROWS_WITH_AS(fa05::plan("v14", p, fa::DType::fp32, {}, paged), doctest::Contains("--block-table"), fa05::Unsupported);
  fa05::KvCache bad = paged;
  bad.pages_per_seq = 3;
  CHECK_THROWS_WITH_AS(fa05::plan("v14", p, fa::DType::bf16, {}, bad), doctest::Contains("--block-table"), fa::InputError);
  bad = paged, bad.page_size = 8, bad.pages_per_seq = 32;
  CHECK_THROWS_WITH_AS(fa05::plan("v14", p, fa::DType::bf16, {}, bad), doctest::Contains("--page-size"), fa::InputError);
  CHECK_THROWS_WITH_AS(fa05::plan("v14", fa::make_problem(2, 8, 2, 1, 256, 60, false), fa::DType::bf16, {}, paged),
                       doctest::Contains("--head-dim"), fa05::Unsupported);
  CHECK(fa05::plan("v14", fa::make_problem(2, 8, 2, 1, 256, 60, false), fa::DType::bf16, {}, lens).runs == "v14");
}

TEST_CASE("05 plan: v15 (FP8) runs d = 128 on Hopper in 128 x 128 blocks, and refuses the rest naming the flag") {
  fa05::Config h;
  h.sm = 90, h.sm_count = 132;
  const fa::AttnProblem p = fa::make_problem(2, 8, 2, 1000, 3001, 128, true);
  const fa05::Fp8Plan pl = fa05::plan_fp8(p, h);
  CHECK(pl.runs == "v15");
  CHECK(pl.Br == 128);
  CHECK(pl.Bc == 128);
  CHECK(pl.threads == 384);
  CHECK(pl.tiles == 2 * 8 * 8);  // ceil(1000 / 128) = 8 query blocks per (b, h)
  CHECK(pl.blocks == 128);       // fewer tiles than SMs: one block each
  CHECK(pl.smem_bytes == 6 * 128 * 128 + 1024);
  CHECK(pl.N_k16 == 3008);
  CHECK(pl.workspace_bytes == 2 * 2 * 128 * 3008 + 16);  // V^T, then the tile counter
  CHECK(fa05::fp8_q_blocks(p) == 16);
  CHECK(fa05::fp8_kv_blocks(p) == 24);
  CHECK(fa05::fp8_workspace_bytes(p, h) == pl.workspace_bytes + p.q_elems() + 2 * p.kv_elems() + 4 * (16 * 16 + 2 * 4 * 24) + 64);
  int64_t abi_bytes = -1;  // the C ABI reports the same bytes fa05_forward_fp8 allocates
  CHECK(fa05_workspace_bytes("v15", 2, 8, 2, 1000, 3001, 128, FA05_BF16, 1, &abi_bytes) == FA05_OK);
  CHECK(abi_bytes == fa05::fp8_workspace_bytes(p, h));
  CHECK(fa05_workspace_bytes("v15", 2, 8, 2, 1000, 3001, 64, FA05_BF16, 1, &abi_bytes) == FA05_UNSUPPORTED);
  h.persistent_blocks = 5;
  CHECK(fa05::plan_fp8(p, h).blocks == 5);
  h.persistent_blocks = 0;
  CHECK(fa05::plan_fp8(fa::make_problem(1, 1, 1, 5, 1, 128, false), h).workspace_bytes == 2048 + 16);  // V^T: 16 keys x 128 dims
  const auto refused = [&](const fa::AttnProblem& q, const fa05::Config& c, const std::string& flag) {
    INFO(q.describe() << " flag " << flag);
    try {
      fa05::plan_fp8(q, c);
      FAIL("not refused");
    } catch (const fa05::Unsupported& e) {
      CHECK(std::string(e.what()).find(flag) != std::string::npos);
    }
  };
  refused(fa::make_problem(1, 2, 1, 64, 64, 64, false), h, "--head-dim");
  fa::AttnProblem w = fa::make_problem(1, 2, 1, 64, 64, 128, false);
  w.window_left = 16;
  refused(w, h, "--window");
  w = fa::make_problem(1, 2, 1, 64, 64, 128, false);
  w.softcap = 30.f;
  refused(w, h, "--softcap");
  fa05::Config a = h;
  a.sm = 80;
  refused(p, a, "--dtype");
  a = h;
  a.Br = 64;
  refused(p, a, "--block-q");
  CHECK_THROWS_AS(fa05::plan_fp8(fa::make_problem(1, 2, 3, 64, 64, 128, false), h), fa::InputError);  // H % H_kv
}

TEST_CASE("05 v15: V^T's key order is a permutation of each 16 that puts the S accumulator's keys where P V's A wants them") {
  // Thread t4 of a quad holds S's columns 8 n + 2 t4 and + 1 of each n8 tile n (mma's C layout);
  // the 8-bit A operand takes k = 4 t4 ... 4 t4 + 3 and 16 + 4 t4 ... of each 32 (ptx.cuh, "FP8").
  // v15's pack_p gives registers k = 4 t4 + i the scores of tiles 4 k' + 2 hi + i / 2, column
  // 2 t4 + i % 2: key 16 hi + 8 (i / 2) + 2 t4 + i % 2. V^T column k must hold that key.
  for (int c0 = 0; c0 < 128; c0 += 32)
    for (int hi = 0; hi < 2; ++hi)
      for (int t4 = 0; t4 < 4; ++t4)
        for (int i = 0; i < 4; ++i) {
          const int k = c0 + 16 * hi + 4 * t4 + i, key = c0 + 16 * hi + 8 * (i / 2) + 2 * t4 + i % 2;
          CHECK(fa05::vt_key(k) == key);
        }
  std::vector<int> seen(256, 0);
  for (int k = 0; k < 256; ++k) {
    CHECK(fa05::vt_key(k) / 16 == k / 16);  // within its group of 16: padding to 16 keeps every key
    ++seen[size_t(fa05::vt_key(k))];
  }
  for (int n : seen) CHECK(n == 1);
}

TEST_CASE("05 program: --dtype fp8 runs v15, and refuses what v15 does not take in one line, exit 2") {
  const auto refused = [](const std::string& args, const std::string& flag) {
    INFO(args);
    const Result r = run(args);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find(flag) != std::string::npos);
  };
  refused("--dtype fp8", "--head-dim");  // the embedded default input has d = 32
  refused("--dtype fp8 --head-dim 64 --seq-q 64 --seq-k 64", "--head-dim");
  refused("--dtype fp8 --head-dim 128 --seq-q 64 --seq-k 64 --kernel v13", "--kernel");
  refused("--dtype fp8 --head-dim 128 --seq-q 64 --seq-k 64 --window 8,0", "--window");
  refused("--dtype fp8 --head-dim 128 --seq-q 1 --seq-k 64 --cache-lens 3", "--dtype");
  refused("--kernel v15 --dtype bf16 --head-dim 128 --seq-q 64 --seq-k 64", "--kernel");
  if (fa::gpu_compute_capability() < 0) refused("--dtype fp8 --head-dim 128 --seq-q 64 --seq-k 64", "GPU");
}
