// See bench_baselines.hpp: stages 01-03 compiled with their own programs' flags.
#include "bench_baselines.hpp"

#include "naive.hpp"
#include "online_softmax.hpp"
#include "safe_softmax.hpp"

namespace bench_baselines {
void stage01(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
  naive::forward<float>(p, Q, K, V, O, LSE);
}
void stage02(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
  safe_softmax::forward<float>(p, Q, K, V, O, LSE);
}
void stage03(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
  online_softmax::forward<float>(p, Q, K, V, O, LSE);
}
}  // namespace bench_baselines
