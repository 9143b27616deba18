// A GPU array that counts its bytes: the device side of the course's "extra memory" figure
// (common/devstats.hpp), as memtrack.hpp counts the heap on the CPU.
//
//   DeviceBuffer<float> S(B * H * N_q * N_k, Mem::Extra, stream);  // counted: a workspace
//   DeviceBuffer<uint16_t> Q(n, Mem::Io, stream);                   // not counted: an input
//
// Memory comes from CUDA's stream-ordered allocator (cudaMallocAsync on the device's default
// pool, which keeps freed blocks for reuse), so a workspace allocated on every call costs
// microseconds after the first, and a benchmark that runs a materialised baseline in a loop
// times the baseline, not cudaMalloc. Freed in the destructor, on the same stream.
// Throws CudaError (cudaErrorMemoryAllocation when the GPU is full).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <utility>

#include "check.hpp"
#include "devstats.hpp"

namespace fa {

enum class Mem {
  Io,     // inputs and outputs of a run: not extra memory
  Extra,  // workspace: counted in devstats (live and peak bytes)
};

// Keep freed memory in the current device's pool instead of returning it to the driver at every
// synchronisation (the default release threshold is 0). Called once per process.
inline void keep_pool_memory() {
  static const bool done = [] {
    int dev = 0;
    cudaMemPool_t pool;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess) {
      uint64_t threshold = std::numeric_limits<uint64_t>::max();
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
    }
    return true;
  }();
  (void)done;
}

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // n elements of T (n >= 0); Mem::Extra buffers are counted as extra GPU memory.
  explicit DeviceBuffer(int64_t n, Mem kind = Mem::Extra, cudaStream_t stream = nullptr)
      : n_(n), kind_(kind), stream_(stream) {
    if (n == 0) return;
    keep_pool_memory();
    void* p = nullptr;
    FA_CUDA_CHECK(cudaMallocAsync(&p, size_t(bytes()), stream));
    ptr_ = static_cast<T*>(p);
    if (kind_ == Mem::Extra) devstats::on_alloc(bytes());
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
      kind_ = o.kind_;
      stream_ = o.stream_;
    }
    return *this;
  }

  T* get() const { return ptr_; }
  int64_t size() const { return n_; }                                // elements
  int64_t bytes() const { return n_ * int64_t(sizeof(T)); }          // bytes

 private:
  void release() noexcept {
    if (!ptr_) return;
    cudaFreeAsync(ptr_, stream_);  // a destructor must not throw; errors show at the next check
    if (kind_ == Mem::Extra) devstats::on_free(bytes());
    ptr_ = nullptr;
  }
  T* ptr_ = nullptr;
  int64_t n_ = 0;
  Mem kind_ = Mem::Extra;
  cudaStream_t stream_ = nullptr;
};

}  // namespace fa
