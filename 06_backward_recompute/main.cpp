// The 06_backward_recompute program: the CLI contract of common/cli.hpp (forward with stage 04,
// then the backward from O and LSE: --do, --dq, --dk, --dv), plus
//   --block-q Br     query rows per block   (default: 64 for d <= 64, else 128: bwd::default_blocks)
//   --block-k Bc     key rows per block
//   --threads T      OpenMP threads         (default: all)
//   --device D       cpu (default) or gpu: a stage 05 forward and a GPU backward (runner_bwd.hpp);
//                    built only where nvcc is
//   --bwd-kernel K   with --device gpu: auto (default: the fastest measured for this GPU, d and
//                    dtype, fa06::default_backward_kernel), gpu_v1, gpu_v2, gpu_v3, gpu_v4 or a _det
//                    variant; any d runs on the tensor cores in fp16/bf16 (the next native width,
//                    zero-padded: the report says so); the forward is stage 05's v7 there, which
//                    runs v5 off sm_90; a packed batch (--cu-seqlens-q/-k) runs v13 and gpu_v3, each in one launch
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
  std::string device = "cpu", bwd_kernel;
#ifdef FA06_GPU
  fa::DType gpu_dtype = fa::DType::fp32;  // set by the GPU precheck
  // The GPU stage, chosen after the flags are parsed (forward_for runs then, before anything else).
  stage.forward_for = [&](fa::DType t) {
    if (device == "gpu") {
      if (blk.Br > 0 || blk.Bc > 0 || blk.threads > 0)
        throw fa::InputError("--block-q/--block-k/--threads", "only with --device cpu", "--device gpu");
      // The default depends on the head dim, known only once the problem is: chosen in the
      // backward itself.
      const fa::Stage g = stage_06_gpu(bwd_kernel, t);
      stage.idea = g.idea;
      stage.backward = g.backward;
      // A packed batch: stage 05's v13 forward and gpu_v3's backward, each in one launch (the
      // per-sequence path of the CPU stages would hand the GPU token-major rows it cannot read).
      stage.varlen = false;
      stage.varlen_forward_for = [](fa::DType dt) { return stage_05_varlen_forward("auto", dt); };
      stage.varlen_backward_for = [&](fa::DType dt) { return stage_06_gpu_varlen_backward(bwd_kernel, dt); };
      stage.precheck = [&](const fa::AttnProblem& p, const fa::Inputs* in, fa::DType dt) {
        if (in && in->varlen.any()) {
          fa05::plan("auto", in->p, dt, {}, {}, varlen_view(in->varlen));
          fa06::backward_plan(resolve_backward_kernel(bwd_kernel), in->p, dt, {}, 0, varlen_view(in->varlen));
        } else {
          fa06::backward_plan(resolve_backward_kernel(bwd_kernel), p, dt);
        }
        fa::require_gpu();
        gpu_dtype = dt;
      };
      return g.forward;
    }
    if (t != fa::DType::fp32)
      throw fa::InputError("--dtype", "fp32 (stage 06 on the CPU; fp16/bf16 with --device gpu)", fa::dtype_name(t));
    if (!bwd_kernel.empty()) throw fa::InputError("--bwd-kernel", "only with --device gpu", "--device cpu");
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
    app.add_option("--device", device, "cpu (default) or gpu (a stage 05 forward + a GPU backward)")
        ->check(CLI::IsMember({"cpu", "gpu"}));
    std::vector<std::string> names = fa06::backward_kernels();
    names.insert(names.begin(), "auto");
    app.add_option("--bwd-kernel", bwd_kernel,
                   "with --device gpu: auto (default: the fastest measured for this GPU, d and dtype; gpu_v1 in fp32), "
                   "gpu_v1, gpu_v2, gpu_v3, gpu_v4, or a _det variant of the last three")
        ->check(CLI::IsMember(names));
#endif
  },
  // On the GPU: which backward ran and how (auto's choice, a fallback, the padded width: the note says why).
  [&](const fa::Inputs& in, nlohmann::json& report, std::ostream& text) {
#ifdef FA06_GPU
    if (device != "gpu") return;
    const std::string k = resolve_backward_kernel(bwd_kernel);
    const fa06::BwdPlan pl = in.varlen.any() ? fa06::backward_plan(k, in.p, gpu_dtype, {}, 0, varlen_view(in.varlen))
                                             : fa06::backward_plan(k, in.p, gpu_dtype);
    report["backward"]["kernel"] = {{"name", k}, {"runs", pl.runs}, {"note", pl.note}, {"d", in.p.d},
                                    {"d_kernel", pl.d_kernel}, {"Br", pl.Br}, {"Bc", pl.Bc},
                                    {"keys_per_warp", pl.keys_per_warp}, {"stages", pl.stages}, {"threads", pl.threads},
                                    {"blocks", pl.blocks_dkdv}, {"smem_bytes", pl.smem_dkdv},
                                    {"workspace_bytes", pl.workspace_bytes}, {"pad_bytes", pl.pad_bytes}};
    text << "  bwd kern : " << pl.runs << (k != pl.runs ? " (asked: " + k + ")" : "") << " at d = " << pl.d_kernel
         << " on " << fa::gpu_description() << "; " << pl.blocks_dkdv << " thread blocks of " << pl.threads
         << " threads, " << pl.smem_dkdv << " bytes of shared memory each, Br = " << pl.Br << ", Bc = " << pl.Bc << "\n";
    if (!pl.note.empty()) text << "  note     : " << pl.note << "\n";
#else
    (void)in, (void)report, (void)text;
#endif
  });
}
