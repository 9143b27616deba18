// common/baseline.hpp's baseline: stage 01, compiled as in its own program.
#include "baseline.hpp"

#include "naive_backward.hpp"

namespace fa {

void baseline_forward(const AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
  naive::forward<float>(p, Q, K, V, O, LSE);
}

void baseline_backward(const AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
                       const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
  naive::backward<float>(p, Q, K, V, O, dO, LSE, dQ, dK, dV);
}

}  // namespace fa
