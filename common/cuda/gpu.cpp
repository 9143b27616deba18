#include "gpu.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "errors.hpp"

namespace fa {

bool gpu_available(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error state of the runtime call
    if (why) {
      *why = std::string(cudaGetErrorName(err));
      // What the runtime says on a machine with no NVIDIA driver at all reads as a version
      // problem; say both.
      *why += err == cudaErrorInsufficientDriver ? ": no NVIDIA driver, or one older than this CUDA runtime"
                                                 : std::string(": ") + cudaGetErrorString(err);
    }
    return false;
  }
  if (n == 0) {
    if (why) *why = "no CUDA device";
    return false;
  }
  // The kernels are built for sm_80 and sm_90a: an older GPU would fail at the first launch.
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = "cannot read the device's compute capability";
    return false;
  }
  if (major < 8) {
    if (why) *why = "compute capability " + std::to_string(major) + "." + std::to_string(minor) +
                    ", older than the 8.0 (Ampere) the kernels are built for";
    return false;
  }
  return true;
}

void require_gpu() {
  std::string why;
  if (!gpu_available(&why)) throw InputError("GPU", "a CUDA GPU (this stage runs on one)", "none (" + why + ")");
}

std::string gpu_description() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (!gpu_available() || cudaGetDevice(&dev) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
    return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, " (sm_%d%d, %d SMs, %.1f GiB)", prop.major, prop.minor,
                prop.multiProcessorCount, double(prop.totalGlobalMem) / double(1ull << 30));
  return std::string(prop.name) + buf;
}

long long gpu_free_bytes() {
  size_t free_b = 0, total = 0;
  if (!gpu_available() || cudaMemGetInfo(&free_b, &total) != cudaSuccess) return -1;
  return static_cast<long long>(free_b);
}

long long gpu_smem_optin_bytes() {
  int dev = 0, bytes = 0;
  if (!gpu_available() || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return -1;
  return bytes;
}

int gpu_compute_capability() {
  int dev = 0, major = 0, minor = 0;
  if (!gpu_available() || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return -1;
  return major * 10 + minor;
}

int gpu_sm_count() {
  int dev = 0, sms = 0;
  if (!gpu_available() || cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return -1;
  return sms;
}

}  // namespace fa
