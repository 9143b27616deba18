// Stage 03 as the programs, the tour and the benchmarks see it (common/stage.hpp).
#pragma once
#include "online_softmax.hpp"
#include "stage.hpp"

inline fa::Stage stage_03() {
  fa::Stage s{"03_online_softmax", "running max m and sum l: one pass over keys, S and P never stored",
              online_softmax::forward<float>, {}};
  s.varlen = true;  // every row through the problem's offsets: a packed batch runs per sequence
  return s;
}
