// Stage 05's FP8 runner (runner_fp8.hpp): plan_fp8's host arithmetic, the quantisation of bf16
// inputs on the GPU, V's transpose, and v15's launch. A translation unit of its own: v15 is one
// kernel, and the rest of stage 05 does not recompile when it changes.
#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <initializer_list>
#include <cmath>
#include <string>
#include <tuple>

#include "check.hpp"
#include "device_buffer.hpp"
#include "gpu.hpp"
#include "kernels/v15_fp8.cuh"
#include "runner_fp8.hpp"
#include "tensor_map.hpp"

namespace fa05 {

namespace {

#if FA05_HAVE_SM90A
constexpr bool kHaveSm90a = true;
#else
constexpr bool kHaveSm90a = false;  // v15 is compiled only into sm_90a code
#endif

constexpr int kD = 128, kBc = 128;

void check_int(int64_t v, const char* arg, const std::string& what) {
  if (v > INT_MAX) throw Unsupported(arg, what + " below 2^31 (TMA coordinates are 32-bit)", std::to_string(v));
}

// bf16 [slices, rows, D] -> e4m3 bytes of the same shape and one power-of-two scale per block of R
// rows of a slice (common/fp8.hpp, e4m3_pow2_scale: the smallest 2^k with amax <= 448 2^k). One
// thread block per (block, slice): the block's largest |x| first, then every element divided by
// the scale (exact: a power of two) and rounded to nearest even, saturating. The same bytes and
// scales as quantize_e4m3_blocks on the host (the battery relies on it: it hands the kernel
// values that are already e4m3 times such scales, which this then reproduces exactly).
template <int D, int R>
__global__ void __launch_bounds__(256) quantize_kernel(const __nv_bfloat16* __restrict__ X, uint8_t* __restrict__ X8,
                                                       float* __restrict__ scales, const int64_t rows) {
  const int64_t slice = blockIdx.x, r0 = int64_t(blockIdx.y) * R, n = min(int64_t(R), rows - r0) * D;
  const __nv_bfloat16* x = X + (slice * rows + r0) * D;
  uint8_t* x8 = X8 + (slice * rows + r0) * D;
  float amax = 0.f;
  bool finite = true;
  for (int64_t e = threadIdx.x * 8; e < n; e += 256 * 8) {  // 8 values (16 bytes) a step; D % 8 == 0
    const uint4 w = *reinterpret_cast<const uint4*>(x + e);
    const __nv_bfloat162* v = reinterpret_cast<const __nv_bfloat162*>(&w);
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(v[i]);
      finite = finite && isfinite(f.x) && isfinite(f.y);
      amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
  __shared__ float warp_max[8];
  __shared__ int warp_finite[8];
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const int all_finite = __all_sync(0xffffffffu, finite);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax, warp_finite[threadIdx.x / 32] = all_finite;
  __syncthreads();
  float m = 0.f;
  bool ok = true;
  for (int w = 0; w < 8; ++w) m = fmaxf(m, warp_max[w]), ok = ok && warp_finite[w];
  float s = 1.f;  // an all-zero block
  if (!ok) s = NAN;  // a non-finite input: NaN rows rather than a silently saturated one
  else if (m > 0.f) {
    int e;
    const float f = frexpf(m, &e);                     // m = f 2^e, f in [0.5, 1): m = (2f) 2^(e-1)
    s = ldexpf(1.f, 2.f * f <= 1.75f ? e - 9 : e - 8);  // 448 = 1.75 x 2^8
  }
  if (threadIdx.x == 0) scales[slice * gridDim.y + blockIdx.y] = s;
  for (int64_t e = threadIdx.x * 8; e < n; e += 256 * 8) {
    const uint4 w = *reinterpret_cast<const uint4*>(x + e);
    const __nv_bfloat162* v = reinterpret_cast<const __nv_bfloat162*>(&w);
    float f[8];
    for (int i = 0; i < 4; ++i) {
      const float2 t = __bfloat1622float2(v[i]);
      // divide, not multiply by 1 / s: x / 2^k is exact, but 1 / s overflows to inf when s < 2^-127
      f[2 * i] = __fdiv_rn(t.x, s), f[2 * i + 1] = __fdiv_rn(t.y, s);
    }
    const uint2 out{ptx::pack4_e4m3(f[0], f[1], f[2], f[3]), ptx::pack4_e4m3(f[4], f[5], f[6], f[7])};
    *reinterpret_cast<uint2*>(x8 + e) = out;
  }
}

// Before any launch: the tensors TMA and the 16-byte loads read must be 16-byte aligned (a kernel
// limit: Unsupported), the float32 ones 4-byte aligned (any valid float pointer is: InputError).
void check_alignment(std::initializer_list<const void*> wide, std::initializer_list<const float*> floats) {
  for (const void* x : wide)
    if (reinterpret_cast<uintptr_t>(x) % 16 != 0)
      throw Unsupported("Q/K/V/O", "16-byte aligned device pointers (TMA and 16-byte loads)", "a misaligned one");
  for (const float* x : floats)
    if (reinterpret_cast<uintptr_t>(x) % alignof(float) != 0)
      throw fa::InputError("LSE/scales", "4-byte aligned float32 device pointers", "a misaligned one");
}

}  // namespace

Fp8Plan plan_fp8(const fa::AttnProblem& p, const Config& cfg) {
  fa::validate(p);
  if (p.d != kD) throw Unsupported("--head-dim", "128 (v15, the FP8 kernel, is compiled for d = 128 only)", std::to_string(p.d));
  if (p.window_left >= 0 || p.window_right >= 0) throw Unsupported("--window", "none (v15 takes full or causal attention)", "a window");
  if (p.softcap > 0.f) throw Unsupported("--softcap", "none (v15 has no softcap)", std::to_string(p.softcap));
  if (p.token_major) throw Unsupported("--cu-seqlens-q", "no packed batch (v15 takes [B,H,N,d] tensors)", "a packed batch");
  if ((cfg.Br != 0 && cfg.Br != 128) || (cfg.Bc != 0 && cfg.Bc != 128))
    throw Unsupported("--block-q/--block-k", "128 x 128 (v15's one shape)", std::to_string(cfg.Br) + "x" + std::to_string(cfg.Bc));
  const int sm = cfg.sm > 0 ? cfg.sm : fa::gpu_compute_capability();
  if (!kHaveSm90a || (sm > 0 && sm != 90))
    throw Unsupported("--dtype", "fp8 on an sm_90 GPU (Hopper) with a build for sm_90a (e4m3 wgmma)",
                      kHaveSm90a ? "compute capability " + std::to_string(sm) : "a build without sm_90a code");
  check_int(p.N_q + 128, "--seq-q", "N_q + Br for v15's tensor maps");
  check_int(p.N_k + 128, "--seq-k", "N_k + Bc for v15's tensor maps");
  check_int(p.B * p.H, "--batch/--heads", "B * H for v15's tensor maps");
  // The quantisation and the transpose take a block per 64 rows in the grid's y (at most 65,535).
  if (fp8_q_blocks(p) > 65535 || (p.N_k + 63) / 64 > 65535)
    throw Unsupported("--seq-q/--seq-k", "at most 65,535 x 64 rows (the pre-passes' grids)", std::to_string(std::max(p.N_q, p.N_k)));
  Fp8Plan pl;
  pl.Br = v15::Br, pl.Bc = kBc;
  pl.threads = 32 * v15::kWarps + v15::kProducerThreads;
  pl.tiles = p.B * p.H * ((p.N_q + pl.Br - 1) / pl.Br);
  const int sms = cfg.sm_count > 0 ? cfg.sm_count : fa::gpu_sm_count() > 0 ? fa::gpu_sm_count() : 132;
  pl.blocks = std::min<int64_t>(pl.tiles, sms);  // one block an SM: 97 KiB of shared memory, 384 threads
  if (cfg.persistent_blocks > 0) pl.blocks = std::min(pl.blocks, cfg.persistent_blocks);
  pl.blocks = std::max<int64_t>(pl.blocks, 1);
  pl.smem_bytes = v15::smem_bytes(kD, kBc);
  pl.N_k16 = (p.N_k + 15) / 16 * 16;
  pl.workspace_bytes = p.B * p.H_kv * kD * pl.N_k16 + 16;  // V^T, then the tile counter (16-aligned)
  return pl;
}

int64_t fp8_workspace_bytes(const fa::AttnProblem& p, const Config& cfg) {
  // forward_fp8's buffer (the e4m3 copies, their scales, 64 bytes for 16-byte alignment), then forward_fp8_e4m3's
  return plan_fp8(p, cfg).workspace_bytes + p.q_elems() + 2 * p.kv_elems() +
         4 * (p.B * p.H * fp8_q_blocks(p) + 2 * p.B * p.H_kv * fp8_kv_blocks(p)) + 64;
}

void forward_fp8_e4m3(const fa::AttnProblem& p, const Fp8Inputs& in, void* O, float* LSE, const Config& cfg,
                      cudaStream_t stream) {
  Config here = cfg;
  here.sm = 0, here.sm_count = 0;
  const Fp8Plan pl = plan_fp8(p, here);
  check_alignment({in.Q, in.K, in.V, O}, {LSE, in.sQ, in.sK, in.sV});
  if (pl.tiles == 0) return;  // N_q = 0 or B H = 0: nothing to write
  const int64_t slices = p.B * p.H_kv;
  fa::DeviceBuffer<uint8_t> work(pl.workspace_bytes, fa::Mem::Extra, stream);
  uint8_t* Vt = work.get();
  unsigned* counter = reinterpret_cast<unsigned*>(Vt + pl.workspace_bytes - 16);  // 16-aligned: N_k16 % 16 == 0
  FA_CUDA_CHECK(cudaMemsetAsync(counter, 0, sizeof(unsigned), stream));
  v15::transpose_v_kernel<kD><<<dim3(unsigned(slices), unsigned((pl.N_k16 + 63) / 64)), 256, 0, stream>>>(
      static_cast<const uint8_t*>(in.V), Vt, p.N_k, pl.N_k16);
  FA_CUDA_CHECK(cudaGetLastError());
  // Tensor maps in bytes: Q (d x N_q x B H, box 128 x Br), K (d x N_k x B H_kv, box 128 x Bc), V^T
  // (N_k16 x d x B H_kv, box Bc keys x d), 128-byte swizzle; rows past the edge arrive as zeros.
  const auto map = [](const void* X, int64_t cols, int64_t rows, int64_t sl, int box_rows) {
    return fa::tensor_map_3d_typed(X, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, 128, cols, rows, sl, box_rows);
  };
  const CUtensorMap tm_q = map(in.Q, kD, p.N_q, p.B * p.H, int(pl.Br));
  const CUtensorMap tm_k = map(in.K, kD, p.N_k, slices, kBc);  // (fa::validate: N_k >= 1)
  const CUtensorMap tm_vt = map(Vt, pl.N_k16, kD, slices, kD);
  auto* kernel_fn = v15::forward_kernel<kD, kBc>;
  int optin = 0;
  if (!fa::opt_in_smem(kernel_fn, pl.smem_bytes, &optin))
    throw Unsupported("--dtype", "fp8 blocks whose shared memory fits this GPU's " + std::to_string(optin) + " bytes",
                      std::to_string(pl.smem_bytes) + " bytes");
  const int64_t Tr = (p.N_q + pl.Br - 1) / pl.Br;
  kernel_fn<<<unsigned(pl.blocks), unsigned(pl.threads), size_t(pl.smem_bytes), stream>>>(
      static_cast<__nv_bfloat16*>(O), LSE, p, p.resolved_scale(), Tr, counter, in.sQ, in.sK, in.sV, fp8_q_blocks(p),
      fp8_kv_blocks(p), tm_q, tm_k, tm_vt);
  FA_CUDA_CHECK(cudaGetLastError());
}

void forward_fp8(const fa::AttnProblem& p, const void* Q, const void* K, const void* V, void* O, float* LSE,
                 const Config& cfg, cudaStream_t stream) {
  Config here = cfg;
  here.sm = 0, here.sm_count = 0;
  plan_fp8(p, here);  // refuses before anything is allocated
  check_alignment({Q, K, V, O}, {LSE});
  const int64_t qb = fp8_q_blocks(p), kb = fp8_kv_blocks(p);
  const int64_t bytes = p.q_elems() + 2 * p.kv_elems() + 4 * (p.B * p.H * qb + 2 * p.B * p.H_kv * kb) + 64;
  fa::DeviceBuffer<uint8_t> work(bytes, fa::Mem::Extra, stream);
  const auto align16 = [](uint8_t* x) { return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(x) + 15) / 16 * 16); };
  uint8_t* Q8 = work.get();
  uint8_t* K8 = align16(Q8 + p.q_elems());
  uint8_t* V8 = align16(K8 + p.kv_elems());
  float* sQ = reinterpret_cast<float*>(align16(V8 + p.kv_elems()));
  float* sK = sQ + p.B * p.H * qb;
  float* sV = sK + p.B * p.H_kv * kb;
  if (qb > 0 && p.B * p.H > 0) {
    quantize_kernel<kD, kFp8RowsQ><<<dim3(unsigned(p.B * p.H), unsigned(qb)), 256, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(Q), Q8, sQ, p.N_q);
    FA_CUDA_CHECK(cudaGetLastError());
  }
  if (kb > 0 && p.B * p.H_kv > 0) {
    for (auto [X, X8, s] : {std::tuple{K, K8, sK}, std::tuple{V, V8, sV}}) {
      quantize_kernel<kD, kFp8RowsKV><<<dim3(unsigned(p.B * p.H_kv), unsigned(kb)), 256, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(X), X8, s, p.N_k);
      FA_CUDA_CHECK(cudaGetLastError());
    }
  }
  forward_fp8_e4m3(p, Fp8Inputs{Q8, K8, V8, sQ, sK, sV}, O, LSE, cfg, stream);
}

}  // namespace fa05
