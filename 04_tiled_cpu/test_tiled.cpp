// Stage 04's tests: the conformance battery (against float64 and stage 01) at several block
// shapes, bit-identical results for 1, 2 and 4 threads, the counted memory traffic against the
// formula of common/io_count.hpp, O(N d) extra memory, block sizing from M, and the program's
// extra flags. No timing here: speed lives in bench_04_tiled_cpu.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "conformance.hpp"
#include "io_count.hpp"
#include "reference.hpp"
#include "stage_04.hpp"
#include "tiled.hpp"

namespace {

fa::ForwardFn with_blocks(int64_t Br, int64_t Bc, int threads = 0) {
  return [=](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O,
             float* LSE) {
    tiled::Blocks b;
    b.Br = Br, b.Bc = Bc, b.threads = threads;
    tiled::forward<float>(p, Q, K, V, O, LSE, b);
  };
}

}  // namespace

TEST_CASE("04_tiled_cpu: conformance battery, default blocks (tiled::default_blocks)") {
  fa::check_forward_battery(stage_04().forward);
}

TEST_CASE("04_tiled_cpu: conformance battery, blocks that do not divide N (Br = 7, Bc = 13)") {
  fa::check_forward_battery(with_blocks(7, 13));
}

TEST_CASE("04_tiled_cpu: conformance battery, Br = Bc = 1 (stage 03 one key at a time)") {
  fa::check_forward_battery(with_blocks(1, 1));
}

TEST_CASE("04_tiled_cpu: conformance battery, one huge block (Br = Bc = 100000 >= N)") {
  fa::check_forward_battery(with_blocks(100000, 100000));
}

TEST_CASE("04_tiled_cpu: conformance battery, blocks from a small M (L1-sized, 32 KiB)") {
  fa::ForwardFn f = [](const fa::AttnProblem& p, const float* Q, const float* K, const float* V,
                       float* O, float* LSE) {
    tiled::forward<float>(p, Q, K, V, O, LSE, tiled::blocks_from_sram(32 << 10, p.d));
  };
  fa::check_forward_battery(f);
}

TEST_CASE("04_tiled_cpu: variant battery (windows, softcaps), default blocks and blocks that divide nothing") {
  fa::check_variant_forward_battery(stage_04().forward);
  fa::check_variant_forward_battery(with_blocks(7, 13));
}

TEST_CASE("04_tiled_cpu: variant battery, Br = Bc = 1 and one block as big as the problem") {
  fa::check_variant_forward_battery(with_blocks(1, 1));
  fa::check_variant_forward_battery(with_blocks(100000, 100000));
}

TEST_CASE("04_tiled_cpu: packed variable-length batches (varlen battery), default blocks, Br = 7 Bc = 13, Br = Bc = 1") {
  // Each sequence runs tiled::forward on offset pointers, its rows H d apart (problem.hpp's token_major).
  fa::check_varlen_forward_battery(stage_04().forward);
  fa::check_varlen_forward_battery(with_blocks(7, 13));
  fa::check_varlen_forward_battery(with_blocks(1, 1));
}

TEST_CASE("04_tiled_cpu: 1, 2 and 4 threads give bit-identical O and LSE") {
  // Ragged blocks, causal with fully masked rows, GQA, and enough query blocks for every thread.
  fa::AttnProblem probs[3];
  probs[0].B = 2, probs[0].H = 4, probs[0].H_kv = 2, probs[0].N_q = 301, probs[0].N_k = 257;
  probs[0].d = 40, probs[0].causal = true;
  probs[1].B = 1, probs[1].H = 3, probs[1].H_kv = 1, probs[1].N_q = 190, probs[1].N_k = 333;
  probs[1].d = 64;
  probs[2] = probs[0];
  probs[2].causal = false, probs[2].d = 128;
  for (const fa::AttnProblem& p : probs) {
    const fa::Inputs in = fa::random_inputs(p, 3);
    for (auto [Br, Bc] : {std::pair<int64_t, int64_t>{16, 48}, {7, 13}}) {
      INFO(p.describe() << " Br=" << Br << " Bc=" << Bc);
      const fa::ForwardRun one = fa::run_forward(with_blocks(Br, Bc, 1), in);
      for (int t : {2, 4}) {
        INFO("threads " << t);
        const fa::ForwardRun many = fa::run_forward(with_blocks(Br, Bc, t), in);
        CHECK(fa::same_bits(one.O, many.O));
        CHECK(fa::same_bits(one.LSE, many.LSE));
      }
    }
  }
}

// Lengths just past 2^15 and 2^16 (issue 13, item 3): an index kept in 16 bits, or a product of
// two lengths in 32 bits (N_q N_k > 2^31 here), would wrap. Sampled rows (the first, around the
// boundaries, the last) against float64 (reference_forward_rows: only those rows).
TEST_CASE("04_tiled_cpu: lengths just past 2^15 and 2^16 (causal), sampled rows against float64") {
  for (const auto& [N_q, N_k] : {std::pair<int64_t, int64_t>{32769, 32769}, {100, 65537}}) {
    const fa::AttnProblem p = fa::make_problem(1, 1, 1, N_q, N_k, 16, true);
    INFO(p.describe());
    const fa::Inputs in = fa::random_inputs(p, 5);
    const fa::ForwardRun r = fa::run_forward(stage_04().forward, in);
    CHECK(fa::count_nonfinite(r.O.ptr(), r.O.numel()) == 0);  // every row written (poison is NaN)
    const std::vector<int64_t> rows = {0, 1, N_q / 2, N_q - 2, N_q - 1, std::min(N_q - 1, int64_t(32767)),
                                       std::min(N_q - 1, int64_t(32768))};
    fa::TensorD O64, L64;
    fa::reference_forward_rows(p, in.Q, in.K, in.V, rows, O64, L64);
    for (size_t x = 0; x < rows.size(); ++x) {
      const int64_t i = rows[x];
      INFO("row " << i << " sees " << p.keys_seen(i) << " keys");
      for (int64_t c = 0; c < p.d; ++c) CHECK(std::fabs(double(r.O[i * p.d + c]) - O64[int64_t(x) * p.d + c]) < 1e-5);
      CHECK(std::fabs(double(r.LSE[i]) - L64[int64_t(x)]) < 1e-5 * std::max(1.0, std::fabs(L64[int64_t(x)])));
    }
  }
}

TEST_CASE("04_tiled_cpu: counted HBM traffic equals the formula (common/io_count.hpp)") {
  struct Cfg {
    fa::AttnProblem p;
    int64_t Br, Bc;
  };
  std::vector<Cfg> cfgs;
  auto add = [&](int64_t B, int64_t H, int64_t Hkv, int64_t Nq, int64_t Nk, int64_t d, bool causal,
                 int64_t Br, int64_t Bc) {
    fa::AttnProblem p;
    p.B = B, p.H = H, p.H_kv = Hkv, p.N_q = Nq, p.N_k = Nk, p.d = d, p.causal = causal;
    cfgs.push_back({p, Br, Bc});
  };
  add(1, 1, 1, 256, 256, 32, false, 64, 128);  // divides: K, V read N_q / Br times
  add(1, 1, 1, 256, 256, 32, true, 64, 64);    // causal: blocks above the diagonal skipped
  add(1, 1, 1, 256, 256, 32, true, 64, 128);   // causal, a key block crossing the diagonal
  add(2, 4, 2, 301, 257, 40, true, 7, 13);     // ragged, GQA, rows that see no key
  add(1, 2, 1, 100, 300, 16, true, 32, 50);    // N_q < N_k, bottom-right
  add(1, 1, 1, 50, 50, 8, false, 1, 1);
  add(1, 1, 1, 50, 50, 8, false, 1000, 1000);  // one block: every element moves exactly once
  add(1, 1, 1, 1024, 1024, 16, true, 64, 64);  // + a window of 128 keys (below): O(N w) keys
  cfgs.back().p.window_left = 128;
  add(2, 4, 2, 301, 257, 8, false, 7, 13);     // + an asymmetric window, rows that see no key
  cfgs.back().p.window_left = 20, cfgs.back().p.window_right = 10;
  for (const Cfg& c : cfgs) {
    const fa::AttnProblem& p = c.p;
    INFO(p.describe() << " Br=" << c.Br << " Bc=" << c.Bc);
    const fa::Inputs in = fa::random_inputs(p, 5);
    fa::Tensor O(in.Q.shape), LSE({p.B, p.H, p.N_q});
    fa::IoCount io;
    tiled::Blocks b;
    b.Br = c.Br, b.Bc = c.Bc, b.threads = 2;
    tiled::forward<float>(p, in.Q.ptr(), in.K.ptr(), in.V.ptr(), O.ptr(), LSE.ptr(), b, &io);
    const fa::IoCount f = fa::tiled_io(p, std::min(c.Br, p.N_q), std::min(c.Bc, p.N_k));
    CHECK(io.hbm_read == f.hbm_read);
    CHECK(io.hbm_write == f.hbm_write);
    CHECK(io.sram > 0);
  }
  // The closed forms behind the formula, by hand:
  {  // non-causal, Br | N_q: Q once, K and V once per query block, O and LSE once.
    const Cfg& c = cfgs[0];
    const int64_t N = 256, d = 32, Tr = N / c.Br;
    const fa::IoCount f = fa::tiled_io(c.p, c.Br, c.Bc);
    CHECK(f.hbm_read == N * d + Tr * 2 * N * d);
    CHECK(f.hbm_write == N * d + N);
  }
  {  // causal, Br = Bc = 64, N = 256: query block i reads key blocks 0..i, 1+2+3+4 = 10 blocks.
    const Cfg& c = cfgs[1];
    const fa::IoCount f = fa::tiled_io(c.p, 64, 64);
    CHECK(f.hbm_read == 256 * 32 + 10 * 2 * 64 * 32);
  }
  {  // causal, Br = 64, Bc = 128: the key block that crosses the diagonal is loaded only up to
     // the last key the query block sees, so K and V move exactly as with Bc = 64 (and any Bc).
    const Cfg& c = cfgs[2];
    for (int64_t Bc : {1, 13, 64, 128, 256})
      CHECK(fa::tiled_io(c.p, 64, Bc).hbm_read == 256 * 32 + 10 * 2 * 64 * 32);
  }
  {  // one block: exactly the sizes of Q, K, V in and O, LSE out.
    const Cfg& c = cfgs[6];
    const fa::IoCount f = fa::tiled_io(c.p, 50, 50);
    CHECK(f.hbm_read == 3 * 50 * 8);
    CHECK(f.hbm_write == 50 * 8 + 50);
  }
  {  // causal with a window of w = 128, Br = 64, N = 1024: query block r0 loads keys
     // r0 - 128 .. r0 + 63, w + Br = 192 of them (fewer for the first two blocks), not r0 + 64:
     // the traffic grows with N w, not N^2.
    const Cfg& c = cfgs[7];
    int64_t keys = 0;
    for (int64_t r0 = 0; r0 < 1024; r0 += 64) keys += r0 + 64 - std::max<int64_t>(0, r0 - 128);
    CHECK(keys == 14 * 192 + 64 + 128);
    CHECK(fa::tiled_io(c.p, 64, 64).hbm_read == 1024 * 16 + 2 * 16 * keys);
    fa::AttnProblem full = c.p;
    full.window_left = -1;
    CHECK(fa::tiled_io(full, 64, 64).hbm_read == 1024 * 16 + 2 * 16 * (64 * 16 * 17 / 2));
  }
  {  // Br = Bc = 1 moves what stage 03 moves on the same problem (non-causal).
    const Cfg& c = cfgs[5];
    CHECK(fa::tiled_io(c.p, 1, 1).hbm() == fa::io_stage03(c.p).hbm());
  }
  {  // Theorem 2: with the paper's blocks and M <= 4 d^2 the count is 8 N^2 d^2 / M + O(N d).
    fa::AttnProblem p;
    p.N_q = p.N_k = 1024, p.d = 64;
    for (int64_t M_bytes : {4096, 16384, 65536}) {
      const tiled::Blocks b = tiled::blocks_from_sram(M_bytes, p.d);
      const double lead = fa::theorem2_leading(p, double(M_bytes) / 4);
      const double got = double(fa::tiled_io(p, b.Br, b.Bc).hbm());
      INFO("M = " << M_bytes << " bytes");
      CHECK(got == doctest::Approx(lead + 2.0 * 1024 * 64 + 1024));
    }
  }
  // Counting is opt-in: without a counter the same call runs and nothing is counted.
  fa::AttnProblem p;
  p.N_q = p.N_k = 20, p.d = 8;
  const fa::Inputs in = fa::random_inputs(p, 1);
  CHECK_NOTHROW(fa::run_forward(with_blocks(4, 4), in));
}

TEST_CASE("04_tiled_cpu: block sizes from M follow Alg. 1 line 1 (Bc = ceil(M/4d), Br = min(Bc, d))") {
  tiled::Blocks b = tiled::blocks_from_sram(32 << 10, 64);  // M = 8192 floats
  CHECK(b.Bc == 32);
  CHECK(b.Br == 32);
  b = tiled::blocks_from_sram(1 << 20, 64);  // M = 262144 floats
  CHECK(b.Bc == 1024);
  CHECK(b.Br == 64);
  b = tiled::blocks_from_sram(1000, 7);  // M = 250: ceil(250 / 28) = 9
  CHECK(b.Bc == 9);
  CHECK(b.Br == 7);
  b = tiled::blocks_from_sram(4, 512);  // a budget below one row still gives 1 x 1 blocks
  CHECK(b.Bc == 1);
  CHECK(b.Br == 1);
}

TEST_CASE("04_tiled_cpu: the CPU default blocks: Br = 256, Bc <= 512 within half of M; smaller for short sequences and few tasks") {
  const int64_t M = tiled::default_sram_bytes() / 4;  // floats
  for (int64_t d : {16, 64, 128, 256, 1000}) {
    INFO("d = " << d << ", M = " << M << " floats");
    const tiled::Blocks b = tiled::default_blocks(d);
    CHECK(b.Br == 256);
    CHECK(b.Bc % 64 == 0);
    CHECK(b.Bc >= 64);
    CHECK(b.Bc <= 512);
    // The largest such multiple of 64: S, Kt, Vj fit in M / 2, and 64 more keys would not.
    if (b.Bc > 64) CHECK((b.Br + 2 * d) * b.Bc <= M / 2);
    if (b.Bc < 512) CHECK((b.Br + 2 * d) * (b.Bc + 64) > M / 2);
  }
  // blocks_for: given sizes kept (clamped to N), zeros from the default, threads resolved.
  fa::AttnProblem p = fa::make_problem(1, 8, 8, 4096, 300, 64, false);
  tiled::Blocks given;
  given.Br = 7, given.Bc = 1000, given.threads = 3;
  tiled::Blocks b = tiled::blocks_for(p, given);
  CHECK(b.Br == 7);
  CHECK(b.Bc == 300);
  CHECK(b.threads == 3);
  // 8 heads x 16 blocks of 256 rows: plenty of tasks, Br = 256; 300 keys: at most a quarter per
  // block, rounded down to a multiple of 64 (but 64 at least).
  b = tiled::blocks_for(p, tiled::Blocks{0, 0, 2});
  CHECK(b.Br == 256);
  CHECK(b.Bc == 64);
  p.N_k = 4096;
  CHECK(tiled::blocks_for(p, tiled::Blocks{0, 0, 2}).Bc == tiled::default_blocks(64).Bc);
  // Short sequences: N = 1024 gives at most 1024 / 4 = 256 keys, and with the causal mask at
  // most 1024 / 8 = 128 rows.
  p = fa::make_problem(1, 8, 8, 1024, 1024, 64, false);
  b = tiled::blocks_for(p, tiled::Blocks{0, 0, 2});
  CHECK(b.Br == 256);
  CHECK(b.Bc == std::min<int64_t>(256, tiled::default_blocks(64).Bc));
  p.causal = true;
  CHECK(tiled::blocks_for(p, tiled::Blocks{0, 0, 2}).Br == 128);
  // Few tasks: one head of 4096 rows on 2 threads (16 blocks of 256: enough); on 16 threads
  // 32 tasks are wanted, so 32 blocks of 128; one head of 100 rows on 2 threads: 4 blocks of 25.
  p = fa::make_problem(1, 1, 1, 4096, 4096, 64, false);
  CHECK(tiled::blocks_for(p, tiled::Blocks{0, 0, 2}).Br == 256);
  CHECK(tiled::blocks_for(p, tiled::Blocks{0, 0, 16}).Br == 128);
  p.N_q = 100;
  CHECK(tiled::blocks_for(p, tiled::Blocks{0, 0, 2}).Br == 25);
  p.N_q = 1;
  CHECK(tiled::blocks_for(p, tiled::Blocks{0, 0, 2}).Br == 1);
  // Never more threads than query blocks: one row, one task, one thread (and one set of buffers).
  CHECK(tiled::blocks_for(p, tiled::Blocks{0, 0, 64}).threads == 1);
  p.N_q = 1000;
  CHECK(tiled::blocks_for(p, tiled::Blocks{100, 0, 64}).threads == 10);
}

TEST_CASE("04_tiled_cpu: extra memory is O(N d): the block buffers, independent of N") {
  // Measured (common/memtrack.hpp), single thread so one set of buffers: Br = Bc = 64 blocks.
  int64_t bytes[2];
  int k = 0;
  for (int64_t N : {512, 2048}) {
    fa::AttnProblem p;
    p.N_q = p.N_k = N, p.d = 64;
    bytes[k++] = fa::run_forward(with_blocks(64, 64, 1), fa::random_inputs(p, 2)).extra_bytes;
  }
  // Equal up to the allocator's slack: memtrack counts malloc_usable_size, and a chunk may be
  // handed out larger than asked when the rest would be too small to split, which depends on the
  // heap's history. malloc's chunks differ by at most 16 bytes (seen: 82656 vs 82672 bytes); the
  // seven block buffers are 64-byte aligned (mk::Buffer, aligned_alloc), whose chunks keep up to
  // 64 bytes (seen: 224 bytes over the seven). Anything that grew with N (one float per key: 6 KiB
  // more at N = 2048) would still fail.
  CHECK(std::abs(bytes[0] - bytes[1]) <= 7 * 64);
  // Qi (64 x 64 floats), Kt, Vj, S, Oi (64 rows of row_stride(64) = 80 floats: 64 padded off a
  // multiple of 128 bytes), m and l (2 x 64), plus allocator slack.
  const int64_t ld = tiled::mk::row_stride(64);
  const int64_t buffers = (64 * 64 + 4 * 64 * ld + 2 * 64) * 4;
  CHECK(bytes[1] >= buffers);
  CHECK(bytes[1] < buffers + 4096);
}

TEST_CASE("04_tiled_cpu: every block buffer starts on a 64-byte cache line (mk::Buffer)") {
  // A vector load at a 16-byte offset (malloc's alignment) spans two cache lines. Sizes from one
  // float to a 256 x 528 S block; several live at once, as in forward(), so that one lucky
  // address cannot pass for all (malloc returns a multiple of 64 about one time in four).
  std::vector<tiled::mk::Buffer> bufs;
  for (int64_t n : {1, 3, 16, 17, 100, 1000, 4096, 4097, 256 * 528})
    for (int copy = 0; copy < 3; ++copy) bufs.emplace_back(size_t(n), 1.f);
  for (const auto& b : bufs) CHECK(reinterpret_cast<uintptr_t>(b.data()) % 64 == 0);
}

// ---- The program's extra flags (the common ones are tested in 01_naive) ----
namespace {
namespace fs = std::filesystem;
struct Ran {
  int code;
  std::string out, err;
};
Ran run(const std::string& args) {
  const fs::path dir = fs::temp_directory_path() / "fa_test_04_cli";
  fs::create_directories(dir);
  const std::string cmd = std::string(STAGE_BIN) + " " + args + " >" + (dir / "o.txt").string() +
                          " 2>" + (dir / "e.txt").string();
  const int status = std::system(cmd.c_str());
  auto slurp = [](const fs::path& f) {
    std::ifstream s(f);
    return std::string((std::istreambuf_iterator<char>(s)), std::istreambuf_iterator<char>());
  };
  Ran r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "o.txt"), slurp(dir / "e.txt")};
  fs::remove_all(dir);
  return r;
}
}  // namespace

TEST_CASE("04_tiled_cpu program: --block-q/--block-k/--threads/--io-report") {
  const Ran r = run("--batch 1 --heads 1 --kv-heads 1 --seq-q 100 --seq-k 90 --head-dim 16 --causal --block-q 7 --block-k 13 "
                    "--threads 2 --io-report");
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  // The counted row of the IO table equals the formula row.
  fa::AttnProblem p;
  p.N_q = 100, p.N_k = 90, p.d = 16, p.causal = true;
  const fa::IoCount f = fa::tiled_io(p, 7, 13);
  CHECK(r.out.find("Br = 7, Bc = 13") != std::string::npos);
  const std::string total = std::to_string(f.hbm());
  const size_t counted = r.out.find("04_tiled_cpu (counted)");
  REQUIRE(counted != std::string::npos);
  CHECK(r.out.find(total, counted) < r.out.find('\n', counted));
  CHECK(r.out.find("Theorem 2") != std::string::npos);
  // Errors against stage 01 are in the report and small.
  CHECK(r.out.find("O   vs stage 01") != std::string::npos);

  for (const char* bad : {"--block-q 0", "--block-k -3", "--sram-bytes x", "--threads 0"}) {
    INFO(bad);
    const Ran e = run(std::string("--seq-q 8 ") + bad);
    CHECK(e.code == 2);
    CHECK(std::count(e.err.begin(), e.err.end(), '\n') == 1);
  }
}

// The vectorised exp of the micro-kernels against std::exp (in double, rounded to float): every
// float32 in the ranges where the result leaves the normal floats ([-104.5, -80]: subnormal
// results, then 0; [80, 100.5]: up to +inf), and every 61st float in between (by bit pattern). Normal results
// within 1 ulp, subnormal results within 1 unit of 2^-149, zeros and infinities exactly where
// std::exp has them.
TEST_CASE("04 exp_neg: agrees with std::exp on float32, subnormal results and overflow included") {
  using namespace tiled::mk;
  int64_t checked = 0, bad = 0;
  auto check = [&](float x) {
    float got[VW];
    const vf r = exp_neg(splat(x));
    std::memcpy(got, &r, sizeof got);
    const double ref = std::exp(double(x));
    const float reff = float(ref);
    bool ok;
    if (reff == 0.f || std::isinf(reff)) ok = got[0] == reff;
    else if (ref >= double(std::numeric_limits<float>::min())) ok = std::fabs(got[0] - ref) <= std::ldexp(ref, -23);
    else ok = std::fabs(got[0] - ref) <= std::ldexp(1.0, -149);
    if (!ok && ++bad <= 5) FAIL_CHECK("x = " << x << ": exp_neg " << got[0] << ", std::exp " << ref);
    ++checked;
  };
  auto bits = [](float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; };
  auto walk = [&](float a, float b, uint32_t stride) {  // every stride-th float from a to b, same sign
    const uint32_t ua = bits(a), ub = bits(b);            // bit patterns are monotone in |x|
    for (uint32_t u = std::min(ua, ub); u <= std::max(ua, ub); u += stride) {
      float x;
      std::memcpy(&x, &u, 4);
      check(x);
    }
  };
  walk(-104.5f, -80.f, 1);
  walk(-80.f, -0.f, 61);
  walk(0.f, 80.f, 61);
  walk(80.f, 100.5f, 1);
  check(-std::numeric_limits<float>::infinity());
  check(std::numeric_limits<float>::infinity());
  CHECK(bad == 0);
  CHECK(checked > 10'000'000);
}

// exp_sub_sum takes exp_neg_normal (no edge handling) for rows whose every s - m is >= -87. That
// is only an optimisation if both give the same bits there: checked for every float32 in
// [-87, 0], VW at a time; then exp_sub_sum itself on rows that straddle the boundary.
TEST_CASE("04 exp_neg_normal: the same bits as exp_neg on every float32 in [-87, 0]") {
  using namespace tiled::mk;
  auto bits = [](float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; };
  const uint32_t hi = bits(-87.f);  // bit patterns of negative floats grow with |x|: -0 .. -87
  int64_t differ = 0, checked = 0;
  for (uint32_t u0 = bits(-0.f); u0 <= hi; u0 += VW) {
    uint32_t us[VW];
    for (int i = 0; i < VW; ++i) us[i] = std::min(u0 + uint32_t(i), hi);
    vf x;
    std::memcpy(&x, us, sizeof x);
    const vf a = exp_neg(x), b = exp_neg_normal(x);
    differ += std::memcmp(&a, &b, sizeof a) != 0;
    ++checked;
  }
  CHECK(differ == 0);
  CHECK(checked * VW > 1'000'000'000);  // every float of the interval: about 2^30
  // Rows straddling -87: whichever path exp_sub_sum takes, each element is exp_neg's.
  for (float lowest : {-86.99f, -87.f, -87.01f, -87.9f, -100.f, -std::numeric_limits<float>::infinity()}) {
    INFO("lowest " << lowest);
    std::vector<float> row(4 * VW);
    for (size_t i = 0; i < row.size(); ++i) row[i] = 3.f - 0.01f * float(i);
    row[5] = 3.f + lowest;
    std::vector<float> got = row;
    const float sum = exp_sub_sum(got.data(), int64_t(got.size()), 3.f);
    float want_sum = 0;
    for (size_t c = 0; c < row.size(); c += VW) {
      vf w = exp_neg(load(row.data() + c) - 3.f);
      for (int i = 0; i < VW; ++i) CHECK(bits(got[c + size_t(i)]) == bits(w[i]));
      (void)w;
    }
    for (float g : got) want_sum += g;
    CHECK(std::fabs(sum - want_sum) <= 1e-5f * want_sum);
  }
}

// A tiny weight times a huge value (issue 11's report): exp(-88) = 6.05e-39 is a float32
// subnormal, and V = 1e36 makes its contribution O = 6.05e-3. A vectorised exp that flushes
// results below FLT_MIN to zero gives O = 0.
TEST_CASE("04: a subnormal softmax weight still counts (Q = 1, K = [0, -88], V = [0, 1e36], scale 1)") {
  fa::Inputs in;
  in.p = fa::make_problem(1, 1, 1, 1, 2, 1, false);
  in.p.scale = 1.f;
  in.Q = fa::Tensor({1, 1, 1, 1}, 1.f);
  in.K = fa::Tensor({1, 1, 2, 1});
  in.K[1] = -88.f;
  in.V = fa::Tensor({1, 1, 2, 1});
  in.V[1] = 1e36f;
  const fa::ForwardRun r = fa::run_forward(stage_04().forward, in);
  const double want = 1e36 * std::exp(-88.0) / (1.0 + std::exp(-88.0));  // 6.0546e-3
  CHECK(std::fabs(r.O[0] - want) <= 1e-6 * want);
  CHECK(std::fabs(r.LSE[0] - std::log1p(std::exp(-88.0))) <= 1e-6);
}
