// The only kernel code the versions share: thin wrappers around a few PTX instructions, so each
// kernel file reads as the algorithm. PTX ISA reference: "Warp-level matrix instructions"
// (mma.sync m16n8k16, ldmatrix), "Data movement" (cp.async) and "Floating-point" (ex2.approx).
//
// The mma.sync m16n8k16 fragments (per warp of 32 lanes; g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major)  a[0]: row g,   cols 2t, 2t+1       a[1]: row g+8, cols 2t, 2t+1
//                           a[2]: row g,   cols 8+2t, 8+2t+1   a[3]: row g+8, cols 8+2t, 8+2t+1
//   B (16 x 8, "col")       b[0]: rows 2t, 2t+1 of col g       b[1]: rows 8+2t, 8+2t+1 of col g
//   C, D (16 x 8, fp32)     c[0], c[1]: row g, cols 2t, 2t+1   c[2], c[3]: row g+8, cols 2t, 2t+1
// Each a[i], b[i] register holds two 16-bit values (the lower column/row in the low half).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace fa05::ptx {

// ldmatrix .x4: four 8x8 matrices of 16-bit values from shared memory into registers. Lane l
// passes the address of row l % 8 of matrix l / 8 (16 contiguous bytes); lane l receives, of each
// matrix i, r[i] = its elements (row l / 4, cols 2(l % 4), 2(l % 4) + 1): exactly an mma fragment.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

// The same, each matrix transposed: lane l receives (rows 2(l % 4), 2(l % 4) + 1, col l / 4).
// Loads a B fragment from a matrix stored with k along its rows (V, row-major [key][dim]).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a)
               : "memory");
}

// d += A B on the tensor cores: A 16x16, B 16x8 in T (fp16 or bf16), d 16x8 in fp32.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                             uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                      uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded (to nearest even) into one register of two T: lo in the low half.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// cp.async (sm_80+): copy 16 bytes global -> shared without passing through registers; the
// thread goes on at once and the copy completes in the background. When `valid` is false no
// byte is read from `src` (src-size 0) and the 16 bytes at `dst` are filled with zeros: how a
// ragged tile's rows past N are zeroed without an out-of-bounds read. .cg: cache in L2 only
// (each K/V byte is used once per thread block from shared memory, L1 would only be polluted).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// The same for 4 bytes (one float: a row's LSE or D), .ca: the only cache mode 4-byte copies
// allow. Used by the backward (06_backward_recompute/kernels/bwd_v2_mma.cuh).
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
// Closes the group of cp.async issued since the last commit (one group = one tile load).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight. Other threads'
// copies are only visible after a __syncthreads() that follows it.
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// 2^x on the special function unit, one instruction (MUFU.EX2); .ftz: subnormal results are 0.
// ex2(-inf) = +0 exactly, which is what a masked score needs. An approximation, good to a few
// fp32 ulp: far below the 16-bit rounding P gets next (the battery measures the result).
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace fa05::ptx
