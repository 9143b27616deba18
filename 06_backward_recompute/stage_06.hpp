// Stage 06 as the programs, the tour and the benchmarks see it (common/stage.hpp): stage 04's
// tiled forward (it returns O and LSE, all the backward needs) and the recomputing backward.
#pragma once
#include "backward_tiled.hpp"
#include "stage.hpp"
#include "tiled.hpp"

inline fa::Stage stage_06() {
  fa::Stage s;
  s.name = "06_backward_recompute";
  s.idea = "backward from O and LSE: recompute P = exp(S - LSE) block by block, D = rowsum(dO*O)";
  s.forward = [](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O,
                 float* LSE) { tiled::forward<float>(p, Q, K, V, O, LSE); };
  s.backward = [](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
                  const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    bwd::backward<float>(p, Q, K, V, O, dO, LSE, dQ, dK, dV);
  };
  s.varlen = true;  // rows through the problem's offsets and row strides: a packed batch runs per sequence
  return s;
}
