// A GPU array that counts its bytes: the device side of the course's "extra memory" figure
// (common/devstats.hpp), as memtrack.hpp counts the heap on the CPU.
//
//   DeviceBuffer<float> S(B * H * N_q * N_k, Mem::Extra, stream);  // counted: a workspace
//   DeviceBuffer<uint16_t> Q(n, Mem::Io, stream);                   // not counted: an input
//
// Memory comes from CUDA's stream-ordered allocator, from a pool of the course's own per device
// (course_pool()) that keeps freed blocks for reuse, so a workspace allocated on every call costs
// microseconds after the first, and a benchmark that runs a materialised baseline in a loop
// times the baseline, not cudaMalloc. The process's default pool (PyTorch's, say, when
// libfa05.so is loaded into it) is left as it was; trim_course_pool() gives cached memory back.
// Freed in the destructor, on the same stream.
// Throws CudaError (cudaErrorMemoryAllocation when the GPU is full).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include "check.hpp"
#include "devstats.hpp"

namespace fa {

enum class Mem {
  Io,     // inputs and outputs of a run: not extra memory
  Extra,  // workspace: counted in devstats (live and peak bytes)
};

// The course's memory pool on the current device, made on first use: it keeps freed memory for
// reuse (release threshold: never) instead of returning it to the driver at every
// synchronisation, which is what the default pool does. Throws CudaError.
inline cudaMemPool_t course_pool() {
  static std::mutex mu;
  static std::map<int, cudaMemPool_t> pools;  // one per device
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools.find(dev);
  if (it != pools.end()) return it->second;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = dev;
  cudaMemPool_t pool = nullptr;
  FA_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  FA_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  pools[dev] = pool;
  return pool;
}

// Returns the course pool's cached (freed, unused) memory on the current device to the driver.
inline void trim_course_pool() { FA_CUDA_CHECK(cudaMemPoolTrimTo(course_pool(), 0)); }

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // n elements of T (n >= 0); Mem::Extra buffers are counted as extra GPU memory.
  explicit DeviceBuffer(int64_t n, Mem kind = Mem::Extra, cudaStream_t stream = nullptr)
      : n_(n), kind_(kind), stream_(stream) {
    if (n == 0) return;
    void* p = nullptr;
    FA_CUDA_CHECK(cudaMallocFromPoolAsync(&p, size_t(bytes()), course_pool(), stream));
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
