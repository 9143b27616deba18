// Stage 04 as the programs, the tour and the benchmarks see it (common/stage.hpp).
#pragma once
#include "stage.hpp"
#include "tiled.hpp"

inline fa::Stage stage_04() {
  fa::Stage s{"04_tiled_cpu",
              "Q/K/V in blocks that fit in cache (Dao et al. Alg. 1, FA2 loop order), OpenMP",
              [](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O,
                 float* LSE) { tiled::forward<float>(p, Q, K, V, O, LSE); },
              {}};
  s.varlen = true;  // rows through the problem's offsets and row strides: a packed batch runs per sequence
  return s;
}
