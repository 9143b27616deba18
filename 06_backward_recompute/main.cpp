// The 06_backward_recompute program: the CLI contract of common/cli.hpp (forward with stage 04,
// then the backward from O and LSE: --do, --dq, --dk, --dv), plus
//   --block-q Br     query rows per block   (default: 64 for d <= 64, else 128: bwd::default_blocks)
//   --block-k Bc     key rows per block
//   --threads T      OpenMP threads         (default: all)
#include "cli.hpp"
#include "stage_06.hpp"

int main(int argc, char** argv) {
  tiled::Blocks blk;
  fa::Stage stage = stage_06();
  stage.backward = [&](const fa::AttnProblem& p, const float* Q, const float* K, const float* V,
                       const float* O, const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    bwd::backward<float>(p, Q, K, V, O, dO, LSE, dQ, dK, dV, blk);
  };
  return fa::stage_main(argc, argv, stage, [&](CLI::App& app) {
    app.add_option("--block-q", blk.Br, "Br, query rows per block (default: 64 for d <= 64, else 128)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
    app.add_option("--block-k", blk.Bc, "Bc, key rows per block (default: 64 for d <= 64, else 128)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
    app.add_option("--threads", blk.threads, "OpenMP threads (default: all)")->check(CLI::Range(1, 256));
  });
}
