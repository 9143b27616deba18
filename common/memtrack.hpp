// Extra-memory accounting, measured rather than estimated.
//
// memtrack.cpp replaces the global operator new/delete of every program that links fa_common, and
// counts the bytes the heap actually hands out (malloc_usable_size), so every std::vector a stage
// allocates for S, P, m, l or a block buffer is seen. ExtraMemory brackets one call:
//
//   fa::ExtraMemory mem;             // baseline = bytes live now (inputs and outputs included)
//   stage::forward(p, Q, K, V, O, LSE);
//   int64_t bytes = mem.peak_bytes(); // the most bytes live above the baseline during the call
//
// Memory from malloc() directly, or from the stack, is not counted; stages use std::vector.
#pragma once
#include <cstdint>

namespace fa {

namespace memtrack {
int64_t live_bytes();     // bytes currently allocated through operator new
int64_t peak_bytes();     // high-water mark of live_bytes() since the last reset_peak()
void reset_peak();        // peak := live
}  // namespace memtrack

class ExtraMemory {
 public:
  ExtraMemory() : base_(memtrack::live_bytes()) { memtrack::reset_peak(); }
  // Peak bytes allocated above the baseline since construction (units: bytes).
  int64_t peak_bytes() const { return memtrack::peak_bytes() - base_; }

 private:
  int64_t base_;
};

}  // namespace fa
