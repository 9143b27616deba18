// Stage 01 as the programs, the tour and the benchmarks see it (common/stage.hpp).
#pragma once
#include "naive_backward.hpp"
#include "stage.hpp"

inline fa::Stage stage_01() {
  return {"01_naive", "textbook softmax(scale QK^T) V; S and P materialised; exp may overflow",
          naive::forward<float>, naive::backward<float>, /*nxn_forward=*/2, /*nxn_backward=*/4};
}
