// Stage 06's GPU runner (runner_bwd.hpp): launch arithmetic once, in backward_plan(), and the
// launches of each backward.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <string>

#include "check.hpp"
#include "device_buffer.hpp"
#include "kernels/bwd_v1_smem.cuh"
#include "kernels/bwd_v2_mma.cuh"
#include "kernels/bwd_v3_split.cuh"
#include "kernels/bwd_v4_wgmma.cuh"
#include "gpu.hpp"
#include "runner_bwd.hpp"

namespace fa06 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// gpu_v3 and gpu_v3_det, gpu_v4 and gpu_v4_det; the deterministic variants (dQ added in key-block order).
bool is_v3(const std::string& k) { return k.rfind("gpu_v3", 0) == 0; }
bool is_v4(const std::string& k) { return k.rfind("gpu_v4", 0) == 0; }
// gpu_v4 is compiled only into sm_90a code (wgmma).
#if FA06_HAVE_SM90A
constexpr bool kHaveSm90a = true;
#else
constexpr bool kHaveSm90a = false;
#endif
// Whether gpu_v4 runs on a GPU of compute capability sm (major * 10 + minor; 0: the current
// device's; none found: assumed able): sm_90 only, and only where the build has sm_90a code.
// Shared by the plan (its fallback) and the default, so that the two cannot disagree.
bool v4_runs_on(int sm) {
  if (sm == 0) sm = fa::gpu_compute_capability();
  return kHaveSm90a && (sm <= 0 || sm == 90);
}

bool is_det(const std::string& k) { return k.size() > 4 && k.compare(k.size() - 4, 4, "_det") == 0; }

// Shared memory above 48 KiB must be asked for, per kernel, and must fit this GPU (an A100 has
// 163 KiB per block: gpu_v1 at d > ~200 does not fit there).
template <class Kernel>
void set_smem(Kernel* kernel_fn, int64_t bytes) {
  int optin = 0;
  if (!fa::opt_in_smem(kernel_fn, bytes, &optin))
    throw fa::InputError("--head-dim", "blocks whose shared memory fits this GPU's " + std::to_string(optin) + " bytes",
                         std::to_string(bytes) + " bytes");
}

// Calls go(T{}) with T the storage type of dtype.
template <class Go>
void with_type(fa::DType dtype, Go&& go) {
  switch (dtype) {
    case fa::DType::fp32: return go(float{});
    case fa::DType::fp16: return go(__half{});
    case fa::DType::bf16: return go(__nv_bfloat16{});
  }
}

// Calls go(D, W, kM) as integral constants for a compiled gpu_v2 shape at head dim d; throws for
// any other (backward_plan() refuses those first: reaching the throw means the two disagree).
template <class Go>
void with_shape(int64_t d, const BwdShape& sh, Go&& go) {
  using std::integral_constant;
  const int64_t W = sh.Bc / sh.keys_per_warp, kM = sh.keys_per_warp / 16;
  if (d == 64) {
    if (W == 4 && kM == 1) return go(integral_constant<int, 64>{}, integral_constant<int, 4>{}, integral_constant<int, 1>{});
    if (W == 8 && kM == 1) return go(integral_constant<int, 64>{}, integral_constant<int, 8>{}, integral_constant<int, 1>{});
    if (W == 4 && kM == 2) return go(integral_constant<int, 64>{}, integral_constant<int, 4>{}, integral_constant<int, 2>{});
  } else {
    if (W == 4 && kM == 1) return go(integral_constant<int, 128>{}, integral_constant<int, 4>{}, integral_constant<int, 1>{});
    if (W == 8 && kM == 1) return go(integral_constant<int, 128>{}, integral_constant<int, 8>{}, integral_constant<int, 1>{});
  }
  throw fa::InputError("shape (fa06::BwdShape)", "a compiled gpu_v2 shape",
                       "Bc " + std::to_string(sh.Bc) + ", " + std::to_string(sh.keys_per_warp) + " keys per warp at d = " +
                           std::to_string(d) + " (backward_plan() and with_shape() disagree)");
}

}  // namespace

const std::vector<std::string>& backward_kernels() {
  static const std::vector<std::string> k = {"gpu_v1", "gpu_v2", "gpu_v2_det", "gpu_v3", "gpu_v3_det", "gpu_v4", "gpu_v4_det"};
  return k;
}

std::string default_backward_kernel(int64_t d, fa::DType dtype, int64_t smem_limit, int sm) {
  if (dtype == fa::DType::fp32) return "gpu_v1";
  if (d != 128) return "gpu_v2";
  if (v4_runs_on(sm) && bwd_v4::smem_bytes<128>() <= smem_limit) return "gpu_v4";
  return bwd_v3::smem_bytes<128>() <= smem_limit ? "gpu_v3" : "gpu_v2";
}

std::vector<BwdShape> bwd_shapes(int64_t d) {
  if (d == 64) return {{64, 16}, {128, 16}, {128, 32}};
  if (d == 128) return {{64, 16}, {128, 16}};
  return {};
}

BwdShape default_bwd_shape(int64_t d) { return d == 64 ? BwdShape{128, 32} : BwdShape{128, 16}; }

BwdPlan backward_plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, BwdShape shape, int sm) {
  const auto& ks = backward_kernels();
  if (std::find(ks.begin(), ks.end(), kernel) == ks.end())
    throw fa::InputError("--bwd-kernel", "gpu_v1, gpu_v2, gpu_v3, gpu_v4 or a _det variant of the last three", "'" + kernel + "'");
  fa::validate(p);
  if (p.d > 256) throw fa::InputError("--head-dim", "at most 256 for the GPU backward", std::to_string(p.d));
  const bool asked = shape.Bc != 0 || shape.keys_per_warp != 0;
  const bool det = is_det(kernel);
  if (asked && kernel != "gpu_v2" && kernel != "gpu_v2_det")
    throw fa::InputError("shape (fa06::BwdShape)", "no block choice for " + kernel, std::to_string(shape.Bc));
  BwdPlan pl;
  pl.runs = kernel;
  if (kernel != "gpu_v1" && (dtype == fa::DType::fp32 || bwd_shapes(p.d).empty())) {
    pl.runs = "gpu_v1";
    pl.note = kernel + " runs fp16/bf16 at d = 64 and 128; gpu_v1 runs this one";
  } else if (is_v4(kernel)) {
    if (sm == 0) sm = fa::gpu_compute_capability();
    const std::string suffix = det ? "_det" : "";
    if (p.d != 128) {
      pl.runs = "gpu_v2" + suffix;
      pl.note = kernel + " runs d = 128 only (at d = 64 gpu_v2's 32 keys a warp is the faster design): ran " + pl.runs;
    } else if (!v4_runs_on(sm)) {
      pl.runs = "gpu_v3" + suffix;
      pl.note = !kHaveSm90a ? kernel + " needs a build for sm_90a (wgmma); this one has none: ran " + pl.runs
                       : kernel + " runs on sm_90 only (wgmma); ran " + pl.runs + " on this sm_" + std::to_string(sm) + " GPU";
    }
  }
  const bool v3 = is_v3(pl.runs), v4 = is_v4(pl.runs);
  const int64_t blocks_d = ceil_div(p.lse_elems(), 8);  // row_dots_kernel: 8 rows per block
  if (pl.runs == "gpu_v1") {
    const int64_t B = p.d <= 64 ? 64 : 32;
    pl.Br = std::min(B, p.N_q);
    pl.Bc = std::min(B, p.N_k);
    pl.threads = bwd_v1::kThreads;
    pl.blocks_dkdv = p.B * p.H_kv * ceil_div(p.N_k, pl.Bc);
    pl.blocks_dq = p.B * p.H * ceil_div(p.N_q, pl.Br);
    const bwd_v1::Layout L{int(pl.Br), int(pl.Bc), int(p.d)};
    pl.smem_dkdv = 4 * int64_t(L.pass1_floats());
    pl.smem_dq = 4 * int64_t(L.pass2_floats());
    pl.workspace_bytes = 4 * p.lse_elems();
  } else if (v4) {
    pl.Bc = bwd_v4::Bc;
    pl.keys_per_warp = 16;
    pl.Br = bwd_v2::Br;
    pl.threads = bwd_v4::kThreads;
    pl.blocks_dkdv = p.B * p.H_kv * ceil_div(p.N_k, pl.Bc);
    pl.smem_dkdv = bwd_v4::smem_bytes<128>();
  } else if (v3) {
    pl.Bc = bwd_v3::Bc;
    pl.keys_per_warp = 32;
    pl.Br = bwd_v2::Br;
    pl.threads = bwd_v3::kThreads;
    pl.blocks_dkdv = p.B * p.H_kv * ceil_div(p.N_k, pl.Bc);
    pl.smem_dkdv = p.d == 64 ? bwd_v3::smem_bytes<64>() : bwd_v3::smem_bytes<128>();
  } else {
    BwdShape sh = default_bwd_shape(p.d);
    if (asked) {
      const std::vector<BwdShape> ok = bwd_shapes(p.d);
      if (std::none_of(ok.begin(), ok.end(),
                       [&](const BwdShape& s) { return s.Bc == shape.Bc && s.keys_per_warp == shape.keys_per_warp; })) {
        std::string list;
        for (const BwdShape& s : ok) list += (list.empty() ? "" : ", ") + std::to_string(s.Bc) + "/" + std::to_string(s.keys_per_warp);
        throw fa::InputError("shape (fa06::BwdShape)", "a compiled gpu_v2 shape at d = " + std::to_string(p.d) + " (Bc/keys per warp: " + list + ")",
                             std::to_string(shape.Bc) + "/" + std::to_string(shape.keys_per_warp));
      }
      sh = shape;
    }
    pl.Bc = sh.Bc;
    pl.keys_per_warp = sh.keys_per_warp;
    pl.Br = bwd_v2::Br;
    pl.threads = 32 * sh.Bc / sh.keys_per_warp;
    pl.blocks_dkdv = p.B * p.H_kv * ceil_div(p.N_k, pl.Bc);
    pl.smem_dkdv = p.d == 64 ? (sh.Bc == 64 ? bwd_v2::smem_bytes<64, 64>() : bwd_v2::smem_bytes<64, 128>())
                             : (sh.Bc == 64 ? bwd_v2::smem_bytes<128, 64>() : bwd_v2::smem_bytes<128, 128>());
  }
  if (pl.runs != "gpu_v1")  // D, dQ's float32 accumulator, the deterministic variants' turns
    pl.workspace_bytes = 4 * p.lse_elems() + 4 * p.q_elems() + (det ? 4 * (p.B * p.H * ceil_div(p.N_q, bwd_v2::Br) + 1) : 0);
  if (std::max({pl.blocks_dkdv, pl.blocks_dq, blocks_d}) > INT_MAX)
    throw fa::InputError("--batch/--heads/--seq-q", "at most 2^31 - 1 thread blocks",
                         std::to_string(std::max({pl.blocks_dkdv, pl.blocks_dq, blocks_d})));
  return pl;
}

namespace {

template <class T>
void run_v1(const BwdPlan& pl, const fa::AttnProblem& p, const T* q, const T* k, const T* v, const T* g,
            const float* LSE, const float* D, T* dQ, T* dK, T* dV, cudaStream_t stream) {
  const float scale = p.resolved_scale();
  const bwd_v1::Layout L{int(pl.Br), int(pl.Bc), int(p.d)};
  // Pass 1: dK, dV.
  set_smem(bwd_v1::dk_dv_kernel<T>, pl.smem_dkdv);
  bwd_v1::dk_dv_kernel<T><<<unsigned(pl.blocks_dkdv), unsigned(pl.threads), size_t(pl.smem_dkdv), stream>>>(
      q, k, v, g, LSE, D, dK, dV, p, scale, L, ceil_div(p.N_k, pl.Bc));
  FA_CUDA_CHECK(cudaGetLastError());
  // Pass 2: dQ.
  set_smem(bwd_v1::dq_kernel<T>, pl.smem_dq);
  bwd_v1::dq_kernel<T><<<unsigned(pl.blocks_dq), unsigned(pl.threads), size_t(pl.smem_dq), stream>>>(
      q, k, v, g, LSE, D, dQ, p, scale, L, ceil_div(p.N_q, pl.Br));
  FA_CUDA_CHECK(cudaGetLastError());
}

// gpu_v2, gpu_v3 and gpu_v4 (and their deterministic variants): the main kernel, then dQ's conversion.
template <class T>
void run_tensor_cores(const BwdPlan& pl, bool det, const fa::AttnProblem& p, const T* q, const T* k,
                      const T* v, const T* g, const float* LSE, const float* D, T* dQ, T* dK, T* dV,
                      cudaStream_t stream) {
  // dQ's float32 accumulator (and the turns of the deterministic variants) start at zero.
  fa::DeviceBuffer<float> dQacc(p.q_elems(), fa::Mem::Extra, stream);
  FA_CUDA_CHECK(cudaMemsetAsync(dQacc.get(), 0, size_t(dQacc.bytes()), stream));
  // The turns: one per (b, h, query block), then the counter that numbers the blocks as they start.
  fa::DeviceBuffer<int> turn(det ? p.B * p.H * ceil_div(p.N_q, bwd_v2::Br) + 1 : 0, fa::Mem::Extra, stream);
  if (det) FA_CUDA_CHECK(cudaMemsetAsync(turn.get(), 0, size_t(turn.bytes()), stream));
  auto launch = [&](auto* kernel_fn) {
    set_smem(kernel_fn, pl.smem_dkdv);
    kernel_fn<<<unsigned(pl.blocks_dkdv), unsigned(pl.threads), size_t(pl.smem_dkdv), stream>>>(
        q, k, v, g, LSE, D, dK, dV, dQacc.get(), turn.get(), p, p.resolved_scale(), ceil_div(p.N_k, pl.Bc));
    FA_CUDA_CHECK(cudaGetLastError());
  };
  if (is_v4(pl.runs)) {
    det ? launch(bwd_v4::dk_dv_dq_kernel<T, 128, true>) : launch(bwd_v4::dk_dv_dq_kernel<T, 128, false>);
  } else if (is_v3(pl.runs)) {
    if (p.d == 64) det ? launch(bwd_v3::dk_dv_dq_kernel<T, 64, true>) : launch(bwd_v3::dk_dv_dq_kernel<T, 64, false>);
    else det ? launch(bwd_v3::dk_dv_dq_kernel<T, 128, true>) : launch(bwd_v3::dk_dv_dq_kernel<T, 128, false>);
  } else {
    with_shape(p.d, {pl.Bc, pl.keys_per_warp}, [&](auto dh, auto w, auto km) {
      constexpr int Dh = decltype(dh)::value, W = decltype(w)::value, kM = decltype(km)::value;
      det ? launch(bwd_v2::dk_dv_dq_kernel<T, Dh, W, kM, true>) : launch(bwd_v2::dk_dv_dq_kernel<T, Dh, W, kM, false>);
    });
  }
  // dQ = scale dQacc in T.
  bwd_v2::dq_convert_kernel<T><<<unsigned(std::min<int64_t>(ceil_div(p.q_elems(), 256), 4096)), 256, 0, stream>>>(
      dQacc.get(), dQ, p.q_elems(), p.resolved_scale());
  FA_CUDA_CHECK(cudaGetLastError());
  // dQacc and the turns go back to the stream-ordered pool after the kernels that use them.
}

}  // namespace

void backward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
              const void* K, const void* V, const void* O, const void* dO, const float* LSE, void* dQ,
              void* dK, void* dV, cudaStream_t stream, BwdShape shape) {
  const BwdPlan pl = backward_plan(kernel, p, dtype, shape);
  with_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    const auto* q = static_cast<const T*>(Q);
    const auto* k = static_cast<const T*>(K);
    const auto* v = static_cast<const T*>(V);
    const auto* g = static_cast<const T*>(dO);
    // D = rowsum(dO * O) (FA2 Alg. 2 line 4): one warp per row, 8 rows per thread block of 256.
    fa::DeviceBuffer<float> D(p.lse_elems(), fa::Mem::Extra, stream);
    bwd_v1::row_dots_kernel<T><<<unsigned(ceil_div(p.lse_elems(), 8)), 256, 0, stream>>>(
        static_cast<const T*>(O), g, D.get(), p.lse_elems(), int(p.d));
    FA_CUDA_CHECK(cudaGetLastError());
    if (pl.runs == "gpu_v1") {
      run_v1<T>(pl, p, q, k, v, g, LSE, D.get(), static_cast<T*>(dQ), static_cast<T*>(dK), static_cast<T*>(dV), stream);
    } else if constexpr (!std::is_same_v<T, float>) {
      run_tensor_cores<T>(pl, is_det(pl.runs), p, q, k, v, g, LSE, D.get(), static_cast<T*>(dQ),
                          static_cast<T*>(dK), static_cast<T*>(dV), stream);
    }
  });
}

}  // namespace fa06
