#include "problem.hpp"

#include <initializer_list>
#include <sstream>

#include "errors.hpp"

namespace fa {

std::string AttnProblem::describe() const {
  std::ostringstream s;
  s << "B=" << B << " H=" << H << " H_kv=" << H_kv << " N_q=" << N_q << " N_k=" << N_k
    << " d=" << d << " causal=" << (causal ? 1 : 0) << " scale=" << resolved_scale();
  if (has_window()) s << " window=" << window_left << "," << window_right;
  if (softcap > 0.f) s << " softcap=" << softcap;
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
  // Sizes whose element counts overflow int64 (or exceed any memory) are rejected up front.
  const int64_t limit = int64_t(1) << 40;
  auto elems = [&](std::initializer_list<int64_t> dims) {
    int64_t n = 1;
    for (int64_t x : dims)
      if (__builtin_mul_overflow(n, x, &n) || n > limit) return limit + 1;
    return n;
  };
  if (elems({p.B, p.H, p.N_q, p.d}) > limit || elems({p.B, p.H, p.N_q, p.N_k}) > limit ||
      elems({p.B, p.H_kv, p.N_k, p.d}) > limit)
    throw InputError("--batch/--heads/--seq-q/--seq-k/--head-dim",
                     "B*H*N_q*d, B*H_kv*N_k*d and B*H*N_q*N_k at most 2^40",
                     "B=" + std::to_string(p.B) + " H=" + std::to_string(p.H) + " H_kv=" +
                         std::to_string(p.H_kv) + " N_q=" + std::to_string(p.N_q) + " N_k=" +
                         std::to_string(p.N_k) + " d=" + std::to_string(p.d));
  if (p.scale != 0.f && !(std::isfinite(p.scale) && p.scale > 0.f)) {
    std::ostringstream s;
    s << p.scale;
    throw InputError("--scale", "a finite number > 0", s.str());
  }
  if (p.window_left < -1 || p.window_right < -1)
    throw InputError("--window", "L,R with each side >= 0, or -1 for unbounded",
                     std::to_string(p.window_left) + "," + std::to_string(p.window_right));
  if (p.lse_head_stride != 0 && p.lse_head_stride < p.N_q)
    throw InputError("lse_head_stride", "0 (contiguous) or >= N_q = " + std::to_string(p.N_q),
                     std::to_string(p.lse_head_stride));
  // softcap 0 means "none" inside AttnProblem (as scale 0 means 1/sqrt(d)); the CLI refuses a
  // typed 0 (problem_from_flags).
  if (!(std::isfinite(p.softcap) && p.softcap >= 0.f)) {
    std::ostringstream s;
    s << p.softcap;
    throw InputError("--softcap", "a finite number > 0", s.str());
  }
}

}  // namespace fa
