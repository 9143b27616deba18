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
