// The only kernel code the versions share: thin wrappers around a few PTX instructions, so each
// kernel file reads as the algorithm. PTX ISA reference: "Warp-level matrix instructions"
// (mma.sync m16n8k16, ldmatrix), "Data movement" (cp.async) and "Floating-point" (ex2.approx);
// at the end, Hopper's wgmma (v7).
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
#include <type_traits>

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

// ---- Hopper (sm_90a): wgmma, the warpgroup's asynchronous matrix multiply (PTX ISA, "Asynchronous
// Warpgroup Level Matrix Multiply-Accumulate Instructions"). Four consecutive warps (a warpgroup,
// the first warp index divisible by 4) issue one wgmma together. Used by v7 (v7_wgmma.cuh).
//
// The register layouts are mma.sync's, stacked: in m64nNk16 warp w of the warpgroup owns rows
// 16w .. 16w+15 of the 64, its A registers are exactly the m16n8k16 A fragment of those rows, and
// its accumulator for the n8 tile i is d[i][0..3] laid out as the m16n8 C fragment above. So S's
// accumulators still turn into P's A registers lane for lane (v2), and the softmax code is v5's.
// B is not in registers: the tensor cores read it from shared memory, described by a 64-bit
// matrix descriptor (below); no ldmatrix, no registers for B.

// The shared-memory matrix descriptor ("Matrix Descriptor Format"), for a tile stored in the
// 128-byte swizzle: rows of 128 bytes (64 16-bit values), 8 rows = one 1024-byte atom whose 16-byte
// chunk c of row r sits at chunk c ^ (r % 8) (the layout v7's copy writes), atoms 1024-byte
// aligned. Fields (bytes >> 4): start address (bits 0-13), leading byte offset (16-29), stride
// byte offset (32-45: from one group of 8 rows to the next, 1024 here), swizzle mode (62-63: 1 =
// 128 bytes). The leading offset steps between 64-element column atoms, which no v7 wgmma
// crosses (B of N = 64 or 128 K-major columns, or of 16 rows of 64 for V); it is set to the row
// group stride all the same.
__device__ __forceinline__ uint64_t smem_desc_sw128(const void* tile) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
  const uint64_t enc_addr = (a & 0x3FFFF) >> 4, enc_1024 = 1024 >> 4;
  return enc_addr | (enc_1024 << 16) | (enc_1024 << 32) | (uint64_t(1) << 62);
}

// Makes this thread's earlier writes to shared memory (stores, completed cp.async) visible to
// the async proxy, through which wgmma reads its shared-memory operands (B; A too in the "SS"
// form below); a barrier after it then publishes
// them to the warpgroup (PTX ISA, "Memory Consistency Model", proxies).
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// Orders this thread's earlier register writes (the accumulators, A) before the next wgmma reads
// them; required before the first wgmma after registers changed ("wgmma.fence").
// (The build also makes sm_80 code, where wgmma does not exist: there these compile to nothing
// and wgmma_m64nNk16 to a trap; the runner never launches v7 on such a GPU.)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA05_WGMMA(...) asm volatile(__VA_ARGS__)
#else
#define FA05_WGMMA(...) (void)0
#endif
__device__ __forceinline__ void wgmma_fence() { FA05_WGMMA("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the group of wgmma issued since the last commit.
__device__ __forceinline__ void wgmma_commit() { FA05_WGMMA("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() { FA05_WGMMA("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// An empty asm that claims to rewrite r: it pins r's value to this point of the program. The
// compiler sees a wgmma's outputs as ready when the wgmma asm is issued and its inputs as read
// then, so without pins it may move other code across wgmma_fence / wgmma_wait: writes to r
// (zeroing S, rescaling O, packing P) below the fence, or reads of the results above the wait.
// Called on the accumulators and A registers before wgmma_fence and after wgmma_wait.
template <int N>
__device__ __forceinline__ void wgmma_pin(float (&r)[N][4]) {
  for (int n = 0; n < N; ++n)
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(r[n][e])::"memory");
}
__device__ __forceinline__ void wgmma_pin(uint32_t (&r)[4]) {
  for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(r[e])::"memory");
}

// d (64 x N, fp32) += A (64 x 16, T, in registers: this warp's 16 rows as an m16n8k16 A fragment)
// times B (16 x N, T, in shared memory by descriptor), N = 64 or 128 (v7 ... v13's S and O pieces);
// d[i] is the n8 tile i.
// kTransB = 0: B is stored "K-major", each of its N columns a 16-element row of the tile (K_j as
// [key][dim] for S = Q K^T); kTransB = 1: B is stored "MN-major", each of its 16 rows an
// N-element row of the tile (V_j as [key][dim] for O += P V). Issued, not finished: see
// wgmma_commit / wgmma_wait. (FA05_D4(i): the four accumulators of n8 tile i as asm operands.)
#define FA05_D4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
template <class T, int N, int kTransB>
__device__ __forceinline__ void wgmma_m64nNk16(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert(N == 64 || N == 128, "the two widths v7 uses (v13's Bc = 80 reads Q from shared memory: the SS form)");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (N == 64 && bf16)
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n"
                   : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
  else if constexpr (N == 64)
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n"
                   : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
  else if constexpr (bf16)
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, %69;\n"
                   : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7), FA05_D4(8), FA05_D4(9), FA05_D4(10), FA05_D4(11), FA05_D4(12), FA05_D4(13), FA05_D4(14), FA05_D4(15)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
  else
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, %69;\n"
                   : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7), FA05_D4(8), FA05_D4(9), FA05_D4(10), FA05_D4(11), FA05_D4(12), FA05_D4(13), FA05_D4(14), FA05_D4(15)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
#else
  (void)d, (void)a, (void)desc_b;
  __trap();  // wgmma exists only on sm_90a; the runner never launches v7 elsewhere
#endif
}

// d (64 x 64, fp32) += A (64 x 16) times B (16 x 64), both T and both read by the tensor cores from
// shared memory by descriptor (the "SS" form; wgmma_m64nNk16 above takes A from registers). Used
// by stage 06's gpu_v4, whose A operands (K_j, V_j, dS) already sit in shared memory. kTransA = 0:
// A is stored K-major, each of its 64 rows a 16-element piece of a tile row (K_j as [key][dim] for
// S^T = K_j Q_i^T); kTransA = 1: A is stored M-major, each of its 16 columns a 64-element row of
// the tile (dS^T as [key][query], read as dS for dQ = dS K_j). kTransB as above. The transposed
// forms exist for 16-bit types only (PTX ISA, wgmma "imm-trans-a").
template <class T, int kTransA, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1, %34, %35;\n"
                 : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7)
                 : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
  else
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1, %34, %35;\n"
                 : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7)
                 : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
#else
  (void)d, (void)desc_a, (void)desc_b;
  __trap();  // sm_90a only; the runner never launches gpu_v4 elsewhere
#endif
}
// d (64 x N, fp32) += A (64 x 16) times B (16 x N), N = 64, 80 or 128, both K-major in shared
// memory: the SS form at S's widths, for v13's S = Q_i K_j^T (Q_i read by the tensor cores where v12
// loaded it into registers with ldmatrix). Issued, not finished, as above.
template <class T, int N>
__device__ __forceinline__ void wgmma_m64nNk16_ss(float (&d)[N / 8][4], uint64_t desc_a, uint64_t desc_b) {
  static_assert(N == 64 || N == 80 || N == 128, "the widths of S");
  if constexpr (N == 64) {
    wgmma_m64n64k16_ss<T, 0, 0>(d, desc_a, desc_b);
  } else {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
    if constexpr (N == 80 && bf16)
      asm volatile("wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, %40, %41, 1, 1, 1, 0, 0;\n"
                 : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7), FA05_D4(8), FA05_D4(9)
                 : "l"(desc_a), "l"(desc_b));
    else if constexpr (N == 80)
      asm volatile("wgmma.mma_async.sync.aligned.m64n80k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39}, %40, %41, 1, 1, 1, 0, 0;\n"
                 : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7), FA05_D4(8), FA05_D4(9)
                 : "l"(desc_a), "l"(desc_b));
    else if constexpr (bf16)
      asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 0;\n"
                   : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7), FA05_D4(8), FA05_D4(9), FA05_D4(10), FA05_D4(11), FA05_D4(12), FA05_D4(13), FA05_D4(14), FA05_D4(15)
                   : "l"(desc_a), "l"(desc_b));
    else
      asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 0;\n"
                   : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7), FA05_D4(8), FA05_D4(9), FA05_D4(10), FA05_D4(11), FA05_D4(12), FA05_D4(13), FA05_D4(14), FA05_D4(15)
                   : "l"(desc_a), "l"(desc_b));
#else
    (void)d, (void)desc_a, (void)desc_b;
    __trap();  // sm_90a only; the runner never launches v13 elsewhere
#endif
  }
}

// ---- Hopper (sm_90a): FP8 (e4m3) wgmma, for v15 (v15_fp8.cuh; issue 35). PTX ISA, wgmma
// ".m64nNk32" with .e4m3 operands. Four differences from the 16-bit forms above:
//   k is 32 (a k-step is still 32 bytes of a 128-byte swizzled row, so descriptors advance the same);
//   both operands must be K-major: no transpose immediates exist for 8-bit types, which is why V
//   reaches v15 transposed (V^T, keys contiguous: runner_fp8.cu's pre-pass);
//   A in registers is 4 x .b32 of 4 e4m3 each: warp w's rows 16 w + g (registers 0, 2) and + 8
//   (1, 3), bytes k = 4 t4 .. 4 t4 + 3 (registers 0, 1) and 16 + 4 t4 ... (2, 3), g = lane / 4,
//   t4 = lane % 4 (mma.m16n8k32's A fragment, stacked), which is NOT where the fp32 accumulator
//   of S puts P's columns (2 t4, 2 t4 + 1 in each n8 tile): v15's pack_p and V^T's key order say how
//   that is squared;
//   the accumulation into D keeps about 13 significand bits, not float32's 23 (measured by others;
//   docs/fp8.md), so v15 gives each key block's P V its own accumulator (scale_d = 0) and adds it
//   to O in float32.
// scale_d: 1 accumulates into d, 0 overwrites it (d = A B), as the predicate operand of wgmma.
// d (64 x 128, fp32) (+)= A (64 x 32, e4m3, shared memory by descriptor) B (32 x 128, e4m3, K-major).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_ss(float (&d)[16][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
               " wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}\n"
               : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7),
                 FA05_D4(8), FA05_D4(9), FA05_D4(10), FA05_D4(11), FA05_D4(12), FA05_D4(13), FA05_D4(14), FA05_D4(15)
               : "l"(desc_a), "l"(desc_b), "r"(scale_d));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)scale_d;
  __trap();  // sm_90a only; the runner never launches v15 elsewhere
#endif
}
// The same with A in registers (the layout above): v15's O_j = P_j V_j.
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
               " wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
               : FA05_D4(0), FA05_D4(1), FA05_D4(2), FA05_D4(3), FA05_D4(4), FA05_D4(5), FA05_D4(6), FA05_D4(7),
                 FA05_D4(8), FA05_D4(9), FA05_D4(10), FA05_D4(11), FA05_D4(12), FA05_D4(13), FA05_D4(14), FA05_D4(15)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
#else
  (void)d, (void)a, (void)desc_b, (void)scale_d;
  __trap();
#endif
}
// Four floats as four e4m3 in one register, x0 in the lowest byte (round to nearest even,
// saturating at +-448: cvt.rn.satfinite.e4m3x2.f32 puts its first source in the upper byte).
__device__ __forceinline__ uint32_t pack4_e4m3(float x0, float x1, float x2, float x3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  asm("{\n .reg .b16 lo, hi;\n cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      " mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
#else
  (void)x0, (void)x1, (void)x2, (void)x3;
  return 0;  // e4m3 conversion needs sm_89; v15 runs on sm_90a only
#endif
}
#undef FA05_D4
// d[kAt .. kAt + N/8) (64 x N, fp32) += A (64 x 16) times B (16 x N), both in shared memory by
// descriptor, N = 16, 32 or 64, transposes as wgmma_m64n64k16_ss: the SS form writing a slice of a
// wider accumulator, so that one array can hold a product whose N is cut into pieces (stage 06's
// gpu_v4 at d = 96 and d > 128, kernels/bwd_v4_wgmma.cuh and bwd_v4_wide.cuh: a warpgroup's 96 head
// dims at d = 192 are 64 + 32, its 48 of dQ's at d = 96 are 32 + 16, each piece starting inside its
// own 64-element column atom).
#define FA05_DA(i) "+f"(d[kAt + i][0]), "+f"(d[kAt + i][1]), "+f"(d[kAt + i][2]), "+f"(d[kAt + i][3])
template <class T, int N, int kTransA, int kTransB, int kAt, int M>
__device__ __forceinline__ void wgmma_ss_at(float (&d)[M][4], uint64_t desc_a, uint64_t desc_b) {
  static_assert((N == 16 || N == 32 || N == 64) && kAt + N / 8 <= M, "a 16-, 32- or 64-wide slice inside the accumulator");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (N == 16) {
    if constexpr (bf16)
      asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, 1, 1, 1, %10, %11;\n"
                   : FA05_DA(0), FA05_DA(1)
                   : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
    else
      asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, 1, 1, 1, %10, %11;\n"
                   : FA05_DA(0), FA05_DA(1)
                   : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
  } else if constexpr (N == 32) {
    if constexpr (bf16)
      asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, 1, 1, 1, %18, %19;\n"
                   : FA05_DA(0), FA05_DA(1), FA05_DA(2), FA05_DA(3)
                   : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
    else
      asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, 1, 1, 1, %18, %19;\n"
                   : FA05_DA(0), FA05_DA(1), FA05_DA(2), FA05_DA(3)
                   : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
  } else {
    if constexpr (bf16)
      asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1, %34, %35;\n"
                   : FA05_DA(0), FA05_DA(1), FA05_DA(2), FA05_DA(3), FA05_DA(4), FA05_DA(5), FA05_DA(6), FA05_DA(7)
                   : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
    else
      asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1, %34, %35;\n"
                   : FA05_DA(0), FA05_DA(1), FA05_DA(2), FA05_DA(3), FA05_DA(4), FA05_DA(5), FA05_DA(6), FA05_DA(7)
                   : "l"(desc_a), "l"(desc_b), "n"(kTransA), "n"(kTransB));
  }
#else
  (void)d, (void)desc_a, (void)desc_b;
  __trap();  // sm_90a only; the runner never launches gpu_v4 elsewhere
#endif
}
// d[kAt .. kAt + N/8) (64 x N, fp32) += A (64 x 16, in registers, as wgmma_m64nNk16) times B (16 x
// N, shared memory by descriptor), N = 32 or 64: wgmma_m64nNk16 writing a slice of a wider
// accumulator (stage 06's gpu_v4 at d = 96: dK_j's 96 dims are 64 + 32, one piece a slab).
template <class T, int N, int kTransB, int kAt, int M>
__device__ __forceinline__ void wgmma_rs_at(float (&d)[M][4], const uint32_t (&a)[4], uint64_t desc_b) {
  static_assert((N == 32 || N == 64) && kAt + N / 8 <= M, "a 32- or 64-wide slice inside the accumulator");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  if constexpr (N == 32) {
    if constexpr (bf16)
      asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, 1, 1, 1, %21;\n"
                   : FA05_DA(0), FA05_DA(1), FA05_DA(2), FA05_DA(3)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
    else
      asm volatile("wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, 1, 1, 1, %21;\n"
                   : FA05_DA(0), FA05_DA(1), FA05_DA(2), FA05_DA(3)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
  } else {
    if constexpr (bf16)
      asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n"
                   : FA05_DA(0), FA05_DA(1), FA05_DA(2), FA05_DA(3), FA05_DA(4), FA05_DA(5), FA05_DA(6), FA05_DA(7)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
    else
      asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n"
                   : FA05_DA(0), FA05_DA(1), FA05_DA(2), FA05_DA(3), FA05_DA(4), FA05_DA(5), FA05_DA(6), FA05_DA(7)
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(kTransB));
  }
#else
  (void)d, (void)a, (void)desc_b;
  __trap();  // sm_90a only; the runner never launches gpu_v4 elsewhere
#endif
}
#undef FA05_DA

// ---- Hopper (sm_90a): mbarriers and register hand-over, for warp specialisation (v12). PTX ISA,
// "Parallel Synchronization and Communication Instructions: mbarrier" and "setmaxnreg".
//
// An mbarrier is a 64-bit object in shared memory that counts arrivals: init(count) opens phase 0;
// when `count` threads have arrived the phase completes and the next one opens. A waiter names the
// phase it waits for by its parity (0, 1, 0, ...), so a barrier reused in a ring needs no reset:
// the u-th use of a slot (u = 0, 1, ...) waits for parity u % 2. Waiting for parity 1 on a fresh
// barrier returns at once (the phase "before" phase 0 counts as complete), which is how a producer
// sees every slot empty at the start. arrive has release semantics and the wait acquire (both .cta
// by default): what a thread wrote before it arrived is visible to a thread whose wait saw that
// phase complete (the memory model's release/acquire pattern, as for a lock).
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  (void)bar, (void)count;
  FA05_WGMMA("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  (void)bar;
  FA05_WGMMA("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// After a thread has initialised barriers that the copy engine will update (TMA's byte counts go
// through the async proxy): makes the initialisation visible there before any copy uses them
// (PTX ISA, "fence.mbarrier_init"; a thread block is a cluster of one when launched without one).
__device__ __forceinline__ void mbar_init_fence() { FA05_WGMMA("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Blocks until the phase of the given parity has completed (try_wait suspends the thread for a
// while in hardware before it returns false, so the loop does not spin hot).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  uint32_t done;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
#else
  (void)bar, (void)parity;
  __trap();  // sm_90a only; the runner never launches v12 elsewhere
#endif
}
// The same arrival, and the number of bytes the phase must also wait for: the phase completes
// when every expected thread has arrived and that many bytes of bulk copies (below) have landed.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  (void)bar, (void)bytes;
  FA05_WGMMA("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// TMA, the copy engine (PTX ISA, "cp.async.bulk.tensor"): one instruction copies a whole box of a
// tensor, described by a tensor map (made on the host: runner.cu, tensor_map_3d), from global to
// shared memory, and counts its bytes on the mbarrier when they have landed. Coordinates are in
// elements, innermost first (x: column, y: row, z: the 2-D slice); rows past the tensor's edge
// are filled with zeros, never read. With the map's 128-byte swizzle the box lands in the layout
// v7's copies write by hand (v7_wgmma.cuh, swz). The writes go through the async proxy, as wgmma's
// reads do: no proxy fence between them.
__device__ __forceinline__ void tma_load_3d(void* dst, const void* tensor_map, int x, int y, int z, uint64_t* bar) {
  (void)dst, (void)tensor_map, (void)x, (void)y, (void)z, (void)bar;
  FA05_WGMMA(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(tensor_map)), "r"(x), "r"(y), "r"(z), "r"(smem_u32(bar))
      : "memory");
}
// Named barriers (PTX ISA, "bar.sync" / "bar.arrive"): hardware barriers 1 ... 15 of the thread
// block (0 is __syncthreads'), each completing when `threads` threads (a multiple of 32) have
// arrived. sync arrives and waits; arrive only counts, without waiting. v15 passes its two
// consumer warpgroups' turn at the tensor cores back and forth with two of them (ping-pong).
// (Immediate ids: with an id in a register ptxas reserves all 16 barriers.)
template <int Id, int Threads>
__device__ __forceinline__ void named_bar_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(Id), "n"(Threads) : "memory");
}
template <int Id, int Threads>
__device__ __forceinline__ void named_bar_arrive() {
  asm volatile("bar.arrive %0, %1;\n" ::"n"(Id), "n"(Threads) : "memory");
}
// The warpgroup's registers per thread become N (a multiple of 8, 24 ... 256): dec hands registers
// back to the thread block's pool (what it got at launch), inc takes them from it, waiting until
// they are free (forever, if the pool cannot hold them). All four warps of a warpgroup execute the
// same one. ptxas then allocates the code after it within N.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { FA05_WGMMA("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { FA05_WGMMA("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

}  // namespace fa05::ptx
