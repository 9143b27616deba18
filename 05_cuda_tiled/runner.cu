// Stage 05's runner: the one switch from a kernel's name to its launch (runner.hpp).
// Each kernel file holds its kernel; the host-side arithmetic of a launch (block sizes, grid,
// shared memory, workspace) lives here, once, in plan().
#include <cublas_v2.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>

#include "check.hpp"
#include "device_buffer.hpp"
#include "gpu.hpp"
#include "kernels/baseline_cublas.cuh"
#include "kernels/v1_smem_fp32.cuh"
#include "kernels/v2_fa2_mma.cuh"
#include "kernels/v3_cp_async.cuh"
#include "kernels/v4_exp2.cuh"
#include "kernels/v5_shape.cuh"
#include "kernels/v6_warp_rows.cuh"
#include "kernels/v7_wgmma.cuh"
#include "kernels/v8_persistent.cuh"
#include "kernels/v9_overlap.cuh"
#include "kernels/v10_scheduler.cuh"
#include "kernels/v11_o_smem.cuh"
#include "kernels/v12_warp_specialized.cuh"
#include "kernels/v13_every_d.cuh"
#include "kernels/v14_split_kv.cuh"
#include "pad_columns.hpp"
#include "runner.hpp"
#include "tensor_map.hpp"

namespace fa05 {

const std::vector<KernelInfo>& kernels() {
  // name, file, idea, P_in_dtype, max_d, then tensor_cores, wgmma, shaped, persistent, tile_counter,
  // extra_threads
  // (runner.hpp says what each means).
  static const std::vector<KernelInfo> list = {
      {"v1", "kernels/v1_smem_fp32.cuh",
       "stage 04's loop in shared memory: a thread block per (batch, head, query block), fp32",
       false, 256, false, false, false, false, false},
      {"v2", "kernels/v2_fa2_mma.cuh",
       "FA2 work split on tensor cores: 4 warps x 16 rows, mma.sync + ldmatrix, S/P/O in registers",
       true, 256, true, false, false, false, false},
      {"v3", "kernels/v3_cp_async.cuh",
       "v2 + K/V loads overlapped with the math: cp.async into two buffers, one block ahead",
       true, 256, true, false, false, false, false},
      {"v4", "kernels/v4_exp2.cuh",
       "v3 + fewer instructions per score: exp2 with the scale folded in (FFMA + EX2), int masks",
       true, 256, true, false, false, false, false},
      {"v5", "kernels/v5_shape.cuh",
       "v4 + the block shape per d chosen by measurement, causal's heaviest query blocks first",
       true, 256, true, false, true, false, false},
      {"v6", "kernels/v6_warp_rows.cuh",
       "v5 + 32 query rows per warp: each K/V fragment feeds two mma, twice the work in flight",
       true, 256, true, false, true, false, false},
      {"v7", "kernels/v7_wgmma.cuh",
       "v5 on Hopper's wgmma: a warpgroup per 64 rows, K and V read by the tensor cores from shared memory",
       true, 256, true, true, true, false, false},
      {"v8", "kernels/v8_persistent.cuh",
       "v7 + persistent blocks: one per SM walks the tiles, loading the next tile's Q, K, V during the last block",
       true, 256, true, true, true, true, false},
      {"v9", "kernels/v9_overlap.cuh",
       "v7 + S_j issued with P V of block j-1, for the softmax to run beside it (FA3's intra-warpgroup pipelining; as compiled, ptxas waits for both first)",
       true, 256, true, true, true, false, false},
      {"v10", "kernels/v10_scheduler.cuh",
       "v9 in persistent blocks that take tiles from an atomic counter, copying the next tile's Q, K during the last block",
       true, 256, true, true, true, true, true},
      {"v11", "kernels/v11_o_smem.cuh",
       "v10 + O written through shared memory: 16-byte stores, whole rows per warp store, each sector written once",
       true, 256, true, true, true, true, true},
      {"v12", "kernels/v12_warp_specialized.cuh",
       "v11 + warp specialisation: one producer thread copies Q, K, V with TMA into buffers tracked by mbarriers; the compute warpgroups wait per buffer, not on each other (FA3)",
       true, 256, true, true, true, true, true, v12::kProducerThreads},
      {"v13", "kernels/v13_every_d.cuh",
       "v12 at every head dim up to 256: tiles of d rounded up to 64 columns that TMA fills with zeros; Q read by the tensor cores from shared memory and one Q buffer where registers and shared memory demand it; larger blocks on long sequences",
       true, 256, true, true, true, true, true, v13::kProducerThreads},
      {"v14", "kernels/v14_split_kv.cuh",
       "decode: the query heads of a kv head packed into one tile, its keys split across thread blocks, the partial states merged by stage 03's merge (split-KV)",
       true, 256, true, false, false, false, false},
      {"cublas", "kernels/baseline_cublas.cuh",
       "materialised baseline: cuBLAS S = QK^T, softmax kernel, cuBLAS O = PV; S, P in HBM",
       true, 1 << 16, false, false, false, false, false},
  };
  return list;
}

const KernelInfo& kernel_info(const std::string& name) {
  std::string names;
  for (const KernelInfo& k : kernels()) {
    if (k.name == name) return k;
    names += (names.empty() ? "" : ", ") + k.name;
  }
  throw fa::InputError("--kernel", "one of " + names + " or auto", "'" + name + "'");
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t kMaxBlockRows = int64_t(1) << 20;

// The v1 blocks: Dao et al. 2022, Algorithm 1, line 1, with M = the shared memory budget in
// floats, exactly as stage 04's blocks_from_sram(): the four ~B x d tiles Q_i, K_j, V_j, O_i
// fit in M. (S, m and l come on top of M; plan() adds them to the shared memory it reports.)
//   Bc = ceil(M / 4d),  Br = min(Bc, d)
void v1_blocks(const fa::AttnProblem& p, const Config& cfg, int64_t& Br, int64_t& Bc) {
  const int64_t M = std::max<int64_t>(1, (cfg.sram_bytes > 0 ? cfg.sram_bytes : 48 * 1024) / 4);
  Bc = ceil_div(M, 4 * p.d);
  Br = std::min(Bc, p.d);
  if (cfg.Br > 0) Br = cfg.Br;
  if (cfg.Bc > 0) Bc = cfg.Bc;
  Br = std::min(Br, p.N_q);  // no block larger than the problem
  Bc = std::min(Bc, p.N_k);
  // Above this no block fits in shared memory anyway; capping first keeps the byte count below
  // from overflowing (the CLI caps the flags at 2^20 too).
  if (Br > kMaxBlockRows || Bc > kMaxBlockRows)
    throw Unsupported("--block-q/--block-k", "at most " + std::to_string(kMaxBlockRows) + " rows per block",
                      "Br=" + std::to_string(Br) + " Bc=" + std::to_string(Bc));
}

// Calls f(T{}) with T the CUDA type of the dtype.
template <class F>
void with_type(fa::DType t, F f) {
  switch (t) {
    case fa::DType::fp32: f(float{}); break;
    case fa::DType::fp16: f(__half{}); break;
    case fa::DType::bf16: f(__nv_bfloat16{}); break;
  }
}

cudaDataType_t cublas_type(fa::DType t) {
  return t == fa::DType::fp32 ? CUDA_R_32F : t == fa::DType::fp16 ? CUDA_R_16F : CUDA_R_16BF;
}

void cublas_check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw fa::CudaError(cudaErrorUnknown, std::string("cuBLAS error: ") + call + ": " + cublasGetStatusString(s));
}

// One cuBLAS handle per thread and device: a handle is bound to the device current when it is
// made, and cublasSetStream + two GEMMs on a shared handle would race between threads.
cublasHandle_t cublas_handle() {
  thread_local std::map<int, cublasHandle_t> handles;
  int dev = 0;
  FA_CUDA_CHECK(cudaGetDevice(&dev));
  cublasHandle_t& h = handles[dev];
  if (!h) cublas_check(cublasCreate(&h), "cublasCreate");
  return h;
}

void check_int(int64_t v, const char* arg, const std::string& what) {
  if (v > INT_MAX)
    throw Unsupported(arg, what + " at most 2^31 - 1", std::to_string(v));
}

// The materialised baseline (kernels/baseline_cublas.cuh): two batched GEMMs around a softmax.
template <class T>
void cublas_forward(const fa::AttnProblem& p, fa::DType dtype, const T* Q, const T* K, const T* V,
                    T* O, float* LSE, cudaStream_t stream) {
  const int64_t G = p.H / p.H_kv, rows = G * p.N_q;  // query rows sharing one kv head
  const int64_t nxn = p.B * p.H * p.N_q * p.N_k;
  cublasHandle_t h = cublas_handle();
  cublas_check(cublasSetStream(h, stream), "cublasSetStream");
  const cudaDataType_t type = cublas_type(dtype);
  const float scale = p.resolved_scale(), one = 1.f, zero = 0.f;

  // 1. S = scale Q K^T per (batch, kv head). cuBLAS is column-major: a row-major X is X^T to it,
  //    so we ask for S^T (N_k x rows) = K (N_k x d) Q^T, i.e. op(A) = K^T^T with A = K^T (d x N_k).
  fa::DeviceBuffer<float> S(nxn, fa::Mem::Extra, stream);  // (B, H, N_q, N_k)
  cublas_check(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(p.N_k), int(rows), int(p.d),
                                          &scale, K, type, int(p.d), p.N_k * p.d, Q, type, int(p.d),
                                          rows * p.d, &zero, S.get(), CUDA_R_32F, int(p.N_k),
                                          rows * p.N_k, int(p.B * p.H_kv), CUBLAS_COMPUTE_32F,
                                          CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx (S = scale Q K^T)");

  // 2. P = softmax(S) row by row, LSE. In fp32, P overwrites S; in 16 bits it is a second buffer.
  fa::DeviceBuffer<T> P16(std::is_same_v<T, float> ? 0 : nxn, fa::Mem::Extra, stream);
  T* P = std::is_same_v<T, float> ? reinterpret_cast<T*>(S.get()) : P16.get();
  baseline::softmax_rows<T><<<unsigned(p.B * p.H * p.N_q), baseline::kThreads, 0, stream>>>(S.get(), P, LSE, p);
  FA_CUDA_CHECK(cudaGetLastError());

  // 3. O = P V per (batch, kv head): O^T (d x rows) = V^T (d x N_k) P^T (N_k x rows).
  cublas_check(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(p.d), int(rows), int(p.N_k),
                                          &one, V, type, int(p.d), p.N_k * p.d, P, type, int(p.N_k),
                                          rows * p.N_k, &zero, O, type, int(p.d), rows * p.d,
                                          int(p.B * p.H_kv), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx (O = P V)");
}

// Shared memory above 48 KiB must be asked for, per kernel, and must fit this GPU.
template <class Kernel>
void set_smem(Kernel* kernel_fn, int64_t bytes) {
  int optin = 0;
  if (!fa::opt_in_smem(kernel_fn, bytes, &optin))
    throw Unsupported("--sram-bytes/--block-q/--block-k",
                      "blocks whose shared memory fits this GPU's " + std::to_string(optin) + " bytes",
                      std::to_string(bytes) + " bytes");
}

// The shapes v5, v6 and v7 are compiled for (warps, Bc); Br = 16 warps (v5, v7) or 32 warps (v6). The
// sweeps (bench BM_shape) run them all; default_shape() holds the winners.
// A shape may be limited to head dims up to max_d: v6 at d = 128 with Bc = 64 needs more than
// 255 registers (ptxas spills), and with Bc = 128 its S no longer fits in registers at all.
template <int W, int C, int MaxD = 128, int MinD = 1>
struct Shape {  // W compute warps, Bc keys a block, compiled for the native widths MinD ... MaxD
  static constexpr int warps = W, Bc = C, max_d = MaxD, min_d = MinD;
};
// v5 at d = 192 and 256 (the mma.sync path of a GPU without wgmma): its smallest shape only, whose
// shared memory fits an A100 (101 KiB at d = 256) and whose registers do not spill.
using V5Shapes = std::tuple<Shape<4, 32, 256>, Shape<4, 64>, Shape<4, 128>, Shape<8, 32>, Shape<8, 64>, Shape<8, 128>>;
using V6Shapes = std::tuple<Shape<4, 32>, Shape<4, 64, 64>, Shape<8, 32>, Shape<8, 64, 64>>;
// v7: whole warpgroups (4 warps) and whole 64-key wgmma tiles; each is also a v5 shape, which is
// what v7 falls back to off Hopper.
using V7Shapes = std::tuple<Shape<4, 64>, Shape<4, 128>, Shape<8, 64>, Shape<8, 128>>;
// v10: v9's two winners (two warpgroups, lab notebook v9), the only shapes its sweep runs; v11 keeps them.
using V10Shapes = std::tuple<Shape<8, 64>, Shape<8, 128>>;
// v13: v12's two shapes where they fit; Bc = 128 only up to d = 128 (its K and V rings take 4 Bc d
// elements of shared memory: 192 KiB at d = 192). Above, the wider key blocks that still fit, Bc =
// 80 at 192 and 256 (FlashAttention-3's at 256; its 112 at 192 lost to 80 at every point of the
// sweep), one Q buffer where two do not fit; up to d = 64, three consumer warpgroups (Br = 192,
// FlashAttention-3's 192 x 128 at d = 64; 192 x 64, half its S and P registers, lost to 128 x 128
// at 22 of 24 points: not kept). Which wins is measured (BM_shape; lab notebook, v13).
using V13Shapes = std::tuple<Shape<8, 64, 256>, Shape<8, 128, 128>, Shape<8, 80, 256, 192>, Shape<12, 128, 64>>;

// Each shaped version: its kernel for (T, D, warps, Bc) and its rows per warp.
struct V5 {
  static constexpr int rows_per_warp = 16;
  using Shapes = V5Shapes;
  template <class T, int D, int W, int C>
  static auto kernel() { return v5::forward_kernel<T, D, W, C>; }
  static int64_t smem(int64_t d, int64_t warps, int64_t Bc) { return v5::smem_bytes(int(d), int(warps), int(Bc)); }
};
struct V6 {
  static constexpr int rows_per_warp = 16 * v6::kM;
  using Shapes = V6Shapes;
  template <class T, int D, int W, int C>
  static auto kernel() { return v6::forward_kernel<T, D, W, C>; }
  static int64_t smem(int64_t d, int64_t warps, int64_t Bc) { return v6::smem_bytes(int(d), int(warps), int(Bc)); }
};

struct V7 {
  static constexpr int rows_per_warp = 16;
  using Shapes = V7Shapes;
  template <class T, int D, int W, int C>
  static auto kernel() { return v7::forward_kernel<T, D, W, C>; }
  static int64_t smem(int64_t d, int64_t warps, int64_t Bc) { return v7::smem_bytes(int(d), int(warps), int(Bc)); }
};
struct V8 {  // v7's shapes, with a second Q tile in shared memory
  static constexpr int rows_per_warp = 16;
  using Shapes = V7Shapes;
  template <class T, int D, int W, int C>
  static auto kernel() { return v8::forward_kernel<T, D, W, C>; }
  static int64_t smem(int64_t d, int64_t warps, int64_t Bc) { return v8::smem_bytes(int(d), int(warps), int(Bc)); }
};
struct V9 {  // v7's shapes and shared memory
  static constexpr int rows_per_warp = 16;
  using Shapes = V7Shapes;
  template <class T, int D, int W, int C>
  static auto kernel() { return v9::forward_kernel<T, D, W, C>; }
  static int64_t smem(int64_t d, int64_t warps, int64_t Bc) { return v9::smem_bytes(int(d), int(warps), int(Bc)); }
};
struct V10 {  // v9's two-warpgroup shapes, with a second Q tile in shared memory (v8's)
  static constexpr int rows_per_warp = 16;
  using Shapes = V10Shapes;
  template <class T, int D, int W, int C>
  static auto kernel() { return v10::forward_kernel<T, D, W, C>; }
  static int64_t smem(int64_t d, int64_t warps, int64_t Bc) { return v10::smem_bytes(int(d), int(warps), int(Bc)); }
};
struct V11 {  // v10's shapes and shared memory (O is staged in the tile's Q buffer)
  static constexpr int rows_per_warp = 16;
  using Shapes = V10Shapes;
  template <class T, int D, int W, int C>
  static auto kernel() { return v11::forward_kernel<T, D, W, C>; }
  static int64_t smem(int64_t d, int64_t warps, int64_t Bc) { return v11::smem_bytes(int(d), int(warps), int(Bc)); }
};
struct V12 {  // v11's shapes and shared memory; a producer warpgroup on top of the W consumer warps
  static constexpr int rows_per_warp = 16, extra_threads = v12::kProducerThreads;
  using Shapes = V10Shapes;
  template <class T, int D, int W, int C>
  static auto kernel() { return v12::forward_kernel<T, D, W, C>; }
  static int64_t smem(int64_t d, int64_t warps, int64_t Bc) { return v12::smem_bytes(int(d), int(warps), int(Bc)); }
};
struct V13 {  // v12's design at every native width D (the kernel's Dq)
  static constexpr int rows_per_warp = 16, extra_threads = v13::kProducerThreads;
  using Shapes = V13Shapes;
  template <class T, int D, int W, int C>
  static auto kernel() { return v13::forward_kernel<T, D, W, C>; }
  static int64_t smem(int64_t d, int64_t warps, int64_t Bc) { return v13::smem_bytes(int(d), int(warps), int(Bc)); }
};
// The native widths (head dims a kernel is compiled for) of v13, and of v2 ... v12.
template <int... W>
struct Widths {
  static constexpr int list[sizeof...(W)] = {W...};
};
using V13Widths = Widths<32, 64, 96, 128, 192, 256>;
using V5Widths = Widths<64, 128, 192, 256>;  // v5: every d, on any GPU with mma.sync
using TcWidths = Widths<64, 128>;
// The smallest of the widths >= d, 0 if none.
template <class Ws>
int64_t next_width(int64_t d) {
  for (int w : Ws::list)
    if (w >= d) return w;
  return 0;
}
// Threads a version launches beyond its W compute warps (v12, v13: the producer warpgroup).
template <class Ver>
constexpr int extra_threads() {
  if constexpr (requires { Ver::extra_threads; }) return Ver::extra_threads;
  return 0;
}

// Ver's shapes at head dim d, as (Br, Bc).
template <class Ver, class... S>
std::vector<BlockShape> shape_list(int64_t d, std::tuple<S...>*) {
  std::vector<BlockShape> list;
  ((d <= S::max_d && d >= S::min_d ? list.push_back(BlockShape{Ver::rows_per_warp * S::warps, S::Bc}) : void()), ...);
  return list;
}
template <class Ver>
std::vector<BlockShape> shape_list(int64_t d) {
  return shape_list<Ver>(d, static_cast<typename Ver::Shapes*>(nullptr));
}

// Launches a tensor-core kernel (v2 ... v13) for the dtype and the plan's native width:
// make(T, D) returns the kernel function for T = __half/__nv_bfloat16, D = pl.d_kernel, one of Ws
// (v2 ... v12: 64, 128; v13: its six); extra... follow the common arguments (v10 ... v13: the tile
// counter; v12, v13: then their tensor maps).
template <class Ws = TcWidths, class Make, class... Extra>
void tc_launch(const fa::AttnProblem& p, fa::DType dtype, const void* Q, const void* K, const void* V,
               void* O, float* LSE, const Plan& pl, cudaStream_t stream, Make make, Extra... extra) {
  auto launch = [&](auto tag, auto d_tag) {
    using T = decltype(tag);
    auto* kernel_fn = make(tag, d_tag);
    set_smem(kernel_fn, pl.smem_bytes);
    int64_t grid = pl.blocks;
    if (kernel_info(pl.runs).persistent) {  // as many blocks as stay resident at once, each walks tiles
      int dev = 0, sms = 0, per_sm = 0;
      FA_CUDA_CHECK(cudaGetDevice(&dev));
      FA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
      FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_fn, int(pl.threads), size_t(pl.smem_bytes)));
      grid = std::min<int64_t>(pl.blocks, int64_t(std::max(per_sm, 1)) * sms);
      if (pl.persistent_blocks > 0) grid = std::min(grid, pl.persistent_blocks);
    }
    kernel_fn<<<unsigned(grid), unsigned(pl.threads), size_t(pl.smem_bytes), stream>>>(
        static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), static_cast<T*>(O),
        LSE, p, p.resolved_scale(), ceil_div(p.N_q, pl.Br), extra...);
    FA_CUDA_CHECK(cudaGetLastError());
  };
  const auto with_width = [&]<int... W>(auto tag, Widths<W...>*) {
    const bool found = ((pl.d_kernel == W ? (launch(tag, std::integral_constant<int, W>{}), true) : false) || ...);
    if (!found)  // plan() chose the width: unreachable unless the two disagree
      throw Unsupported("--head-dim", "a compiled width", std::to_string(pl.d_kernel));
  };
  if (dtype == fa::DType::fp16) with_width(__half{}, static_cast<Ws*>(nullptr));
  else with_width(__nv_bfloat16{}, static_cast<Ws*>(nullptr));
}

// Ver compiled for shape S, if S is the plan's shape.
// (Only the native widths S::min_d ... S::max_d are compiled; outside them the D = S::max_d kernel
// stands in for the type and is never launched: a plan with another d does not match.)
template <class Ver, class S, class Go>
bool if_shape(const Plan& pl, int64_t d, Go go) {
  if (pl.threads != 32 * S::warps + extra_threads<Ver>() || pl.Bc != S::Bc || d > S::max_d || d < S::min_d) return false;
  go([](auto t, auto dt) {
    constexpr int D = decltype(dt)::value <= S::max_d && decltype(dt)::value >= S::min_d ? decltype(dt)::value : S::max_d;
    return Ver::template kernel<decltype(t), D, S::warps, S::Bc>();
  });
  return true;
}
template <class Ver, class Go, class... S>
bool dispatch_shape(const Plan& pl, int64_t d, Go go, std::tuple<S...>*) {
  return (if_shape<Ver, S>(pl, d, go) || ...);
}
template <class Ver, class Go>
bool dispatch_shape(const Plan& pl, int64_t d, Go go) {
  return dispatch_shape<Ver>(pl, d, go, static_cast<typename Ver::Shapes*>(nullptr));
}

// v14's split of the keys (kernels/v14_split_kv.cuh). A block is (batch, kv head, tile of 16
// packed rows, key range); without a split there are units = B H_kv row_tiles of them, too few to
// fill the GPU when the batch is small (B = 8, H_kv = 8: 64 blocks on 132 SMs). Each block streams
// at least 4 tiles (256 keys), so never more splits than 64-key tiles / 4, and at most 128. Then,
// measured on the H200 (BM_decode_splits at 7 shapes, docs/lab/05_cuda_tiled.md):
//   - one wave of one block per SM, s = SMs / units, where that keeps at least 85 % of the SMs
//     streaming: one block of 4 warps an SM streams as fast as two co-resident ones, and fewer,
//     longer splits win (one sequence of 131072 keys, 8 kv heads: 16 splits, 0.159 ms, against
//     29-33 splits filling two blocks an SM, 0.183-0.188; 8 x 32768 keys: 2 splits, 0.273, against
//     4, 0.281);
//   - else (where one wave of one block each would leave more than 15 % of the SMs idle) the
//     fewest splits within 85 % of the best wave efficiency over all blocks resident at once,
//     efficiency(s) = units s / (waves slots), slots = SMs x blocks resident per SM (9 x 32768
//     keys, 72 units: 7 splits, 0.329 ms, against 1, 0.494).
// FlashAttention-2's num_splits_heuristic weighs the same waves (read, not copied); the rules and
// thresholds here are ours.
void split_kv_plan(const fa::AttnProblem& p, const Config& cfg, Plan& pl) {
  const int64_t D = pl.d_kernel;
  pl.Br = v14::kRows, pl.Bc = v14::Bc;
  pl.threads = v14::kThreads;
  pl.smem_bytes = v14::smem_bytes(int(D));
  pl.row_tiles = ceil_div(p.H / p.H_kv * p.N_q, v14::kRows);
  // The keys one tile's rows may see between them: N_k, or with a sliding window its band over
  // the N_q rows (the kernel starts the splits at the band; a shorter cached sequence only
  // narrows it).
  const int64_t span = p.has_window() ? std::max<int64_t>(1, p.key_end(p.N_q - 1) - p.key_begin(0)) : p.N_k;
  const int64_t units = p.B * p.H_kv * pl.row_tiles, tiles = ceil_div(span, v14::Bc);
  const int sms = cfg.sm_count > 0 ? cfg.sm_count : std::max(fa::gpu_sm_count(), 0);
  const int64_t sm_count = sms > 0 ? sms : 132;
  const int64_t max_s = std::max<int64_t>(1, std::min<int64_t>(128, tiles / 4));
  int64_t s = cfg.splits;
  if (s <= 0) s = std::clamp<int64_t>(sm_count / units, 1, max_s);  // one block an SM, one wave
  if (cfg.splits <= 0 && units * s < 0.85 * double(sm_count)) {
    // Blocks resident per SM: by shared memory (228 KiB an SM on Hopper, 1 KiB reserved per block)
    // and by registers (64K an SM; ptxas, CUDA 13.0: 80-118 a thread up to D = 64, 134-166 at 96
    // and 128, 204-255 at 192 and 256; rounded up here).
    const int64_t regs = D <= 64 ? 128 : D <= 128 ? 168 : 256;
    const int64_t per_sm = std::max<int64_t>(1, std::min(228 * 1024 / (pl.smem_bytes + 1024), 65536 / (v14::kThreads * regs)));
    const int64_t slots = sm_count * per_sm;
    const auto eff = [&](int64_t k) { return double(units * k) / double(ceil_div(units * k, slots) * slots); };
    double best = 0;
    for (int64_t k = 1; k <= max_s; ++k) best = std::max(best, eff(k));
    s = 1;
    while (s < max_s && eff(s) < 0.85 * best) ++s;
  }
  if (s > tiles)
    throw Unsupported("--splits", "at most one split per 64-key tile (" + std::to_string(tiles) + " here)", std::to_string(s));
  pl.keys_per_split = ceil_div(tiles, s) * v14::Bc;
  pl.splits = ceil_div(span, pl.keys_per_split);  // no empty split
  pl.blocks = units * pl.splits;
  if (pl.splits > 1) check_int(ceil_div(p.B * p.H * p.N_q, v14::kWarps), "--batch/--heads/--seq-q", "the merge's blocks");
  if (pl.splits > 1)
    pl.workspace_bytes = pl.splits * p.B * p.H * p.N_q * (pl.d_buffers + 1) * int64_t(sizeof(float));
}

// v14: the split-KV pass, then (splits > 1) the merge of the partial states, on the stream.
void v14_forward(const fa::AttnProblem& p, fa::DType dtype, const void* Q, const void* K, const void* V,
                 void* O, float* LSE, const Plan& pl, cudaStream_t stream, const KvCache& cache) {
  const v14::Cache c{cache.lens, cache.block_table, int(cache.page_size), cache.pages_per_seq, cache.num_pages};
  const int64_t rows_all = p.B * p.H * p.N_q;
  fa::DeviceBuffer<float> part(pl.splits > 1 ? pl.splits * rows_all * (p.d + 1) : 0, fa::Mem::Extra, stream);
  float* O_part = part.get();
  float* LSE_part = O_part ? O_part + pl.splits * rows_all * p.d : nullptr;
  const auto launch = [&](auto tag, auto d_tag) {
    using T = decltype(tag);
    constexpr int D = decltype(d_tag)::value;
    auto* kernel_fn = cache.paged() ? v14::forward_kernel<T, D, true> : v14::forward_kernel<T, D, false>;
    set_smem(kernel_fn, pl.smem_bytes);
    kernel_fn<<<unsigned(pl.blocks), unsigned(pl.threads), size_t(pl.smem_bytes), stream>>>(
        static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V), static_cast<T*>(O), LSE,
        O_part, LSE_part, p, p.resolved_scale(), int(pl.splits), pl.keys_per_split, pl.row_tiles, c);
    FA_CUDA_CHECK(cudaGetLastError());
    if (pl.splits > 1) {
      v14::combine_kernel<T><<<unsigned(ceil_div(rows_all, v14::kWarps)), v14::kThreads, 0, stream>>>(
          O_part, LSE_part, static_cast<T*>(O), LSE, rows_all, p.d, int(pl.splits));
      FA_CUDA_CHECK(cudaGetLastError());
    }
  };
  const auto with_width = [&]<int... W>(auto tag, Widths<W...>*) {
    const bool found = ((pl.d_kernel == W ? (launch(tag, std::integral_constant<int, W>{}), true) : false) || ...);
    if (!found) throw Unsupported("--head-dim", "a compiled width", std::to_string(pl.d_kernel));
  };
  if (dtype == fa::DType::fp16) with_width(__half{}, static_cast<V13Widths*>(nullptr));
  else with_width(__nv_bfloat16{}, static_cast<V13Widths*>(nullptr));
}

void tc_forward(const fa::AttnProblem& p, fa::DType dtype, const void* Q, const void* K, const void* V,
                void* O, float* LSE, const Plan& pl, cudaStream_t stream, const KvCache& cache = {},
                const Varlen& packed = {}) {
  if (pl.runs == "v14") {
    v14_forward(p, dtype, Q, K, V, O, LSE, pl, stream, cache);
    return;
  }
  const auto go = [&](auto make) { tc_launch(p, dtype, Q, K, V, O, LSE, pl, stream, make); };
  bool found = true;
  if (pl.runs == "v2")
    go([](auto t, auto d) { return v2::forward_kernel<decltype(t), decltype(d)::value>; });
  else if (pl.runs == "v3")
    go([](auto t, auto d) { return v3::forward_kernel<decltype(t), decltype(d)::value>; });
  else if (pl.runs == "v4")
    go([](auto t, auto d) { return v4::forward_kernel<decltype(t), decltype(d)::value>; });
  else if (pl.runs == "v5")
    found = dispatch_shape<V5>(pl, pl.d_kernel, [&](auto make) { tc_launch<V5Widths>(p, dtype, Q, K, V, O, LSE, pl, stream, make); });
  else if (pl.runs == "v6")
    found = dispatch_shape<V6>(pl, pl.d_kernel, go);
  else if (pl.runs == "v7")
    found = dispatch_shape<V7>(pl, pl.d_kernel, go);
  else if (pl.runs == "v8")
    found = dispatch_shape<V8>(pl, pl.d_kernel, go);
  else if (pl.runs == "v9")
    found = dispatch_shape<V9>(pl, pl.d_kernel, go);
  else if (pl.runs == "v10" || pl.runs == "v11" || pl.runs == "v12" || pl.runs == "v13") {
    // The tile scheduler of v10 (and v11 ... v13): one counter, zeroed on the stream before the launch,
    // freed after it (stream-ordered, so concurrent calls on other streams each have their own).
    fa::DeviceBuffer<unsigned> counter(1, fa::Mem::Extra, stream);
    FA_CUDA_CHECK(cudaMemsetAsync(counter.get(), 0, sizeof(unsigned), stream));
    const auto go_counter = [&](auto make) { tc_launch(p, dtype, Q, K, V, O, LSE, pl, stream, make, counter.get()); };
    if (pl.runs == "v12" || pl.runs == "v13") {
      // and v12's copies: a tensor map per Q, K, V (one box: 64 columns x Br or Bc rows). Rows are
      // p.d wide (v13: columns past p.d of a box arrive as zeros). A packed batch (v13): rows are
      // tokens, slices heads.
      const auto map = [&](const void* X, int64_t rows, int64_t slices, int64_t box, int64_t total, int64_t heads) {
        return packed.any() ? fa::tensor_map_3d(X, dtype, p.d, total, heads, int(box), heads * p.d, p.d)
                            : fa::tensor_map_3d(X, dtype, p.d, rows, slices, int(box));
      };
      const CUtensorMap tm_q = map(Q, p.N_q, p.B * p.H, pl.Br, packed.total_q, p.H);
      const CUtensorMap tm_k = map(K, p.N_k, p.B * p.H_kv, pl.Bc, packed.total_k, p.H_kv);
      const CUtensorMap tm_v = map(V, p.N_k, p.B * p.H_kv, pl.Bc, packed.total_k, p.H_kv);
      const Packed pk{packed.cu_q, packed.cu_k, int(packed.total_q), int(packed.total_k)};
      if (pl.runs == "v12")
        found = dispatch_shape<V12>(pl, pl.d_kernel, [&](auto make) {
          tc_launch(p, dtype, Q, K, V, O, LSE, pl, stream, make, counter.get(), tm_q, tm_k, tm_v);
        });
      else
        found = dispatch_shape<V13>(pl, pl.d_kernel, [&](auto make) {
          tc_launch<V13Widths>(p, dtype, Q, K, V, O, LSE, pl, stream, make, counter.get(), tm_q, tm_k, tm_v, pk);
        });
    } else
      found = pl.runs == "v10" ? dispatch_shape<V10>(pl, pl.d_kernel, go_counter)
                               : dispatch_shape<V11>(pl, pl.d_kernel, go_counter);
  } else
    found = false;
  if (!found)  // plan() checked the shape: unreachable unless the two disagree
    throw Unsupported("--block-q/--block-k", "a compiled shape", std::to_string(pl.Br) + "x" + std::to_string(pl.Bc));
}

}  // namespace

std::vector<BlockShape> block_shapes(const std::string& kernel, int64_t d) {
  if (kernel == "v5") return shape_list<V5>(d);
  if (kernel == "v6") return shape_list<V6>(d);
  if (kernel == "v7") return shape_list<V7>(d);
  if (kernel == "v8") return shape_list<V8>(d);
  if (kernel == "v9") return shape_list<V9>(d);
  if (kernel == "v10") return shape_list<V10>(d);
  if (kernel == "v11") return shape_list<V11>(d);
  if (kernel == "v12") return shape_list<V12>(d);
  if (kernel == "v13") return shape_list<V13>(d);
  return {};
}

BlockShape default_shape(const std::string& kernel, int64_t d, int64_t N_q, int64_t N_k) {
  // Chosen by the sweeps (bench BM_shape; docs/results/bench_05_cuda_tiled.json, lab notebook), on the
  // H200, at d = 64 and 128, N = 1024 and 8192, causal or not. v5: 128 x 128 was the fastest
  // shape, or within 2 % of it, everywhere (our guess before the sweep was 128 x 64). v6: 128 x 64
  // at d = 64 and 128 x 32 at d = 128 were the fastest everywhere (the guesses before its sweep).
  if (kernel == "v5") return d <= 128 ? BlockShape{128, 128} : BlockShape{64, 32};  // d > 128: its one shape
  if (kernel == "v6") return d <= 64 ? BlockShape{128, 64} : BlockShape{128, 32};
  // v7: our guess before its sweep was v5's winner, 128 x 128 (two warpgroups). The sweep kept it
  // at d = 128 (320 TFLOP/s at N = 8192, the next shape 275) and chose 64 x 128 at d = 64 (one
  // warpgroup: 280 against 249 non-causal at N = 8192; summed over the sweep's four d = 64
  // columns 962, against 128 x 64's 950 and 128 x 128's 877; 128 x 64 wins the causal columns).
  if (kernel == "v7") return d <= 64 ? BlockShape{64, 128} : BlockShape{128, 128};
  // v8: v7's shapes, by the same sweep (BM_shape runs v8's too).
  if (kernel == "v8") return default_shape("v7", d);
  // v9: our guess before its sweep was v7's shapes. The sweep (run 1 of gpu_check_v9, bf16) kept
  // 128 x 128 at d = 128 (fastest in all 8 columns: 337 TFLOP/s at N = 8192, 128 x 64 293) and
  // chose 128 x 64 at d = 64, fastest in all 8 columns (314 against 276 for v9 at v7's 64 x 128, at
  // N = 8192, not causal): with two warpgroups a block, one's softmax also overlaps the other's products.
  if (kernel == "v9") return d <= 64 ? BlockShape{128, 64} : BlockShape{128, 128};
  // v10: v9's (a guess: its own sweep is in the lab notebook).
  if (kernel == "v10") return default_shape("v9", d);
  // v11: v10's (the O write does not change what fits).
  if (kernel == "v11") return default_shape("v10", d);
  // v12: v11's (the producer's registers and barriers do not change what fits).
  if (kernel == "v12") return default_shape("v11", d);
  // v13: 192 x 128 at d <= 64 from N_q = 2048 and 128 x 80 at d = 192, 256 from N_k = 8192; else
  // 128 x 128 where it fits (d <= 128), 128 x 64 above. Its sweeps (bench BM_shape, H200, bf16,
  // causal or not; lab notebook, v13): 128 x 128 beat 128 x 64 at every point at d = 32 ... 128, by
  // 7-21 % (N = 512 ... 8192). The larger shapes win on long sequences only (2026-12-03, N = 512 ...
  // 16384): 192 x 128 from N_q = 2048 (d = 32: 1.05-1.26x, d = 64: 1.00-1.06x; at N_q = 512 and
  // 1024 down to 0.91x: the rows padded to 192, the causal diagonal's larger blocks); 128 x 80 from
  // N_k = 8192 (0.99-1.11x; below, 0.91-1.03x, no clear winner). The rule reads N_q for the rows a
  // block adds, N_k for the keys. (128 x 112 at 192, FlashAttention-3's, lost to 128 x 80 at every
  // point.)
  if (kernel == "v13") {
    if (d <= 64 && N_q >= 2048) return {192, 128};
    if (d <= 128) return {128, 128};
    return N_k >= 8192 ? BlockShape{128, 80} : BlockShape{128, 64};
  }
  return {0, 0};
}

#if FA05_HAVE_SM90A
constexpr bool kHaveSm90a = true;
#else
constexpr bool kHaveSm90a = false;  // v7 ... v13 are compiled only into sm_90a code
#endif

AutoChoice auto_kernel(const fa::AttnProblem& p, fa::DType dtype, const Config& cfg) {
  if (dtype == fa::DType::fp32) return {"v1", "fp32 runs v1: every tensor-core version takes fp16/bf16"};
  const int sm = cfg.sm > 0 ? cfg.sm : fa::gpu_compute_capability();
  if (kHaveSm90a && (sm <= 0 || sm == 90)) {
    // Decode (lab notebook, "v14: the N_q crossover"; H200, bf16, d = 128): v14 beats v13 where
    // the packed rows of a kv head, (H / H_kv) N_q, fit two 16-row tiles, or where v13's blocks
    // (one per (batch, head) at N_q <= 128) are fewer than the SMs. Past both, v14's row tiles
    // each stream the K/V tile again and v13 won (B = 8 and 16, H_kv = 8, N_q = 16: 0.62-0.65x).
    const int sms = cfg.sm_count > 0 ? cfg.sm_count : fa::gpu_sm_count() > 0 ? fa::gpu_sm_count() : 132;
    const int64_t packed = p.H / p.H_kv * p.N_q;
    if (p.N_q <= 16 && (packed <= 32 || p.B * p.H < sms))
      return {"v14", "decode: N_q <= 16 with " + std::to_string(packed) + " packed rows per kv head (split-KV, GQA packing)"};
    return {"v13", "Hopper: v13, v12's design at every native width"};
  }
  return {"v5", "no wgmma here: v5, mma.sync at widths 64, 128, 192 and 256"};
}

Plan plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const Config& cfg) {
  return plan(kernel, p, dtype, cfg, KvCache{});
}

Plan plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const Config& cfg,
          const KvCache& cache) {
  return plan(kernel, p, dtype, cfg, cache, Varlen{});
}

Plan plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const Config& cfg,
          const KvCache& cache, const Varlen& packed) {
  // A packed batch is not its padded problem: B N_max^2 may pass validate()'s 2^40 where no
  // sequence's does. Its longest sequence is checked as one problem, its tensors below (the
  // tokens' 32-bit coordinates) and its grid (at most 2^31 - 1 tiles).
  fa::AttnProblem one = p;
  if (packed.any()) one.B = 1, one.lse_head_stride = 0;
  fa::validate(one);
  // Issue 34: v1, v13 and v14 take a sliding window and a softcap (math.md section 8; the
  // kernels' headers say how); the other kernels refuse them, never ignore them.
  const bool variant = p.has_window() || p.softcap > 0.f;
  const std::string variant_flag = p.has_window() ? "--window" : "--softcap";
  std::string name = kernel;  // the kernel asked for, once "auto" is resolved
  Plan pl;
  if (kernel == "auto") {
    AutoChoice choice = cache.any() && dtype != fa::DType::fp32
                            ? AutoChoice{"v14", "a KV cache: v14 is the kernel that reads one"}
                        : packed.any() && dtype != fa::DType::fp32
                            ? AutoChoice{"v13", "a packed batch: v13 is the kernel that reads one"}
                            : auto_kernel(p, dtype, cfg);
    name = choice.kernel;
    pl.note = "auto: " + choice.kernel + " (" + choice.why + ")";
  }
  const KernelInfo& info = kernel_info(name);
  // The kernel as the caller named it, for messages ("auto (v13 here)").
  const std::string asked = kernel == "auto" ? "auto (" + name + " here)" : name;
  // auto takes no knob whose meaning depends on what it picks: refused on every GPU alike.
  if (kernel == "auto" && (cfg.persistent_blocks > 0 || cfg.Br > 0 || cfg.Bc > 0 || cfg.sram_bytes > 0 || cfg.splits > 0))
    throw Unsupported(cfg.persistent_blocks > 0 ? "--persistent-blocks"
                      : cfg.splits > 0          ? "--splits"
                      : cfg.sram_bytes > 0      ? "--sram-bytes"
                                                : "--block-q/--block-k",
                      "no block or grid knob with kernel auto (name a kernel to set one)", "kernel auto");
  if (p.d > info.max_d)
    throw Unsupported("--head-dim", "at most " + std::to_string(info.max_d) + " for kernel " + asked,
                      std::to_string(p.d));
  const auto add_note = [&](const std::string& n) { pl.note += (pl.note.empty() ? "" : "; ") + n; };
  pl.runs = name;
  const int64_t tc_width = next_width<TcWidths>(p.d);  // v2 ... v12's width for d (0: none, d > 128)
  const auto widths_cover = [&](const std::string& k) {  // k has a native width >= d
    return k == "v13" || k == "v14" || k == "v5" || tc_width > 0;
  };
  if (info.tensor_cores && dtype == fa::DType::fp32) {
    pl.runs = "v1";
    add_note(name + " runs fp16/bf16 (tensor cores); ran v1 for fp32");
    if (cfg.persistent_blocks > 0) add_note("--persistent-blocks does not apply to v1");
  } else if (info.tensor_cores && !widths_cover(name)) {
    pl.runs = name == "v12" ? "v13" : "v1";
    add_note(name + " runs d <= 128 (compiled for 64 and 128, other d zero-padded); ran " + pl.runs + " at d = " +
             std::to_string(p.d));
  }
  if (kernel_info(pl.runs).wgmma) {
    const int sm = cfg.sm > 0 ? cfg.sm : fa::gpu_compute_capability();
    if (!kHaveSm90a || (sm > 0 && sm != 90)) {
      const std::string asked = pl.runs;
      pl.runs = "v5";  // every v7 ... v13 shape is a v5 shape (V7Shapes); above d = 128, v5's own
      add_note(!kHaveSm90a ? asked + " needs a build for sm_90a (wgmma); this one has none: ran " + pl.runs
                           : asked + " runs on sm_90 only (wgmma); ran " + pl.runs + " on this sm_" + std::to_string(sm) + " GPU");
    } else if (pl.runs == "v8" && tc_width == 64) {
      // Measured on the H200 (lab notebook, v8): at d = 64 v7's 64 x 128 blocks fit three to an SM, and
      // v8's second Q tile leaves room for two; v8 ran 17 % slower there. v7 runs instead.
      pl.runs = "v7";
      add_note("v8 runs d = 128 only (at d = 64 its second Q tile costs v7's third block per SM): ran v7");
    } else if (pl.runs == "v10" && tc_width == 64) {
      // Measured on the H200 (lab notebook, v10): at d = 64 its tile bookkeeping takes v9's 127 registers
      // past 128 (135 in the first draft, 150 now), one block per SM instead of two, 26-32 % slower.
      // v9 runs instead.
      pl.runs = "v9";
      add_note("v10 runs d = 128 only (at d = 64 its registers cost v9's second block per SM): ran v9");
    } else if (pl.runs == "v11" && tc_width == 64) {
      // v10's kernel with another ending: the same reason, not measured again.
      pl.runs = "v9";
      add_note("v11 runs d = 128 only (as v10: at d = 64 its registers cost v9's second block per SM): ran v9");
    } else if (pl.runs == "v12" && tc_width == 64) {
      // v11's consumers with a producer warpgroup on top: the same reason, not measured again.
      pl.runs = "v9";
      add_note("v12 runs d = 128 only (as v10: at d = 64 its registers cost v9's second block per SM): ran v9");
    }
    if (info.persistent && !kernel_info(pl.runs).persistent && cfg.persistent_blocks > 0)
      add_note("--persistent-blocks does not apply to " + pl.runs);
  }
  if (variant && pl.runs != "v1" && pl.runs != "v13" && pl.runs != "v14") {
    if (kernel != "auto")
      throw Unsupported(variant_flag, "kernel v1, v13, v14 or auto (the kernels that take a window and a softcap)",
                        "kernel " + asked + (pl.runs != name ? ", which runs " + pl.runs + " here" : ""));
    add_note(pl.runs + " takes no window or softcap: ran v1");  // auto off Hopper: v5 would run
    pl.runs = "v1";
  }
  // The knobs mean nothing to the other kernels: refuse them rather than ignore them. v1 takes
  // all three; v5, v6 and v7 take a block shape they are compiled for (--block-q, --block-k).
  const KernelInfo& runs = kernel_info(pl.runs);
  const bool runs_shaped = runs.shaped;
  // The head-dim padding (Plan::d_kernel, d_buffers): the next native width of the kernel that runs.
  pl.d_kernel = pl.d_buffers = p.d;
  if (runs.tensor_cores) {
    const bool own_fill = pl.runs == "v13" || pl.runs == "v14";  // zero-fills columns past d itself
    pl.d_kernel = own_fill ? next_width<V13Widths>(p.d) : pl.runs == "v5" ? next_width<V5Widths>(p.d) : tc_width;
    pl.d_buffers = own_fill ? (p.d + 7) / 8 * 8 : pl.d_kernel;  // TMA, cp.async: rows of 16-byte multiples
    if (pl.d_kernel != p.d)
      add_note("d = " + std::to_string(p.d) + " runs " + pl.runs + "'s d = " + std::to_string(pl.d_kernel) + " kernel, " +
               (pl.d_buffers == p.d ? std::string("its columns past d filled with zeros by ") + (pl.runs == "v14" ? "cp.async" : "TMA")
                                    : "on copies of Q, K, V, O zero-padded to " + std::to_string(pl.d_buffers) + " columns"));
  }
  if (cfg.splits > 0 && pl.runs != "v14")
    throw Unsupported("--splits", "only with v14 (split-KV)", "kernel " + asked + ", which runs " + pl.runs + " here");
  if (packed.any()) {  // a packed batch (issue 34): v13 reads one; nothing else may ignore it
    if (cache.any()) throw fa::InputError("--cu-seqlens-q", "no KV cache with a packed batch", "a KV cache");
    if (pl.runs != "v13")
      throw Unsupported("--cu-seqlens-q", "kernel v13 or auto with --dtype fp16/bf16 on an sm_90a GPU (v13 alone reads a packed batch)",
                        "kernel " + asked + ", which runs " + pl.runs + " here" + (dtype == fa::DType::fp32 ? " for fp32" : ""));
    if (packed.cu_k == nullptr || packed.total_q < 1 || packed.total_k < 1)
      throw fa::InputError("--cu-seqlens-k", "both offsets arrays and at least one query and one key",
                           std::to_string(packed.total_q) + " queries, " + std::to_string(packed.total_k) + " keys");
    if (packed.total_q < p.N_q || packed.total_k < p.N_k)
      throw fa::InputError("--cu-seqlens-q/-k", "the longest sequence no longer than the batch's tokens",
                           "N_q " + std::to_string(p.N_q) + " of " + std::to_string(packed.total_q) + ", N_k " +
                               std::to_string(p.N_k) + " of " + std::to_string(packed.total_k));
  }
  if (cache.any()) {  // a KV cache (issue 33): v14 reads it; nothing else may ignore it
    const std::string flag = cache.paged() ? "--block-table" : "--cache-lens";
    if (pl.runs != "v14")
      throw Unsupported(flag, "kernel v14 or auto with fp16/bf16 (v14 alone reads a KV cache)",
                        "kernel " + asked + ", which runs " + pl.runs + " here");
    if (cache.paged()) {
      if (cache.page_size < 16 || cache.page_size > 256)
        throw fa::InputError("--page-size", "16 ... 256 keys a page", std::to_string(cache.page_size));
      if (cache.pages_per_seq <= 0 || cache.pages_per_seq * cache.page_size != p.N_k || cache.num_pages <= 0)
        throw fa::InputError("--block-table", "pages_per_seq x page size = N_k (" + std::to_string(p.N_k) +
                                                  ") and at least one page",
                             std::to_string(cache.pages_per_seq) + " x " + std::to_string(cache.page_size) + ", " +
                                 std::to_string(cache.num_pages) + " pages");
      check_int(p.N_k, "--seq-k", "N_k with a paged cache");
      if (pl.d_buffers != p.d)  // padding would copy the whole cache at every step
        throw Unsupported("--head-dim", "a multiple of 8 with a paged cache (v14 reads rows of 16-byte multiples)",
                          std::to_string(p.d));
    }
  }
  if (cfg.persistent_blocks > 0 && !info.persistent)  // v8, v10 ... v13 that falls back ignores it
    throw Unsupported("--persistent-blocks", "only with v8, v10, v11, v12 or v13", "kernel " + asked);
  if (pl.runs != "v1" && (cfg.sram_bytes > 0 || ((cfg.Br > 0 || cfg.Bc > 0) && !runs_shaped)))
    throw Unsupported(runs_shaped ? "--sram-bytes" : "--sram-bytes/--block-q/--block-k",
                      runs_shaped ? "only with v1 (" + name + " takes --block-q/--block-k)" : "only with v1, v5 ... v13",
                      "kernel " + asked + ", which runs " + pl.runs + " here");
  if (pl.runs == "v2" || pl.runs == "v3" || pl.runs == "v4") {
    pl.Br = 64, pl.Bc = 64;  // v2::Br, v2::Bc; v3 and v4 keep them
    pl.threads = 128;
    const int D = int(pl.d_kernel);
    pl.smem_bytes = pl.runs == "v2" ? (D == 64 ? v2::smem_bytes<64>() : v2::smem_bytes<128>())
                                    : (D == 64 ? v3::smem_bytes<64>() : v3::smem_bytes<128>());
    pl.blocks = p.B * p.H * ceil_div(p.N_q, pl.Br);
  } else if (runs_shaped) {
    // The shared memory of shape (Br, Bc) for the kernel that runs (v7, v8: 16 rows per warp, as v5).
    const auto smem = [&](int64_t Br, int64_t Bc) {
      const int64_t warps = Br / (pl.runs == "v6" ? V6::rows_per_warp : V5::rows_per_warp);
      const int64_t D = pl.d_kernel;
      return pl.runs == "v5"   ? V5::smem(D, warps, Bc)
             : pl.runs == "v6" ? V6::smem(D, warps, Bc)
             : pl.runs == "v7" ? V7::smem(D, warps, Bc)
             : pl.runs == "v8" ? V8::smem(D, warps, Bc)
             : pl.runs == "v9" ? V9::smem(D, warps, Bc)
             : pl.runs == "v10" ? V10::smem(D, warps, Bc)
             : pl.runs == "v11" ? V11::smem(D, warps, Bc)
             : pl.runs == "v12" ? V12::smem(D, warps, Bc)
                                : V13::smem(D, warps, Bc);
    };
    // The shapes offered: those of the kernel that runs, or, where v5 stands in for v7 ... v12,
    // those of the version asked for (each is a v5 shape; v13's 192-row ones and 128 x 80 are
    // not, so where v5 stands in for v13 it offers its own).
    const std::string shape_of = pl.runs == "v5" && pl.d_kernel <= 128 && name != "v13" ? name : pl.runs;
    const BlockShape def = default_shape(shape_of, pl.d_kernel, p.N_q, p.N_k);
    const std::vector<BlockShape> shapes = block_shapes(shape_of, pl.d_kernel);
    const auto is_compiled = [&](int64_t Br, int64_t Bc) {
      return std::any_of(shapes.begin(), shapes.end(), [&](const BlockShape& sh) { return sh.Br == Br && sh.Bc == Bc; });
    };
    pl.Br = cfg.Br > 0 ? cfg.Br : def.Br;
    pl.Bc = cfg.Bc > 0 ? cfg.Bc : def.Bc;
    // One side asked for (--block-k 64 alone): the other from the default, or, where that pair is
    // not compiled (v13's long-sequence default is 192 x 128, and 192 x 64 does not exist), from
    // the short-sequence default.
    if ((cfg.Br > 0) != (cfg.Bc > 0) && !is_compiled(pl.Br, pl.Bc)) {
      const BlockShape short_def = default_shape(shape_of, pl.d_kernel);
      pl.Br = cfg.Br > 0 ? cfg.Br : short_def.Br;
      pl.Bc = cfg.Bc > 0 ? cfg.Bc : short_def.Bc;
    }
    const bool compiled = is_compiled(pl.Br, pl.Bc);
    std::string list;
    for (const BlockShape& sh : shapes) list += (list.empty() ? "" : ", ") + std::to_string(sh.Br) + "x" + std::to_string(sh.Bc);
    if (!compiled)
      throw Unsupported("--block-q/--block-k", "a " + shape_of + " shape Br x Bc among " + list +
                            (shape_of != name ? " (" + name + " runs " + shape_of + " here)" : ""),
                        std::to_string(pl.Br) + "x" + std::to_string(pl.Bc));
    // A default shape that does not fit this GPU's shared memory gives way to the largest compiled
    // one that does (a shape asked for is kept, and refused at launch if it does not fit).
    const int64_t optin = cfg.smem_optin > 0 ? cfg.smem_optin : fa::gpu_smem_optin_bytes();
    const int64_t limit = optin > 0 ? optin : kMaxSmemSm90;
    if (cfg.Br <= 0 && cfg.Bc <= 0 && smem(pl.Br, pl.Bc) > limit) {
      BlockShape best{0, 0};
      for (const BlockShape& sh : shapes)
        if (smem(sh.Br, sh.Bc) <= limit &&
            (sh.Br * sh.Bc > best.Br * best.Bc || (sh.Br * sh.Bc == best.Br * best.Bc && sh.Br > best.Br)))
          best = sh;  // the most work per block; on a tie more rows share each K/V tile
      if (best.Br > 0) {
        add_note(std::to_string(pl.Br) + "x" + std::to_string(pl.Bc) + " blocks need more shared memory than this GPU's " +
                 std::to_string(limit) + " bytes: " + std::to_string(best.Br) + "x" + std::to_string(best.Bc));
        pl.Br = best.Br, pl.Bc = best.Bc;
      }
    }
    const int64_t warps = pl.Br / (pl.runs == "v6" ? V6::rows_per_warp : V5::rows_per_warp);  // v7, v8: 16, as v5
    pl.threads = 32 * warps + runs.extra_threads;
    pl.smem_bytes = smem(pl.Br, pl.Bc);
    pl.blocks = p.B * p.H * ceil_div(p.N_q, pl.Br);
    if (runs.persistent) pl.persistent_blocks = cfg.persistent_blocks;
    if (runs.tile_counter) pl.workspace_bytes = int64_t(sizeof(unsigned));
    if (pl.runs == "v12" || pl.runs == "v13") {
      // TMA coordinates are 32-bit: the row of a key block (j Bc, up to N_k + Bc), of a query
      // block (up to N_q) and the (batch, head) slice must fit in an int.
      check_int(p.N_q, "--seq-q", "N_q for " + pl.runs + "'s tensor maps");
      check_int(p.N_k + pl.Bc, "--seq-k", "N_k + Bc for " + pl.runs + "'s tensor maps");
      check_int(p.B * p.H, "--batch/--heads", "B * H for " + pl.runs + "'s tensor maps");
      // A packed batch's rows are tokens: up to total + Br (the last tile's box), also 32-bit.
      check_int(packed.total_q + pl.Br, "--cu-seqlens-q", "total_q + Br for v13's tensor maps");
      check_int(packed.total_k + pl.Bc, "--cu-seqlens-k", "total_k + Bc for v13's tensor maps");
    }
  } else if (pl.runs == "v14") {
    split_kv_plan(p, cfg, pl);
  } else if (pl.runs == "v1") {
    v1_blocks(p, cfg, pl.Br, pl.Bc);
    pl.threads = v1::kThreads;
    pl.blocks = p.B * p.H * ceil_div(p.N_q, pl.Br);
    pl.smem_bytes = v1::Layout{int(pl.Br), int(pl.Bc), int(p.d)}.bytes();  // Br, Bc <= 2^20, d <= 256
    if (pl.smem_bytes <= 0 || pl.smem_bytes > kMaxSmemSm90)
      throw Unsupported("--sram-bytes/--block-q/--block-k",
                        "blocks whose shared memory fits in " + std::to_string(kMaxSmemSm90) + " bytes",
                        "Br=" + std::to_string(pl.Br) + " Bc=" + std::to_string(pl.Bc) + " d=" +
                            std::to_string(p.d) + " (" + std::to_string(pl.smem_bytes) + " bytes)");
  } else {  // cublas
    check_int(p.N_k, "--seq-k", "N_k");
    check_int(p.H / p.H_kv * p.N_q, "--seq-q", "(H / H_kv) * N_q");
    check_int(p.B * p.H_kv, "--batch", "B * H_kv");
    pl.threads = baseline::kThreads;
    pl.blocks = p.B * p.H * p.N_q;
    pl.smem_bytes = 32 * 4;
    const int64_t nxn = p.B * p.H * p.N_q * p.N_k;
    pl.workspace_bytes = 4 * nxn + (dtype == fa::DType::fp32 ? 0 : 2 * nxn);
  }
  pl.padded_copies = pl.d_buffers != p.d;
  if (pl.padded_copies)  // zero-padded copies of Q, O (B H N_q rows each) and K, V (B H_kv N_k rows)
    pl.workspace_bytes += (packed.any() ? 2 * packed.total_q * p.H + 2 * packed.total_k * p.H_kv
                                        : 2 * p.B * p.H * p.N_q + 2 * p.B * p.H_kv * p.N_k) *
                          pl.d_buffers * fa::dtype_bytes(dtype);
  if (pl.blocks > INT_MAX)
    throw Unsupported("--batch/--heads/--seq-q", "at most 2^31 - 1 thread blocks", std::to_string(pl.blocks));
  return pl;
}

void check_alignment(const Plan& pl, fa::DType dtype, const void* Q, const void* K, const void* V,
                     const void* O, const float* LSE) {
  // Every kernel reads whole elements (a misaligned access is a sticky CUDA error that would
  // poison the caller's context); v2's 16-byte vector loads need 16-byte alignment.
  auto aligned = [](const void* ptr, uintptr_t a) { return reinterpret_cast<uintptr_t>(ptr) % a == 0; };
  for (const void* ptr : {Q, K, V, O})
    if (!aligned(ptr, uintptr_t(fa::dtype_bytes(dtype))))
      throw fa::InputError("Q/K/V/O", "pointers aligned to the " + std::to_string(fa::dtype_bytes(dtype)) +
                                          "-byte element size", "a misaligned pointer");
  if (!aligned(LSE, 4)) throw fa::InputError("LSE", "a 4-byte aligned pointer", "a misaligned pointer");
  // (On padded copies the kernel reads only the workspace: the copies need the element alignment.)
  if (pl.runs != "v1" && pl.runs != "cublas" && !pl.padded_copies)
    for (const void* ptr : {Q, K, V, O})
      if (!aligned(ptr, 16))
        throw Unsupported("Q/K/V/O", "16-byte aligned pointers for " + pl.runs + "'s 16-byte loads",
                          "a misaligned pointer");
}

void forward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
             const void* K, const void* V, void* O, float* LSE, const Config& cfg,
             cudaStream_t stream) {
  forward(kernel, p, dtype, Q, K, V, O, LSE, KvCache{}, cfg, stream);
}

namespace {
// forward() and forward_varlen(): plan, then run the kernel, on padded copies where d needs them.
void forward_impl(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
                  const void* K, const void* V, void* O, float* LSE, const KvCache& cache,
                  const Varlen& packed, const Config& cfg, cudaStream_t stream) {
  Config here = cfg;  // planned for this device, whatever cfg says
  here.sm = 0, here.smem_optin = 0;
  const Plan pl = plan(kernel, p, dtype, here, cache, packed);
  check_alignment(pl, dtype, Q, K, V, O, LSE);
  if (pl.padded_copies) {
    // Head-dim padding (common/cuda/pad_columns.hpp): the kernel runs on zero-padded copies, with
    // the scale of the real d; LSE is written directly (zero columns do not change it). Rows of d
    // are rows of d in either layout: a packed batch has total H of them in Q.
    const int64_t e = fa::dtype_bytes(dtype), D = pl.d_buffers;
    const int64_t q_rows = packed.any() ? packed.total_q * p.H : p.B * p.H * p.N_q;
    const int64_t kv_rows = packed.any() ? packed.total_k * p.H_kv : p.B * p.H_kv * p.N_k;
    fa::DeviceBuffer<unsigned char> work(size_t((2 * q_rows + 2 * kv_rows) * D * e), fa::Mem::Extra, stream);
    unsigned char* Qp = work.get();
    unsigned char *Kp = Qp + q_rows * D * e, *Vp = Kp + kv_rows * D * e, *Op = Vp + kv_rows * D * e;
    fa::pad_columns(Q, Qp, q_rows, p.d, D, e, stream);
    fa::pad_columns(K, Kp, kv_rows, p.d, D, e, stream);
    fa::pad_columns(V, Vp, kv_rows, p.d, D, e, stream);
    fa::AttnProblem padded = p;
    padded.d = D;
    padded.scale = p.resolved_scale();
    tc_forward(padded, dtype, Qp, Kp, Vp, Op, LSE, pl, stream, cache, packed);  // (never paged: plan())
    fa::unpad_columns(Op, O, q_rows, D, p.d, e, stream);
    return;
  }
  if (pl.runs != "v1" && pl.runs != "cublas") {
    tc_forward(p, dtype, Q, K, V, O, LSE, pl, stream, cache, packed);
    return;
  }
  if (pl.runs == "cublas") {
    with_type(dtype, [&](auto tag) {
      using T = decltype(tag);
      cublas_forward<T>(p, dtype, static_cast<const T*>(Q), static_cast<const T*>(K),
                        static_cast<const T*>(V), static_cast<T*>(O), LSE, stream);
    });
    return;
  }
  // v1
  const v1::Layout L{int(pl.Br), int(pl.Bc), int(p.d)};
  const int64_t Tr = ceil_div(p.N_q, pl.Br);
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* kernel_fn = v1::forward_kernel<T>;
    set_smem(kernel_fn, pl.smem_bytes);
    kernel_fn<<<unsigned(pl.blocks), v1::kThreads, size_t(pl.smem_bytes), stream>>>(
        static_cast<const T*>(Q), static_cast<const T*>(K), static_cast<const T*>(V),
        static_cast<T*>(O), LSE, p, p.resolved_scale(), L, Tr);
    FA_CUDA_CHECK(cudaGetLastError());
  });
}
}  // namespace

void forward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
             const void* K, const void* V, void* O, float* LSE, const KvCache& cache,
             const Config& cfg, cudaStream_t stream) {
  forward_impl(kernel, p, dtype, Q, K, V, O, LSE, cache, Varlen{}, cfg, stream);
}

void forward_varlen(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
                    const void* K, const void* V, void* O, float* LSE, const Varlen& packed,
                    const Config& cfg, cudaStream_t stream) {
  if (!packed.any()) throw fa::InputError("--cu-seqlens-q", "the offsets of a packed batch", "none");
  forward_impl(kernel, p, dtype, Q, K, V, O, LSE, KvCache{}, packed, cfg, stream);
}

}  // namespace fa05
