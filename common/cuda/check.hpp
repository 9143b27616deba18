// CUDA error checking, once for every GPU file: a failed CUDA call or kernel launch becomes a
// C++ exception naming the call, the file and line, and CUDA's own message. Host code only.
//
//   FA_CUDA_CHECK(cudaMemcpy(...));          // throws fa::CudaError if the call failed
//   kernel<<<grid, block, smem, stream>>>(...);
//   FA_CUDA_CHECK(cudaGetLastError());       // a bad launch configuration shows here
//
// Stage programs turn a CudaError into one line on stderr and exit code 1 (common/cli.cpp):
// a kernel that faults is a bug in the course, not bad input.
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace fa {

struct CudaError : std::runtime_error {
  cudaError_t code;
  CudaError(cudaError_t c, const std::string& what) : std::runtime_error(what), code(c) {}
};

inline void cuda_check(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw CudaError(err, std::string("CUDA error: ") + call + " at " + file + ":" + std::to_string(line) +
                           ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

}  // namespace fa

#define FA_CUDA_CHECK(call) ::fa::cuda_check((call), #call, __FILE__, __LINE__)

namespace fa {

// Shared memory above 48 KiB must be asked for, per kernel. Asks for `bytes` for kernel_fn and
// returns true, or returns false (asking nothing) when this GPU allows a thread block less; then
// *limit holds what it allows (bytes), for the caller's own one-line refusal.
template <class Kernel>
bool opt_in_smem(Kernel* kernel_fn, long long bytes, int* limit) {
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (bytes > *limit) return false;
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel_fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  return true;
}

}  // namespace fa
