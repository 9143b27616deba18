// The 04_tiled_cpu program: the CLI contract of common/cli.hpp around tiled::forward, plus
//   --sram-bytes M   size the blocks from an on-chip budget of M bytes by the paper's rule
//                    (Alg. 1 line 1: Bc = ceil(M / 4d), Br = min(Bc, d))
//   --block-q Br     query rows per block   (default: tiled::default_blocks, 256 on a CPU)
//   --block-k Bc     key rows per block     (default: up to 512, within half the L2)
//   --threads T      OpenMP threads         (default: all)
//   --io-report      after the run, a table of elements moved to and from main memory ("HBM") by
//                    stages 01-04 on this problem, stage 04 counted during the run, and stage 04
//                    across SRAM sizes against Theorem 2's N^2 d^2 / M
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli.hpp"
#include "io_count.hpp"
#include "stage_04.hpp"

namespace {

struct Config {
  int64_t sram_bytes = 0, Br = 0, Bc = 0;
  int threads = 0;
  bool io_report = false;
};

// The blocks the run uses: --sram-bytes M gives the paper's rule from M, --block-q/--block-k
// override either size; what is left at 0 is the stage's default (tiled::blocks_for).
tiled::Blocks resolve(const Config& c, const fa::AttnProblem& p) {
  tiled::Blocks b;
  if (c.sram_bytes > 0) b = tiled::blocks_from_sram(c.sram_bytes, p.d);
  if (c.Br > 0) b.Br = c.Br;
  if (c.Bc > 0) b.Bc = c.Bc;
  b.threads = c.threads;
  return tiled::blocks_for(p, b);
}

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

// The --io-report table. Elements; one float32 element = 4 bytes.
void io_report(const fa::AttnProblem& p, const tiled::Blocks& blk, const fa::IoCount& counted,
               nlohmann::json& report, std::ostream& text) {
  const int64_t Br = std::min(blk.Br, p.N_q), Bc = std::min(blk.Bc, p.N_k);
  const fa::IoCount s1 = fa::io_stage01(p), s2 = fa::io_stage02(p), s3 = fa::io_stage03(p);
  const fa::IoCount f4 = fa::tiled_io(p, Br, Bc);
  nlohmann::json j;
  j["problem"] = p.describe();
  j["blocks"] = {{"Br", Br}, {"Bc", Bc}};
  auto row = [](const fa::IoCount& c) {
    return nlohmann::json{{"hbm_read", c.hbm_read}, {"hbm_write", c.hbm_write}, {"hbm", c.hbm()}};
  };
  j["stages"] = {{"01_naive", row(s1)}, {"02_safe_softmax", row(s2)},
                 {"03_online_softmax", row(s3)}, {"04_tiled_cpu_counted", row(counted)},
                 {"04_tiled_cpu_formula", row(f4)}};
  j["stages"]["04_tiled_cpu_counted"]["sram"] = counted.sram;
  std::ostringstream t;
  t << "\nHBM traffic (elements moved to/from Q, K, V, O, LSE and S, P; x4 for bytes)\n"
    << "  problem: " << p.describe() << "\n"
    << "  stage                      read          write         total    vs stage 04\n";
  auto line = [&](const char* name, const fa::IoCount& c) {
    char b[160];
    std::snprintf(b, sizeof b, "  %-22s %12lld %12lld %14lld %10.1fx\n", name, (long long)c.hbm_read,
                  (long long)c.hbm_write, (long long)c.hbm(), double(c.hbm()) / double(counted.hbm()));
    t << b;
  };
  line("01_naive", s1);
  line("02_safe_softmax", s2);
  line("03_online_softmax", s3);
  line("04_tiled_cpu (counted)", counted);
  line("04 formula (tiled_io)", f4);
  t << "  stage 04 blocks: Br = " << Br << ", Bc = " << Bc
    << "; accesses inside the block buffers (SRAM): " << counted.sram << "\n"
    << "\nStage 04 across SRAM sizes M (blocks from M: Bc = ceil(M/4d), Br = min(Bc, d))\n"
    << "  M bytes    Br     Bc    HBM elements   Theorem 2: N_q N_k d^2 / M   ratio\n";
  nlohmann::json sweep = nlohmann::json::array();
  for (int64_t M = 4096; M <= (int64_t(4) << 20); M *= 4) {
    const tiled::Blocks b = tiled::blocks_from_sram(M, p.d);
    const int64_t br = std::min(b.Br, p.N_q), bc = std::min(b.Bc, p.N_k);
    const fa::IoCount c = fa::tiled_io(p, br, bc);
    const double M_el = double(M) / sizeof(float);
    const double bound = double(p.B * p.H) * double(p.N_q) * double(p.N_k) * double(p.d * p.d) / M_el;
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %8lld %5lld %6lld %14lld %22s %13s\n", (long long)M,
                  (long long)br, (long long)bc, (long long)c.hbm(), fmt(bound).c_str(),
                  fmt(double(c.hbm()) / bound).c_str());
    t << buf;
    sweep.push_back({{"M_bytes", M}, {"Br", br}, {"Bc", bc}, {"hbm", c.hbm()}, {"theorem2", bound}});
  }
  j["sweep"] = sweep;
  report["io_report"] = j;  // with --json: a field of the one JSON document on stdout
  text << t.str();
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  std::optional<fa::AttnProblem> ran;
  fa::IoCount counted;
  tiled::Blocks used;
  fa::Stage stage = stage_04();
  stage.forward = [&](const fa::AttnProblem& p, const float* Q, const float* K, const float* V,
                      float* O, float* LSE) {
    const tiled::Blocks b = resolve(cfg, p);
    // The block buffers of every thread (tiled.hpp's Sram, tiled::sram_floats each).
    fa::check_memory(b.threads * int64_t(sizeof(float)) * tiled::sram_floats(p.d, b), "--block-q/--block-k/--threads",
                     "the block buffers of " + std::to_string(b.threads) + " threads");
    used = b;
    ran = p;
    if (cfg.io_report) {
      counted = {};
      tiled::forward<float>(p, Q, K, V, O, LSE, b, &counted);  // the counting instantiation
    } else {
      tiled::forward<float>(p, Q, K, V, O, LSE, b);
    }
  };
  return fa::stage_main(
      argc, argv, stage,
      [&](CLI::App& app) {
        app.add_option("--sram-bytes", cfg.sram_bytes, "size the blocks from an on-chip budget of M bytes, the paper's rule: Bc = ceil(M/4d), Br = min(Bc, d) (default: the stage's CPU blocks)")
            ->check(CLI::Range(int64_t(16), int64_t(1) << 34));
        app.add_option("--block-q", cfg.Br, "Br, query rows per block (default: 256, fewer when the threads would idle)")
            ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
        app.add_option("--block-k", cfg.Bc, "Bc, key rows per block (default: up to 512, within half the L2)")
            ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
        app.add_option("--threads", cfg.threads, "OpenMP threads (default: all)")
            ->check(CLI::Range(1, 256));
        app.add_flag("--io-report", cfg.io_report, "report the HBM traffic of stages 01-04");
      },
      [&](const fa::Inputs&, nlohmann::json& report, std::ostream& text) {
        if (cfg.io_report && ran) io_report(*ran, used, counted, report, text);
      });
}
