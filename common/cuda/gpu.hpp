// Is there a GPU, and which one. Host code; safe to call on a machine without a GPU or driver
// (the CUDA runtime then answers with an error code, which is reported, never thrown).
#pragma once
#include <string>

namespace fa {

// True if a CUDA device can be used: there is one, and it is compute capability 8.0 (Ampere) or
// newer, which the kernels are built for. Otherwise false, with `why` set to the reason
// (e.g. "cudaErrorNoDevice: no CUDA-capable device is detected").
bool gpu_available(std::string* why = nullptr);

// Throws InputError("GPU", "a CUDA GPU ...", <the reason>) unless gpu_available(): the one line
// and exit code 2 a GPU stage gives on a machine without a GPU.
void require_gpu();

// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)" for the current device; "" if none.
std::string gpu_description();

// Bytes of memory free on the current device (cudaMemGetInfo); -1 if unknown.
long long gpu_free_bytes();

// Bytes of shared memory one thread block may opt in to on the current device (227 KiB on an
// H100/H200, 163 KiB on an A100); -1 if unknown.
long long gpu_smem_optin_bytes();

// Compute capability of the current device as major * 10 + minor (90 on an H100/H200, 80 on an
// A100); -1 if unknown.
int gpu_compute_capability();

// Streaming multiprocessors of the current device (132 on an H200, 108 on an A100); -1 if unknown.
int gpu_sm_count();

}  // namespace fa
