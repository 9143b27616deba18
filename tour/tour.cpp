// The tour: every stage that is built, in order, on one input (by default real Q/K/V from a
// pretrained transformer, data/PROVENANCE.md), in one table: the idea each stage adds, its error
// against stage 01 and against float64, the extra memory it measured, and its time.
// Takes the same flags as every stage program (common/cli.hpp), so `tour --seq-q 4096` or
// `tour --q q.npy --k k.npy --v v.npy` work too.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "cli.hpp"
#include "stage_01.hpp"
#include "stage_02.hpp"
#include "stage_03.hpp"
#include "stage_04.hpp"

namespace {

struct Entry {
  std::string name, idea;
  std::optional<fa::Stage> stage;  // empty: not built, see `why`
  std::string why;
};

std::vector<Entry> stages() {
  std::vector<Entry> v;
  auto built = [&](const fa::Stage& s) { v.push_back({s.name, s.idea, s, ""}); };
  built(stage_01());
  built(stage_02());
  built(stage_03());
  built(stage_04());
  v.push_back({"05_cuda_tiled", "the tiling in GPU shared memory, then tensor cores", std::nullopt, "not built yet; will need an NVIDIA GPU"});
  v.push_back({"06_backward_recompute", "backward from LSE: recompute P block by block", std::nullopt, "not built yet"});
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
    fa::check_dtype(f);
    fa::Inputs in = fa::make_inputs(f);
    int nxn = 0;
    for (const Entry& e : stages())
      if (e.stage) nxn = std::max({nxn, e.stage->nxn_forward, e.stage->nxn_backward});
    fa::check_memory(fa::estimate_run_bytes(in.p, nxn, true, !f.no_check), "--seq-q/--seq-k",
                     "the N_q x N_k matrices of stages 01 and 02");
    fa::add_grad_output(in, "", f.seed);
    std::string txt;
    out(txt, "FlashAttention course tour\ninput  : %s\nproblem: %s\n", in.source.c_str(),
        in.p.describe().c_str());
    std::optional<fa::Baselines> base;
    if (!f.no_check) {
      base.emplace(in, /*with_backward=*/true);
      out(txt, "max |S|: %.4g (largest logit; float32 exp overflows above 88.72)\n", base->max_abs_logit());
    }
    out(txt, "errors are max |X - X_ref| over all elements (backward rows: the largest over dQ, dK,\n"
             "dV); stage 01 is the baseline, so its 'vs 01' is 0; extra memory is measured (peak\n"
             "heap bytes above inputs and outputs); time is one run, wall clock (benchmarks: bench_*)\n\n");
    out(txt, "%-28s %-13s %-13s %-13s %-13s %10s\n", "stage", "O vs 01", "O vs f64", "LSE vs f64",
        "extra mem", "time ms");
    out(txt, "%s\n", std::string(95, '-').c_str());
    nlohmann::json rows = nlohmann::json::array();
    for (const Entry& e : stages()) {
      if (!e.stage) {
        out(txt, "%-28s (%s) %s\n", e.name.c_str(), e.why.c_str(), e.idea.c_str());
        rows.push_back({{"stage", e.name}, {"built", false}, {"why", e.why}});
        continue;
      }
      const fa::ForwardRun r = fa::run_forward(e.stage->forward, in);
      fa::warn_nonfinite("tour: " + e.name, "O", r.O, false);
      fa::warn_nonfinite("tour: " + e.name, "LSE", r.LSE, true);
      std::string c1 = "-", c2 = "-", c3 = "-";
      nlohmann::json row = {{"stage", e.name}, {"built", true}, {"pass", "forward"},
                            {"ms", r.ms}, {"extra_bytes", r.extra_bytes}};
      if (base) {
        const fa::ForwardErrors er = base->compare(r);
        c1 = g(er.O_vs_01.max_abs), c2 = g(er.O_vs_f64.max_abs), c3 = g(er.LSE_vs_f64.max_abs);
        row["O_vs_01"] = er.O_vs_01.max_abs, row["O_vs_f64"] = er.O_vs_f64.max_abs;
        row["LSE_vs_f64"] = er.LSE_vs_f64.max_abs;
      }
      out(txt, "%-28s %-13s %-13s %-13s %-13s %10.2f\n", e.name.c_str(), c1.c_str(), c2.c_str(),
          c3.c_str(), fa::human_bytes(r.extra_bytes).c_str(), r.ms);
      rows.push_back(row);
      if (e.stage->backward) {
        const fa::BackwardRun b = fa::run_backward(e.stage->backward, in, r);
        std::string d1 = "-", d2 = "-";
        if (base) {
          const fa::BackwardErrors eb = base->compare(b);
          d1 = g(std::max({eb.dQ_vs_01.max_abs, eb.dK_vs_01.max_abs, eb.dV_vs_01.max_abs}));
          d2 = g(std::max({eb.dQ_vs_f64.max_abs, eb.dK_vs_f64.max_abs, eb.dV_vs_f64.max_abs}));
        }
        out(txt, "%-28s %-13s %-13s %-13s %-13s %10.2f\n", "  backward: dQ, dK, dV", d1.c_str(),
            d2.c_str(), "-", fa::human_bytes(b.extra_bytes).c_str(), b.ms);
        rows.push_back({{"stage", e.name}, {"built", true}, {"pass", "backward"}, {"ms", b.ms},
                        {"extra_bytes", b.extra_bytes}});
      }
      out(txt, "    idea: %s\n", e.idea.c_str());
    }
    nlohmann::json report = {{"input", in.source}, {"problem", fa::problem_json(in.p)}, {"stages", rows}};
    if (base) report["max_abs_logit"] = base->max_abs_logit();
    if (f.json) std::cout << report.dump(2) << "\n";
    else std::cout << txt;
    return 0;
  });
}
