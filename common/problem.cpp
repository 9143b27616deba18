#include "problem.hpp"

#include <sstream>

#include "errors.hpp"

namespace fa {

std::string AttnProblem::describe() const {
  std::ostringstream s;
  s << "B=" << B << " H=" << H << " H_kv=" << H_kv << " N_q=" << N_q << " N_k=" << N_k
    << " d=" << d << " causal=" << (causal ? 1 : 0) << " scale=" << resolved_scale();
  return s.str();
}

void validate(const AttnProblem& p) {
  auto positive = [](const char* arg, int64_t v) {
    if (v < 1) throw InputError(arg, "an integer >= 1", std::to_string(v));
  };
  positive("--batch", p.B);
  positive("--heads", p.H);
  positive("--kv-heads", p.H_kv);
  positive("--seq-q", p.N_q);
  positive("--seq-k", p.N_k);
  positive("--head-dim", p.d);
  if (p.H % p.H_kv != 0)
    throw InputError("--kv-heads", "a divisor of --heads (" + std::to_string(p.H) + ")",
                     std::to_string(p.H_kv));
  if (p.scale != 0.f && !(std::isfinite(p.scale) && p.scale > 0.f)) {
    std::ostringstream s;
    s << p.scale;
    throw InputError("--scale", "a finite number > 0", s.str());
  }
}

}  // namespace fa
