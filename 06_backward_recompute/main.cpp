// The 06_backward_recompute program: the CLI contract of common/cli.hpp (forward with stage 04,
// then the backward from O and LSE: --do, --dq, --dk, --dv), plus
//   --block-q Br     query rows per block   (default: 64 for d <= 64, else 128: bwd::default_blocks)
//   --block-k Bc     key rows per block
//   --threads T      OpenMP threads         (default: all)
//   --device D       cpu (default) or gpu: stage 05's v1 forward and the GPU backward gpu_v1
//                    (kernels/bwd_v1_fp32.cuh), fp32; built only where nvcc is
#include "cli.hpp"
#include "stage_06.hpp"
#ifdef FA06_GPU
#include "gpu.hpp"
#include "stage_06_gpu.hpp"
#endif

int main(int argc, char** argv) {
  tiled::Blocks blk;
  fa::Stage stage = stage_06();
  stage.backward = [&](const fa::AttnProblem& p, const float* Q, const float* K, const float* V,
                       const float* O, const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    bwd::backward<float>(p, Q, K, V, O, dO, LSE, dQ, dK, dV, blk);
  };
  std::string device = "cpu";
#ifdef FA06_GPU
  // The GPU stage, chosen after the flags are parsed (forward_for runs then, before anything else).
  stage.forward_for = [&](fa::DType t) {
    if (t != fa::DType::fp32) throw fa::InputError("--dtype", "fp32 (stage 06)", fa::dtype_name(t));
    if (device == "gpu") {
      if (blk.Br > 0 || blk.Bc > 0 || blk.threads > 0)
        throw fa::InputError("--block-q/--block-k/--threads", "only with --device cpu", "--device gpu");
      const fa::Stage g = stage_06_gpu();
      stage.idea = g.idea;
      stage.backward = g.backward;
      stage.precheck = [](const fa::AttnProblem& p, const fa::Inputs*, fa::DType) {
        fa06::backward_plan("gpu_v1", p, fa::DType::fp32);
        fa::require_gpu();
      };
      return g.forward;
    }
    return stage_06().forward;
  };
#endif
  return fa::stage_main(argc, argv, stage, [&](CLI::App& app) {
    app.add_option("--block-q", blk.Br, "Br, query rows per block (default: 64 for d <= 64, else 128)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
    app.add_option("--block-k", blk.Bc, "Bc, key rows per block (default: 64 for d <= 64, else 128)")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
    app.add_option("--threads", blk.threads, "OpenMP threads (default: all)")->check(CLI::Range(1, 256));
#ifdef FA06_GPU
    app.add_option("--device", device, "cpu (default) or gpu (stage 05 v1 forward + GPU backward gpu_v1, fp32)")
        ->check(CLI::IsMember({"cpu", "gpu"}));
#endif
  });
}
