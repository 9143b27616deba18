// Stage 02 as the programs, the tour and the benchmarks see it (common/stage.hpp).
#pragma once
#include "safe_softmax.hpp"
#include "stage.hpp"

inline fa::Stage stage_02() {
  fa::Stage s{"02_safe_softmax", "subtract the row max before exp: 3 passes over S, no overflow",
              safe_softmax::forward<float>, {}, /*nxn_forward=*/2};
  s.varlen = true;  // every row through the problem's offsets: a packed batch runs per sequence
  return s;
}
