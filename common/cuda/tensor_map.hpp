// TMA tensor maps, made on the host for the kernels that copy tiles with the copy engine: stage
// 05's v12 ... v14 (05_cuda_tiled/runner.cu) and stage 06's gpu_v4 at d = 192 and 256
// (06_backward_recompute/runner_bwd.cu). The device side is ptx::tma_load_3d (05_cuda_tiled/
// kernels/ptx.cuh), which a map is passed to as a __grid_constant__ kernel parameter.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "check.hpp"
#include "dtype.hpp"

namespace fa {

// A box is 64 columns wide: one row of the 128-byte swizzle in a 16-bit type.
constexpr int kTmaBoxCols = 64;

// A TMA tensor map of a (slices, rows, d) tensor of 16-bit elements at base: boxes of 64
// columns x box_rows rows of one slice, written to shared memory in the 128-byte swizzle (v7's
// layout); rows past `rows` read as zeros. Row r of slice s starts at element s slice_pitch + r
// row_pitch (0, 0: contiguous, d and rows d). A packed batch's [total, H, d] is rows = total
// tokens H d apart, slices = heads d apart: the copy engine takes any order of the strides. CUDA
// driver API, cuTensorMapEncodeTiled ("Tensor Map Object Management"), reached through the runtime
// so the build links no libcuda. Host only: no GPU work. Throws fa::CudaError if the driver has no
// such entry point or refuses the map (it checks alignment: base and row pitch 16-byte aligned,
// which stage 05's plan() and check_alignment ensure, and stage 06's 16-byte copies need too).
// The same for any element type: elem_bytes per element, box_cols elements a box row (the
// 128-byte swizzle takes at most 128 bytes: 64 of a 16-bit type, 128 of stage 05's e4m3 bytes,
// v15). tensor_map_3d below is this with the dtype's 16-bit map.
inline CUtensorMap tensor_map_3d_typed(const void* base, CUtensorMapDataType type, int64_t elem_bytes, int box_cols,
                                       int64_t d, int64_t rows, int64_t slices, int box_rows, int64_t row_pitch = 0,
                                       int64_t slice_pitch = 0) {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FA_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || fn == nullptr)
      throw fa::CudaError(cudaErrorNotSupported, "CUDA driver: no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  const cuuint64_t elem = cuuint64_t(elem_bytes);
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(rows), cuuint64_t(slices)};
  if (row_pitch == 0) row_pitch = d, slice_pitch = rows * d;
  const cuuint64_t strides[2] = {cuuint64_t(row_pitch) * elem, cuuint64_t(slice_pitch) * elem};  // bytes, dims 1, 2
  const cuuint32_t box[3] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1};
  const cuuint32_t step[3] = {1, 1, 1};
  CUtensorMap map;
  const CUresult r = encode(&map, type, 3, const_cast<void*>(base), dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw fa::CudaError(cudaErrorInvalidValue, "cuTensorMapEncodeTiled refused a tensor map (CUresult " + std::to_string(int(r)) + ")");
  return map;
}

// The 16-bit map of the first paragraph: fp16 or bf16, boxes of 64 columns.
inline CUtensorMap tensor_map_3d(const void* base, fa::DType dtype, int64_t d, int64_t rows, int64_t slices, int box_rows,
                                 int64_t row_pitch = 0, int64_t slice_pitch = 0) {
  return tensor_map_3d_typed(base, dtype == fa::DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                             fa::dtype_bytes(dtype), kTmaBoxCols, d, rows, slices, box_rows, row_pitch, slice_pitch);
}

}  // namespace fa
