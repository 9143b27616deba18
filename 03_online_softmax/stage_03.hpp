// Stage 03 as the programs, the tour and the benchmarks see it (common/stage.hpp).
#pragma once
#include "online_softmax.hpp"
#include "stage.hpp"

inline fa::Stage stage_03() {
  return {"03_online_softmax", "running max m and sum l: one pass over keys, S and P never stored",
          online_softmax::forward<float>, {}};
}
