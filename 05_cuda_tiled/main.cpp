// The 05_cuda_tiled program: the CLI contract of common/cli.hpp around one kernel version of
// runner.hpp, on the GPU, plus
//   --kernel NAME    which version: v1 (default), v2 ... v13 (tensor cores), v14 (decode), auto
//                    (the fastest for the problem), cublas (the materialised baseline); v15 (FP8)
//                    with --dtype fp8
//   --dtype T        fp32 (default), fp16 or bf16: Q, K, V are rounded to T, O is stored in T;
//                    fp8: v15 (runner_fp8.hpp), Q, K, V in bf16 quantised to e4m3 on the GPU, O in bf16
//   --sram-bytes M   v1: the shared memory the blocks are sized from (default 48 KiB)
//   --block-q Br     v1: query rows per block   (default: min(Bc, d), FA1 Alg. 1 line 1)
//   --block-k Bc     v1: key rows per block     (default: ceil(M / 4d), M in floats)
//                    v5 ... v12 take both too, among their compiled shapes (default: the sweep's winner)
//   --persistent-blocks P  v8, v10 ... v13: at most P persistent thread blocks (default: as many as stay resident)
//   --splits S       v14: key ranges per (batch, kv head), one thread block each (default: from the SMs)
// and the KV cache flags of the contract (common/cli.hpp: --cache-lens, --page-size, --block-table),
// which v14 and auto take: the run is then checked against reference_kv_cache(); and a packed
// batch (--cu-seqlens-q/-k), which v13 and auto take in fp16/bf16, in one launch.
// Without a GPU it exits with code 2 and one line, like any other unusable input.
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli.hpp"
#include "gpu.hpp"
#include "stage_05.hpp"

int main(int argc, char** argv) {
  std::string kernel = "v1";
  fa05::Config cfg;
  std::optional<fa::AttnProblem> ran;
  std::optional<fa::KvCacheHost> ran_cache;  // the cache of that run, if it had one
  std::optional<fa::VarlenHost> ran_varlen;  // the packed batch of that run, if it was one
  fa::DType dtype = fa::DType::fp32;
  fa::Stage stage = stage_05("v1");
  bool fp8 = false;              // --dtype fp8: v15 runs, whatever --kernel says (v15 or auto, if given)
  CLI::Option* kernel_opt = nullptr;
  stage.fp8_forward = [&] {
    if (kernel_opt && kernel_opt->count() > 0 && kernel != "v15" && kernel != "auto")
      throw fa::InputError("--kernel", "v15 or auto with --dtype fp8 (v15 is the FP8 kernel)", "'" + kernel + "'");
    fp8 = true;
    stage.idea = "v15: " + std::string("FP8, e4m3 with block scales on Hopper's tensor cores (docs/fp8.md)");
    fa::ForwardFn f = stage_05_fp8_forward(cfg);
    return fa::ForwardFn([f, &ran](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O,
                                   float* LSE) {
      ran = p;
      f(p, Q, K, V, O, LSE);
    });
  };
  // Built after the flags are parsed: the kernel, its knobs and the dtype come from them.
  stage.forward_for = [&](fa::DType t) {
    if (kernel == "v15") throw fa::InputError("--kernel", "v1 ... v14, auto or cublas in fp32, fp16 or bf16 (v15 needs --dtype fp8)", "'v15'");
    // an unknown --kernel is reported before anything runs
    stage.idea = kernel == "auto" ? "auto: the fastest kernel measured for this GPU, dtype and head dim (plan() picks it)"
                                  : kernel + ": " + fa05::kernel_info(kernel).idea;
    dtype = t;
    fa::ForwardFn f = stage_05_forward(kernel, t, cfg);
    return fa::ForwardFn([f, &ran](const fa::AttnProblem& p, const float* Q, const float* K,
                                   const float* V, float* O, float* LSE) {
      ran = p;
      f(p, Q, K, V, O, LSE);
    });
  };
  stage.cache_forward_for = [&](fa::DType t) {
    fa::CacheForwardFn f = stage_05_cache_forward(kernel, t, cfg);
    return fa::CacheForwardFn([f, &ran, &ran_cache](const fa::AttnProblem& p, const fa::KvCacheHost& c,
                                                    const float* Q, const float* K, const float* V, float* O,
                                                    float* LSE) {
      ran = p, ran_cache = c;
      f(p, c, Q, K, V, O, LSE);
    });
  };
  stage.varlen_forward_for = [&](fa::DType t) {
    fa::VarlenForwardFn f = stage_05_varlen_forward(kernel, t, cfg);
    return fa::VarlenForwardFn([f, &ran, &ran_varlen](const fa::AttnProblem& p, const fa::VarlenHost& v,
                                                      const float* Q, const float* K, const float* V, float* O,
                                                      float* LSE) {
      ran = p, ran_varlen = v;
      f(p, v, Q, K, V, O, LSE);
    });
  };
  // Before anything runs: the kernel takes the problem, the inputs fit the dtype, a GPU is there.
  stage.precheck = [&](const fa::AttnProblem& p, const fa::Inputs* in, fa::DType t) {
    if (fp8) fa05::plan_fp8(in ? in->p : p, cfg);
    else if (in && in->cache.any()) fa05::plan(kernel, in->p, t, cfg, kv_cache_view(in->cache));
    else if (in && in->varlen.any()) fa05::plan(kernel, in->p, t, cfg, {}, varlen_view(in->varlen));
    else fa05::plan(kernel, p, t, cfg);
    if (in) fa::check_dtype_range(*in, t);
    fa::require_gpu();
  };
  return fa::stage_main(
      argc, argv, stage,
      [&](CLI::App& app) {
        kernel_opt = app.add_option("--kernel", kernel, "kernel version: v1 (default), v2 ... v13 (tensor cores), v14 (decode: split-KV), auto (the fastest for the problem) or cublas (materialised baseline)");
        app.add_option("--sram-bytes", cfg.sram_bytes, "v1: shared memory M the blocks are sized from (default 48 KiB)")
            ->check(CLI::Range(int64_t(16), int64_t(1) << 30));
        app.add_option("--block-q", cfg.Br, "v1, v5 ... v13: Br, query rows per block (v1 default: min(Bc, d))")
            ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
        app.add_option("--block-k", cfg.Bc, "v1, v5 ... v13: Bc, key rows per block (v1 default: ceil(M / 16d), M in bytes: FA1's ceil(M/4d) in floats)")
            ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
        app.add_option("--persistent-blocks", cfg.persistent_blocks, "v8, v10 ... v13: at most this many persistent thread blocks (default: as many as stay resident)")
            ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
        app.add_option("--splits", cfg.splits, "v14: key ranges per (batch, kv head), one thread block each (default: enough to fill the SMs)")
            ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
      },
      [&](const fa::Inputs&, nlohmann::json& report, std::ostream& text) {
        if (!ran) return;
        if (fp8) {
          const fa05::Fp8Plan pl = fa05::plan_fp8(*ran, cfg);
          report["kernel"] = {{"name", "v15"}, {"runs", pl.runs}, {"note", ""}, {"device", fa::gpu_description()},
                              {"Br", pl.Br}, {"Bc", pl.Bc}, {"threads", pl.threads}, {"blocks", pl.blocks},
                              {"smem_bytes", pl.smem_bytes}, {"workspace_bytes", fa05::fp8_workspace_bytes(*ran, cfg)}};
          text << "  kernel   : v15 (FP8) on " << fa::gpu_description() << "; " << pl.tiles << " tiles for " << pl.blocks
               << " persistent thread blocks of " << pl.threads << " threads, " << pl.smem_bytes
               << " bytes of shared memory each, Br = " << pl.Br << ", Bc = " << pl.Bc
               << "; e4m3 scales per 64 query rows and per 128 keys\n";
          return;
        }
        const fa05::Plan pl = ran_cache    ? fa05::plan(kernel, *ran, dtype, cfg, kv_cache_view(*ran_cache))
                              : ran_varlen ? fa05::plan(kernel, *ran, dtype, cfg, {}, varlen_view(*ran_varlen))
                                           : fa05::plan(kernel, *ran, dtype, cfg);
        report["kernel"] = {{"name", kernel},         {"runs", pl.runs}, {"note", pl.note},
                            {"device", fa::gpu_description()},
                            {"Br", pl.Br},            {"Bc", pl.Bc},
                            {"threads", pl.threads},  {"blocks", pl.blocks},
                            {"smem_bytes", pl.smem_bytes}, {"workspace_bytes", pl.workspace_bytes},
                            {"d_kernel", pl.d_kernel}, {"d_buffers", pl.d_buffers},
                            {"splits", pl.splits},    {"keys_per_split", pl.keys_per_split}};
        text << "  kernel   : " << kernel << (pl.runs != kernel ? " (ran " + pl.runs + ")" : "") << " on " << fa::gpu_description() << "; " << pl.blocks
             << (fa05::kernel_info(pl.runs).persistent ? " tiles for persistent thread blocks" : " thread blocks") << " of " << pl.threads
             << " threads, " << pl.smem_bytes << " bytes of shared memory each";
        if (pl.Br > 0) text << ", Br = " << pl.Br << ", Bc = " << pl.Bc;
        if (pl.splits > 0) text << ", keys in " << pl.splits << " splits of " << pl.keys_per_split;
        text << "\n";
        if (!pl.note.empty()) text << "  note     : " << pl.note << "\n";
      });
}
