// What a GPU run reports besides its outputs: the extra GPU memory it allocated and the time its
// kernels took on the GPU. Plain C++ (no CUDA here), so the harness, the tour and the CPU-only
// build share one definition; the CUDA side (common/cuda/device_buffer.hpp) feeds the counters.
//
//   extra GPU memory : bytes allocated through counted DeviceBuffers (workspaces such as the
//                      materialised baseline's S and P), live and peak, like memtrack.hpp's heap
//                      count. The device copies of Q, K, V, O and LSE are the run's inputs and
//                      outputs and are not counted (DeviceBuffer's Io kind), as on the CPU.
//   kernel time      : milliseconds between two CUDA events around the kernel launches of one
//                      call (common/cuda/event_timer.hpp); -1 when nothing ran on a GPU.
// Header-only, with inline variables: each program or shared library has one set of counters.
#pragma once
#include <atomic>
#include <cstdint>

namespace fa::devstats {

inline std::atomic<int64_t> g_live{0};
inline std::atomic<int64_t> g_peak{0};
inline std::atomic<double> g_last_ms{-1.0};

inline void on_alloc(int64_t n) {
  const int64_t live = g_live.fetch_add(n) + n;
  int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
}
inline void on_free(int64_t n) { g_live.fetch_sub(n); }
inline int64_t live_bytes() { return g_live.load(); }
inline int64_t peak_bytes() { return g_peak.load(); }
inline void reset_peak() { g_peak.store(g_live.load()); }

// The GPU time of the last call that ran kernels (ms), or -1; reset before a call.
inline void set_last_ms(double ms) { g_last_ms.store(ms); }
inline double last_ms() { return g_last_ms.load(); }

}  // namespace fa::devstats

namespace fa {

// Brackets one call, like ExtraMemory (memtrack.hpp) for the heap: peak counted GPU bytes above
// what was live at construction (bytes), and the GPU time the call recorded (ms, -1 if none).
class ExtraDeviceMemory {
 public:
  ExtraDeviceMemory() : base_(devstats::live_bytes()) {
    devstats::reset_peak();
    devstats::set_last_ms(-1.0);
  }
  int64_t peak_bytes() const { return devstats::peak_bytes() - base_; }
  double gpu_ms() const { return devstats::last_ms(); }

 private:
  int64_t base_;
};

}  // namespace fa
