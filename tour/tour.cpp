// The tour: every stage that is built, in order, on one input (by default real Q/K/V from a
// pretrained transformer, data/PROVENANCE.md), in one table: the idea each stage adds, its error
// against stage 01 and against float64, the extra memory it measured, and its time.
// Takes the same flags as every stage program (common/cli.hpp), so `tour --seq-q 4096` or
// `tour --q q.npy --k k.npy --v v.npy` work too.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "cli.hpp"
#include "errors.hpp"
#include "stage_01.hpp"
#include "stage_02.hpp"
#include "stage_03.hpp"
#include "tour_tiled.hpp"
#ifdef FA_HAVE_CUDA
#include "gpu.hpp"
#include "stage_05.hpp"
#endif

namespace {

constexpr int kRuns = 3;  // each row's time: the fastest of this many runs

struct Entry {
  std::string name, idea;
  std::optional<fa::Stage> stage;  // empty: not built, see `why`
  std::string why;
  std::vector<std::string> also;  // GPU: the other versions asked for that run this same kernel
};

// The stages in course order. GPU stages run in `gpu_dtype` (--dtype); the CPU stages in fp32.
// p is the problem (a GPU row says which kernel really runs it when a version falls back).
std::vector<Entry> stages(fa::DType gpu_dtype, const fa::AttnProblem& p) {
  std::vector<Entry> v;
  auto built = [&](const fa::Stage& s) { v.push_back({s.name, s.idea, s, "", {}}); };
  built(stage_01());
  built(stage_02());
  built(stage_03());
  built(tour_stage_04());
  const char* idea05 = "the tiling in GPU shared memory, then tensor cores";
#ifdef FA_HAVE_CUDA
  std::string why;
  if (fa::gpu_available(&why)) {
    // One row per kernel that really runs this problem: a version that falls back to another
    // (e.g. v8 at d = 64, which runs v7) is listed under the kernel it ran.
    // "auto" last: the kernel plan() picks for this problem, listed under the one it ran.
    std::map<std::string, size_t> row_of;  // kernel name -> its row in v
    std::vector<std::string> names;
    for (const fa05::KernelInfo& k : fa05::kernels()) names.push_back(k.name);
    names.push_back("auto");
    for (const std::string& name : names) {
      std::string runs;
      try {
        runs = fa05::plan(name, p, gpu_dtype).runs;
      } catch (const fa::InputError& e) {  // e.g. d = 300: this kernel does not run the problem
        v.push_back({"05_cuda_tiled " + name, name == "auto" ? "the fastest kernel for the problem" : fa05::kernel_info(name).idea,
                     std::nullopt, e.what(), {}});
        continue;
      }
      if (auto it = row_of.find(runs); it != row_of.end()) {
        v[it->second].also.push_back(name);
        continue;
      }
      fa::Stage s = stage_05(runs);
      s.name = "05_cuda_tiled " + runs;
      s.forward = s.forward_for(gpu_dtype);
      row_of[runs] = v.size();
      v.push_back({s.name, fa05::kernel_info(runs).idea, s, "", {}});
      if (runs != name) v.back().also.push_back(name);
    }
  } else {
    v.push_back({"05_cuda_tiled", idea05, std::nullopt, "no GPU: " + why, {}});
  }
#else
  (void)gpu_dtype, (void)p;
  v.push_back({"05_cuda_tiled", idea05, std::nullopt, "not built: no CUDA compiler (nvcc) at configure time", {}});
#endif
  built(tour_stage_06());
  return v;
}

// printf into a string (the table goes to stdout only without --json).
template <class... A>
void out(std::string& buf, const char* fmt, A... a) {
  char line[512];
  std::snprintf(line, sizeof line, fmt, a...);
  buf += line;
}

std::string g(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2e", x);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tour: every stage of the course on one input, side by side", "tour"};
  fa::CliFlags f;
  fa::add_common_flags(app, f, /*backward=*/false, /*outputs=*/false);
  return fa::run_program(app, argc, argv, [&]() -> int {
    fa::refuse_cache_flags(f);  // the tour runs the plain problem through every stage
    fa::refuse_varlen_flags(f, "the tour");
    const fa::DType gpu_dtype = fa::parse_dtype(f.dtype);  // for the GPU rows only
    fa::Inputs in = fa::make_inputs(f);
    const std::vector<Entry> all = stages(gpu_dtype, in.p);
    int nxn = 0;
    for (const Entry& e : all)
      if (e.stage) nxn = std::max({nxn, e.stage->nxn_forward, e.stage->nxn_backward});
    fa::check_memory(fa::estimate_run_bytes(in.p, nxn, true, !f.no_check), "--seq-q/--seq-k",
                     "the N_q x N_k matrices of stages 01 and 02");
    fa::add_grad_output(in, "", f.seed);
    std::string txt;
    out(txt, "FlashAttention course tour\ninput  : %s\nproblem: %s\n", in.source.c_str(),
        in.p.describe().c_str());
    out(txt, "cpu    : stages 04 and 06 built for %s (%d floats per vector), %d OpenMP threads\n",
        tour_tiled_isa(), tour_tiled_vector_width(), omp_get_max_threads());
    std::optional<fa::Baselines> base;
    if (!f.no_check) {
      base.emplace(in, /*with_backward=*/true);
      out(txt, "max |S|: %.4g (largest logit; float32 exp overflows above 88.72)\n", base->max_abs_logit());
    }
    out(txt, "errors are max |X - X_ref| over all elements (backward rows: the largest over dQ, dK,\n"
             "dV); stage 01 is the baseline, so its 'vs 01' is 0; extra memory is measured (peak\n"
             "heap bytes above inputs and outputs); time is the best of 3 runs, wall clock\n"
             "(benchmarks: bench_*)\n");
    const bool any_gpu = std::any_of(all.begin(), all.end(), [](const Entry& e) { return e.stage && e.stage->forward_for; });
    if (any_gpu)
      out(txt, "GPU rows (05_*, in %s): extra memory on the GPU and kernel time by CUDA events\n", f.dtype.c_str());
    out(txt, "\n");
    out(txt, "%-28s %-13s %-13s %-13s %-13s %10s\n", "stage", "O vs 01", "O vs f64", "LSE vs f64",
        "extra mem", "time ms");
    out(txt, "%s\n", std::string(95, '-').c_str());
    nlohmann::json rows = nlohmann::json::array();
    for (const Entry& e : all) {
      if (!e.stage) {
        out(txt, "%-28s (%s) %s\n", e.name.c_str(), e.why.c_str(), e.idea.c_str());
        rows.push_back({{"stage", e.name}, {"built", false}, {"why", e.why}});
        continue;
      }
      // Three runs, the fastest time kept (the first run also pays for cold caches and page
      // faults); the results are the same every run (tested per stage), the first one is kept.
      fa::ForwardRun r = fa::run_forward(e.stage->forward, in);
      for (int rep = 1; rep < kRuns; ++rep) {
        const fa::ForwardRun again = fa::run_forward(e.stage->forward, in);
        r.ms = std::min(r.ms, again.ms);
        if (r.gpu_ms >= 0) r.gpu_ms = std::min(r.gpu_ms, again.gpu_ms);
      }
      fa::warn_nonfinite("tour: " + e.name, "O", r.O, false);
      fa::warn_nonfinite("tour: " + e.name, "LSE", r.LSE, true);
      std::string c1 = "-", c2 = "-", c3 = "-";
      const bool gpu = r.gpu_ms >= 0;
      nlohmann::json row = {{"stage", e.name}, {"built", true}, {"pass", "forward"},
                            {"ms", gpu ? r.gpu_ms : r.ms}, {"extra_bytes", gpu ? r.gpu_extra_bytes : r.extra_bytes}};
      if (gpu) row["gpu"] = true, row["dtype"] = f.dtype;
      if (!e.also.empty()) row["also_asked_as"] = e.also;
      if (base) {
        const fa::ForwardErrors er = base->compare(r);
        c1 = g(er.O_vs_01.max_abs), c2 = g(er.O_vs_f64.max_abs), c3 = g(er.LSE_vs_f64.max_abs);
        row["O_vs_01"] = er.O_vs_01.max_abs, row["O_vs_f64"] = er.O_vs_f64.max_abs;
        row["LSE_vs_f64"] = er.LSE_vs_f64.max_abs;
      }
      const std::string mem = gpu ? fa::human_bytes(r.gpu_extra_bytes) + " GPU" : fa::human_bytes(r.extra_bytes);
      out(txt, "%-28s %-13s %-13s %-13s %-13s %10.2f\n", e.name.c_str(), c1.c_str(), c2.c_str(),
          c3.c_str(), mem.c_str(), gpu ? r.gpu_ms : r.ms);
      rows.push_back(row);
      if (e.stage->backward) {
        fa::BackwardRun b = fa::run_backward(e.stage->backward, in, r);
        for (int rep = 1; rep < kRuns; ++rep) b.ms = std::min(b.ms, fa::run_backward(e.stage->backward, in, r).ms);
        std::string d1 = "-", d2 = "-";
        nlohmann::json brow = {{"stage", e.name}, {"built", true}, {"pass", "backward"}, {"ms", b.ms},
                               {"extra_bytes", b.extra_bytes}};
        if (base) {
          const fa::BackwardErrors eb = base->compare(b);
          d1 = g(std::max({eb.dQ_vs_01.max_abs, eb.dK_vs_01.max_abs, eb.dV_vs_01.max_abs}));
          d2 = g(std::max({eb.dQ_vs_f64.max_abs, eb.dK_vs_f64.max_abs, eb.dV_vs_f64.max_abs}));
          brow["dQ_vs_01"] = eb.dQ_vs_01.max_abs, brow["dK_vs_01"] = eb.dK_vs_01.max_abs;
          brow["dV_vs_01"] = eb.dV_vs_01.max_abs, brow["dQ_vs_f64"] = eb.dQ_vs_f64.max_abs;
          brow["dK_vs_f64"] = eb.dK_vs_f64.max_abs, brow["dV_vs_f64"] = eb.dV_vs_f64.max_abs;
        }
        out(txt, "%-28s %-13s %-13s %-13s %-13s %10.2f\n", "  backward: dQ, dK, dV", d1.c_str(),
            d2.c_str(), "-", fa::human_bytes(b.extra_bytes).c_str(), b.ms);
        rows.push_back(brow);
      }
      out(txt, "    idea: %s\n", e.idea.c_str());
      if (!e.also.empty()) {
        std::string names;
        for (const std::string& a : e.also) names += (names.empty() ? "" : ", ") + a;
        out(txt, "    also asked as %s: no path of their own for this problem, they run %s\n",
            names.c_str(), e.name.substr(e.name.rfind(' ') + 1).c_str());
      }
    }
    nlohmann::json report = {{"input", in.source}, {"problem", fa::problem_json(in.p)}, {"stages", rows}};
    if (base) report["max_abs_logit"] = base->max_abs_logit();
    if (f.json) std::cout << report.dump(2) << "\n";
    else std::cout << txt;
    return 0;
  });
}
