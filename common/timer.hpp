// Wall-clock timing for the stage programs' one-shot report. Benchmarks use Google Benchmark.
#pragma once
#include <chrono>

namespace fa {

class Timer {
 public:
  Timer() : t0_(std::chrono::steady_clock::now()) {}
  // Milliseconds since construction.
  double ms() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace fa
