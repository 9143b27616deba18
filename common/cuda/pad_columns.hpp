// Head-dim padding, the plan decision that lets a kernel compiled for a few head dims (its
// "native widths") run any d: the tensors are copied into buffers of the next native width D,
// whose extra D - d columns are zero, and the result is copied back without them. Zero columns
// change nothing: a zero in Q or K adds 0 to every score q . k, and a zero column of V only makes
// a column of O that is thrown away. The scale stays 1/sqrt(d) of the real d (the caller passes
// it explicitly: the padded problem's own default would be 1/sqrt(D)). FlashAttention-2 does the
// same in two steps: its Python wrapper pads d to a multiple of 8, and each compiled width serves
// every d up to it, its loads predicated past d.
//
// The cost is the copies (about 2 (d + D) bytes per element of Q, K, V and O) and the wasted
// columns of the products; both are measured in stage 05's lab notebook.
//
// Host code. Every copy is stream-ordered on `stream`; nothing synchronises. Throws CudaError.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "check.hpp"

namespace fa {

// dst (rows, D) = src (rows, d) with columns d .. D-1 zero; row-major, elem bytes per element,
// both on the device, D >= d.
inline void pad_columns(const void* src, void* dst, int64_t rows, int64_t d, int64_t D, int64_t elem,
                        cudaStream_t stream) {
  if (D > d) FA_CUDA_CHECK(cudaMemsetAsync(dst, 0, size_t(rows * D * elem), stream));
  FA_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(D * elem), src, size_t(d * elem), size_t(d * elem), size_t(rows),
                                  cudaMemcpyDeviceToDevice, stream));
}

// dst (rows, d) = the first d columns of src (rows, D); row-major, on the device.
inline void unpad_columns(const void* src, void* dst, int64_t rows, int64_t D, int64_t d, int64_t elem,
                          cudaStream_t stream) {
  FA_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(d * elem), src, size_t(D * elem), size_t(d * elem), size_t(rows),
                                  cudaMemcpyDeviceToDevice, stream));
}

}  // namespace fa
