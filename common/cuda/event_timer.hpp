// GPU time of the work between two points of a stream, measured with CUDA events (the GPU's own
// clock, so host-side launch overhead before the first kernel is not counted).
//
//   EventTimer t(stream);       // records the start event
//   kernel<<<..., stream>>>(...);
//   float ms = t.stop();        // records the stop event, waits for it, returns milliseconds
//
// Throws CudaError.
#pragma once
#include <cuda_runtime.h>

#include "check.hpp"

namespace fa {

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream = nullptr) : stream_(stream) {
    FA_CUDA_CHECK(cudaEventCreate(&start_));
    FA_CUDA_CHECK(cudaEventCreate(&stop_));
    FA_CUDA_CHECK(cudaEventRecord(start_, stream_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  // Milliseconds from construction to now, on the GPU's clock (waits for the stream).
  float stop() {
    FA_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    FA_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    FA_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace fa
