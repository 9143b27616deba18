// Stage 06's GPU runner (runner_bwd.hpp): launch arithmetic once, in backward_plan(), and the
// launches of each backward.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "check.hpp"
#include "device_buffer.hpp"
#include "kernels/bwd_v1_smem.cuh"
#include "kernels/bwd_v2_mma.cuh"
#include "kernels/bwd_v3_split.cuh"
#include "kernels/bwd_v4_wgmma.cuh"
#include "kernels/bwd_v4_wide.cuh"
#include "gpu.hpp"
#include "pad_columns.hpp"
#include "runner_bwd.hpp"
#include "tensor_map.hpp"

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

// The native widths gpu_v4 is compiled for: 96 and 128 (bwd_v4_wgmma.cuh), 192 and 256
// (bwd_v4_wide.cuh, the warpgroups sharing 64 keys and splitting the head dims).
bool v4_width(int64_t D) { return D == 96 || D == 128 || D == 192 || D == 256; }
bool v4_wide(int64_t D) { return D > 128; }
int64_t v4_smem(int64_t D) {
  return D == 192 ? bwd_v4_wide::smem_bytes<192>()
         : D == 256 ? bwd_v4_wide::smem_bytes<256>()
         : D == 96  ? bwd_v4::smem_bytes<96>()
                    : bwd_v4::smem_bytes<128>();
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

// Calls go(integral_constant<int, D>) for a native width D (native_widths()).
template <class Go>
void with_width(int64_t D, Go&& go) {
  using std::integral_constant;
  switch (D) {
    case 32: return go(integral_constant<int, 32>{});
    case 64: return go(integral_constant<int, 64>{});
    case 96: return go(integral_constant<int, 96>{});
    case 128: return go(integral_constant<int, 128>{});
    case 192: return go(integral_constant<int, 192>{});
    case 256: return go(integral_constant<int, 256>{});
  }
  throw fa::InputError("--head-dim", "a native width (backward_plan() and with_width() disagree)", std::to_string(D));
}

// Calls go(W, kM) as integral constants for a compiled gpu_v2 shape at native width D (W warps of
// kM mma row tiles of keys: the shapes of bwd_shapes); throws for any other (backward_plan()
// refuses those first: reaching the throw means the two disagree).
template <int D, class Go>
void with_shape(const BwdShape& sh, Go&& go) {
  using std::integral_constant;
  const int64_t W = sh.Bc / sh.keys_per_warp, kM = sh.keys_per_warp / 16;
  if constexpr (D <= 128) {
    if (W == 4 && kM == 1) return go(integral_constant<int, 4>{}, integral_constant<int, 1>{});
    if (W == 8 && kM == 1) return go(integral_constant<int, 8>{}, integral_constant<int, 1>{});
    if constexpr (D <= 64)
      if (W == 4 && kM == 2) return go(integral_constant<int, 4>{}, integral_constant<int, 2>{});
  }
  throw fa::InputError("shape (fa06::BwdShape)", "a compiled gpu_v2 shape",
                       "Bc " + std::to_string(sh.Bc) + ", " + std::to_string(sh.keys_per_warp) + " keys per warp at d = " +
                           std::to_string(D) + " (backward_plan() and with_shape() disagree)");
}

// gpu_v2's shared memory at native width D for a shape of bwd_shapes (64 or 128 keys a block).
int64_t v2_smem(int64_t D, int64_t Bc) {
  int64_t bytes = 0;
  with_width(D, [&](auto dh) {
    constexpr int Dh = decltype(dh)::value;
    bytes = Bc == 64 ? bwd_v2::smem_bytes<Dh, 64>() : bwd_v2::smem_bytes<Dh, 128>();
  });
  return bytes;
}
// gpu_v3's shape at native width D: keys a block, shared memory with one or two stages.
int64_t v3_bc(int64_t D) {
  int64_t bc = 0;
  with_width(D, [&](auto dh) { bc = bwd_v3::Shape<decltype(dh)::value>::Bc; });
  return bc;
}
int64_t v3_smem(int64_t D, int64_t stages) {
  int64_t bytes = 0;
  with_width(D, [&](auto dh) {
    constexpr int Dh = decltype(dh)::value;
    bytes = stages == 1 ? bwd_v3::smem_bytes<Dh, 1>() : bwd_v3::smem_bytes<Dh, 2>();
  });
  return bytes;
}
// gpu_v3's stages at native width D under a shared-memory limit: two where they fit; else one,
// compiled for D >= 128 only (below, two fit 163 KiB: 141 KiB at D = 96).
int64_t v3_stages(int64_t D, int64_t smem_limit) { return D >= 128 && v3_smem(D, 2) > smem_limit ? 1 : 2; }

std::string kib(int64_t bytes) { return std::to_string((bytes + 1023) / 1024) + " KiB"; }

// auto's choice (default_backward_kernel) and why, for the plan's note.
std::pair<std::string, std::string> choose(int64_t d, fa::DType dtype, int64_t smem_limit, int sm) {
  if (dtype == fa::DType::fp32) return {"gpu_v1", "gpu_v1, the only float32 backward"};
  const int64_t D = native_width(d);
  const std::string at = " at d = " + std::to_string(D);
  if (D == 32) return {"gpu_v2", "gpu_v2, 32 keys a warp: a guess" + at + " (never measured), d = 64's winner"};
  if (D == 64) return {"gpu_v2", "gpu_v2, 32 keys a warp, the fastest measured" + at + " (H200, bench_06_backward_gpu)"};
  if (D == 96 && v4_runs_on(sm) && v4_smem(96) <= smem_limit)
    return {"gpu_v4", "gpu_v4, d = 128's kernel with the dims cut at the slabs, the fastest measured" + at +
                          " (H200, compare_torch: 1.15-1.25x gpu_v3)"};
  if (D == 96) return {"gpu_v3", "gpu_v3: a guess" + at + " (never measured), as at d = 128 where it beat gpu_v2"};
  if (D == 128) {
    if (v4_runs_on(sm) && bwd_v4::smem_bytes<128>() <= smem_limit)
      return {"gpu_v4", "gpu_v4, the fastest measured" + at + " (H200, bench_06_backward_gpu)"};
    if (v3_smem(128, 2) <= smem_limit)
      return {"gpu_v3", "gpu_v3, the fastest measured" + at + " without gpu_v4 (it needs sm_90 and sm_90a code)"};
    return {"gpu_v2", "gpu_v2: gpu_v3's " + kib(v3_smem(128, 2)) + " of shared memory do not fit this GPU's " +
                          kib(smem_limit) + " (a guess: gpu_v3 with one stage was never measured)"};
  }
  if (v4_runs_on(sm) && v4_smem(D) <= smem_limit)
    return {"gpu_v4", "gpu_v4, two warpgroups sharing 64 keys, each half the head dims, the fastest measured" + at +
                          " (H200, compare_torch: 1.14-1.25x gpu_v3)"};
  return {"gpu_v3", "gpu_v3, 64 keys a block" + at + " (gpu_v4 needs sm_90 and sm_90a code)"};
}

}  // namespace

const std::vector<std::string>& backward_kernels() {
  static const std::vector<std::string> k = {"gpu_v1", "gpu_v2", "gpu_v2_det", "gpu_v3", "gpu_v3_det", "gpu_v4", "gpu_v4_det"};
  return k;
}

const std::vector<int64_t>& native_widths() {
  static const std::vector<int64_t> w = {32, 64, 96, 128, 192, 256};
  return w;
}

int64_t native_width(int64_t d) {
  for (int64_t D : native_widths())
    if (d <= D) return D;
  throw fa::InputError("--head-dim", "at most 256 for the GPU backward", std::to_string(d));
}

int64_t smem_optin_bytes(int sm) {
  if (sm <= 0) {
    const long long here = fa::gpu_smem_optin_bytes();
    return here > 0 ? here : 227 * 1024;
  }
  if (sm == 90 || sm == 100 || sm == 103) return 227 * 1024;
  if (sm == 80 || sm == 87) return 163 * 1024;
  return 99 * 1024;
}

std::string default_backward_kernel(int64_t d, fa::DType dtype, int64_t smem_limit, int sm) {
  return choose(d, dtype, smem_limit > 0 ? smem_limit : smem_optin_bytes(sm), sm).first;
}

std::vector<BwdShape> bwd_shapes(int64_t d) {
  if (d < 1 || d > 128) return {};
  if (native_width(d) <= 64) return {{64, 16}, {128, 16}, {128, 32}};
  return {{64, 16}, {128, 16}};
}

BwdShape default_bwd_shape(int64_t d) { return d <= 64 ? BwdShape{128, 32} : BwdShape{128, 16}; }

BwdPlan backward_plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, BwdShape shape, int sm) {
  return backward_plan(kernel, p, dtype, shape, sm, fa::VarlenDevice{});
}

BwdPlan backward_plan(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, BwdShape shape, int sm,
                      const fa::VarlenDevice& packed) {
  const auto& ks = backward_kernels();
  if (kernel != "auto" && std::find(ks.begin(), ks.end(), kernel) == ks.end())
    throw fa::InputError("--bwd-kernel", "auto, gpu_v1, gpu_v2, gpu_v3, gpu_v4 or a _det variant of the last three",
                         "'" + kernel + "'");
  // The window and the softcap (issue 34, docs/math.md section 8) are every kernel's: validate()
  // refuses their bad values (--window, --softcap), and nothing else here depends on them. A
  // packed batch is checked as its longest sequence (not the padded B N_max^2: stage 05's plan()
  // says why), its tokens and grid below.
  fa::AttnProblem one = p;
  if (packed.any()) one.B = 1, one.lse_head_stride = 0;
  fa::validate(one);
  if (p.d > 256) throw fa::InputError("--head-dim", "at most 256 for the GPU backward", std::to_string(p.d));
  const bool asked = shape.Bc != 0 || shape.keys_per_warp != 0;
  const bool det = is_det(kernel);
  const std::string suffix = det ? "_det" : "";
  const int64_t D = native_width(p.d);
  const int64_t smem_limit = kernel != "gpu_v1" ? smem_optin_bytes(sm) : 0;  // sm 0: the device's own
  std::vector<std::string> why;  // the note's parts
  BwdPlan pl;
  pl.runs = kernel;
  if (kernel == "auto" && packed.any() && dtype != fa::DType::fp32) {
    pl.runs = "gpu_v3";
    why.push_back("auto: gpu_v3, the backward that reads a packed batch");
  } else if (kernel == "auto") {
    const auto [k, reason] = choose(p.d, dtype, smem_limit, sm);
    pl.runs = k;
    why.push_back("auto: " + reason);
  } else if (kernel != "gpu_v1" && dtype == fa::DType::fp32) {
    pl.runs = "gpu_v1";
    why.push_back(kernel + " runs fp16/bf16; gpu_v1 runs float32");
  } else if (is_v4(kernel)) {
    if (!v4_width(D)) {
      // At the other widths auto's choice between gpu_v2 and gpu_v3 (d = 64: gpu_v2's 32 keys a
      // warp, the faster design there).
      pl.runs = choose(p.d, dtype, smem_limit, sm).first + suffix;
      why.push_back(kernel + " runs d = 96, 128, 192 and 256 only: ran " + pl.runs + ", auto's choice at d = " + std::to_string(D));
    } else if (!v4_runs_on(sm)) {
      if (sm == 0) sm = fa::gpu_compute_capability();
      pl.runs = "gpu_v3" + suffix;
      why.push_back(!kHaveSm90a ? kernel + " needs a build for sm_90a (wgmma); this one has none: ran " + pl.runs
                                : kernel + " runs on sm_90 only (wgmma); ran " + pl.runs + " on this sm_" + std::to_string(sm) +
                                      " GPU");
    }
  } else if (!is_v3(kernel) && kernel != "gpu_v1" && D > 128) {
    pl.runs = "gpu_v3" + suffix;
    why.push_back(kernel + " runs d <= 128 (at d = " + std::to_string(D) +
                  " dK_j and dV_j of 16 keys would take " + std::to_string(D) +
                  " registers a lane: ptxas spills): ran " + pl.runs + ", the head dims split among its warps");
  }
  if (asked && pl.runs != "gpu_v2" && pl.runs != "gpu_v2_det")
    throw fa::InputError("shape (fa06::BwdShape)", "no block choice for " + pl.runs + (pl.runs != kernel ? " (" + kernel + " runs it here)" : ""),
                         std::to_string(shape.Bc));
  if (packed.any()) {  // a packed batch (issue 34): gpu_v3 reads one; nothing else may ignore it
    if (pl.runs != "gpu_v3")
      throw fa::InputError("--cu-seqlens-q", "--bwd-kernel gpu_v3 or auto with --dtype fp16/bf16 (gpu_v3 alone reads a packed batch)",
                           "--bwd-kernel " + kernel + (pl.runs != kernel ? ", which runs " + pl.runs + " here" : ""));
    if (packed.cu_k == nullptr || packed.total_q < p.N_q || packed.total_k < p.N_k)
      throw fa::InputError("--cu-seqlens-q/-k", "both offsets arrays, the longest sequence no longer than the batch's tokens",
                           "N_q " + std::to_string(p.N_q) + " of " + std::to_string(packed.total_q) + ", N_k " +
                               std::to_string(p.N_k) + " of " + std::to_string(packed.total_k));
    if (std::max(packed.total_q, packed.total_k) > INT_MAX)
      throw fa::InputError("--cu-seqlens-q/-k", "at most 2^31 - 1 tokens (the kernel's offsets are 32-bit)",
                           std::to_string(std::max(packed.total_q, packed.total_k)));
  }
  const bool v1 = pl.runs == "gpu_v1", v3 = is_v3(pl.runs), v4 = is_v4(pl.runs);
  pl.d_kernel = v1 ? p.d : D;
  // Rows of Q (and of LSE, D) and of K: the padded problem's, or a packed batch's tokens times heads.
  const int64_t q_rows = packed.any() ? packed.total_q * p.H : p.lse_elems();
  const int64_t kv_rows = packed.any() ? packed.total_k * p.H_kv : p.B * p.H_kv * p.N_k;
  const int64_t blocks_d = ceil_div(q_rows, 8);  // row_dots_kernel: 8 rows per block
  if (v1) {
    const int64_t B = p.d <= 64 ? 64 : 32;
    pl.Br = std::min(B, p.N_q);
    pl.Bc = std::min(B, p.N_k);
    pl.threads = bwd_v1::kThreads;
    pl.blocks_dkdv = p.B * p.H_kv * ceil_div(p.N_k, pl.Bc);
    pl.blocks_dq = p.B * p.H * ceil_div(p.N_q, pl.Br);
    const bwd_v1::Layout L{int(pl.Br), int(pl.Bc), int(p.d)};
    pl.smem_dkdv = 4 * int64_t(L.pass1_floats());
    pl.smem_dq = 4 * int64_t(L.pass2_floats());
    pl.workspace_bytes = 4 * q_rows;
  } else if (v4) {
    pl.Bc = v4_wide(D) ? bwd_v4_wide::Bc : bwd_v4::Bc;
    pl.keys_per_warp = 16;
    pl.Br = bwd_v2::Br;
    pl.stages = 2;
    pl.threads = v4_wide(D) ? bwd_v4_wide::kThreads : bwd_v4::kThreads;
    pl.blocks_dkdv = p.B * p.H_kv * ceil_div(p.N_k, pl.Bc);
    pl.smem_dkdv = v4_smem(D);
  } else if (v3) {
    pl.Bc = v3_bc(D);
    pl.keys_per_warp = 32;
    pl.Br = bwd_v2::Br;
    pl.stages = v3_stages(D, smem_limit);
    pl.threads = bwd_v3::kThreads;
    pl.blocks_dkdv = p.B * p.H_kv * ceil_div(p.N_k, pl.Bc);
    pl.smem_dkdv = v3_smem(D, pl.stages);
    if (pl.stages == 1)
      why.push_back("one stage: two (" + kib(v3_smem(D, 2)) + " of shared memory) do not fit this GPU's " + kib(smem_limit));
  } else {
    BwdShape sh = default_bwd_shape(D);
    if (asked) {
      const std::vector<BwdShape> ok = bwd_shapes(D);
      if (std::none_of(ok.begin(), ok.end(),
                       [&](const BwdShape& s) { return s.Bc == shape.Bc && s.keys_per_warp == shape.keys_per_warp; })) {
        std::string list;
        for (const BwdShape& s : ok) list += (list.empty() ? "" : ", ") + std::to_string(s.Bc) + "/" + std::to_string(s.keys_per_warp);
        throw fa::InputError("shape (fa06::BwdShape)", "a compiled gpu_v2 shape at d = " + std::to_string(D) + " (Bc/keys per warp: " + list + ")",
                             std::to_string(shape.Bc) + "/" + std::to_string(shape.keys_per_warp));
      }
      sh = shape;
    }
    pl.Bc = sh.Bc;
    pl.keys_per_warp = sh.keys_per_warp;
    pl.Br = bwd_v2::Br;
    pl.stages = 2;
    pl.threads = 32 * sh.Bc / sh.keys_per_warp;
    pl.blocks_dkdv = p.B * p.H_kv * ceil_div(p.N_k, pl.Bc);
    pl.smem_dkdv = v2_smem(D, sh.Bc);
  }
  if (!v1) {  // D, dQ's float32 accumulator (at d_kernel), the deterministic variants' turns
    pl.workspace_bytes = 4 * q_rows + 4 * q_rows * D + (det ? 4 * (p.B * p.H * ceil_div(p.N_q, bwd_v2::Br) + 1) : 0);
    if (D > p.d) {
      fa::AttnProblem pp = one;  // the padded problem (a packed batch's longest sequence): its element counts must be valid too
      pp.d = D;
      fa::validate(pp);
      pl.pad_bytes = fa::dtype_bytes(dtype) * (2 * q_rows + 4 * kv_rows) * D;
      pl.workspace_bytes += pl.pad_bytes;
      why.push_back("d = " + std::to_string(p.d) + " runs at the native width " + std::to_string(D) + ": Q, K, V, dO copied with " +
                    std::to_string(D - p.d) + " zero columns, dK, dV copied back without them, dQ converted without them (+" +
                    std::to_string(pl.pad_bytes) + " bytes of workspace)");
    }
  }
  for (const std::string& w : why) pl.note += (pl.note.empty() ? "" : "; ") + w;
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

// gpu_v2, gpu_v3 and gpu_v4 (and their deterministic variants): the main kernel, then dQ's
// conversion. p: the problem the kernel runs (the padded one: p.d = pl.d_kernel), d_out: dQ's row
// length (the real d; p.d when nothing is padded).
template <class T>
void run_tensor_cores(const BwdPlan& pl, bool det, const fa::AttnProblem& p, int64_t d_out, const T* q, const T* k,
                      const T* v, const T* g, const float* LSE, const float* D, T* dQ, T* dK, T* dV,
                      cudaStream_t stream, const fa::VarlenDevice& packed) {
  // Rows of Q: the problem's, or a packed batch's tokens times heads (dQacc then token-major too).
  const int64_t rows = packed.any() ? packed.total_q * p.H : p.lse_elems();
  // dQ's float32 accumulator (and the turns of the deterministic variants) start at zero.
  fa::DeviceBuffer<float> dQacc(rows * p.d, fa::Mem::Extra, stream);
  FA_CUDA_CHECK(cudaMemsetAsync(dQacc.get(), 0, size_t(dQacc.bytes()), stream));
  // The turns: one per (b, h, query block), then the counter that numbers the blocks as they start.
  fa::DeviceBuffer<int> turn(det ? p.B * p.H * ceil_div(p.N_q, bwd_v2::Br) + 1 : 0, fa::Mem::Extra, stream);
  if (det) FA_CUDA_CHECK(cudaMemsetAsync(turn.get(), 0, size_t(turn.bytes()), stream));
  // gpu_v3 also takes the packed batch's offsets (extra: a fa05::Packed), gpu_v4 at d > 128 two
  // tensor maps.
  auto launch = [&](auto* kernel_fn, auto... extra) {
    set_smem(kernel_fn, pl.smem_dkdv);
    kernel_fn<<<unsigned(pl.blocks_dkdv), unsigned(pl.threads), size_t(pl.smem_dkdv), stream>>>(
        q, k, v, g, LSE, D, dK, dV, dQacc.get(), turn.get(), p, p.resolved_scale(), ceil_div(p.N_k, pl.Bc), extra...);
    FA_CUDA_CHECK(cudaGetLastError());
  };
  const fa05::Packed pk{packed.cu_q, packed.cu_k, int(packed.total_q), int(packed.total_k)};
  with_width(p.d, [&](auto dh) {
    constexpr int Dh = decltype(dh)::value;
    if (is_v4(pl.runs)) {
      if constexpr (Dh == 96 || Dh == 128)
        return det ? launch(bwd_v4::dk_dv_dq_kernel<T, Dh, true>) : launch(bwd_v4::dk_dv_dq_kernel<T, Dh, false>);
      if constexpr (Dh == 192 || Dh == 256) {
        // Q and dO as (B H, N_q, d) for the copy engine, boxes of 64 columns x Br rows.
        const fa::DType dt = std::is_same_v<T, __nv_bfloat16> ? fa::DType::bf16 : fa::DType::fp16;
        const CUtensorMap tm_q = fa::tensor_map_3d(q, dt, p.d, p.N_q, p.B * p.H, int(bwd_v2::Br));
        const CUtensorMap tm_do = fa::tensor_map_3d(g, dt, p.d, p.N_q, p.B * p.H, int(bwd_v2::Br));
        return det ? launch(bwd_v4_wide::dk_dv_dq_kernel<T, Dh, true>, tm_q, tm_do)
                   : launch(bwd_v4_wide::dk_dv_dq_kernel<T, Dh, false>, tm_q, tm_do);
      }
    } else if (is_v3(pl.runs)) {
      // A packed batch: the kernel compiled for one (never deterministic: backward_plan()).
      if constexpr (Dh >= 128)  // one stage: compiled where two may not fit (an A100's 163 KiB)
        if (pl.stages == 1)
          return packed.any() ? launch(bwd_v3::dk_dv_dq_kernel<T, Dh, false, 1, true>, pk)
                 : det        ? launch(bwd_v3::dk_dv_dq_kernel<T, Dh, true, 1>, pk)
                              : launch(bwd_v3::dk_dv_dq_kernel<T, Dh, false, 1>, pk);
      return packed.any() ? launch(bwd_v3::dk_dv_dq_kernel<T, Dh, false, 2, true>, pk)
             : det        ? launch(bwd_v3::dk_dv_dq_kernel<T, Dh, true, 2>, pk)
                          : launch(bwd_v3::dk_dv_dq_kernel<T, Dh, false, 2>, pk);
    } else {
      return with_shape<Dh>({pl.Bc, pl.keys_per_warp}, [&](auto w, auto km) {
        constexpr int W = decltype(w)::value, kM = decltype(km)::value;
        det ? launch(bwd_v2::dk_dv_dq_kernel<T, Dh, W, kM, true>) : launch(bwd_v2::dk_dv_dq_kernel<T, Dh, W, kM, false>);
      });
    }
    throw fa::InputError("--bwd-kernel", "a kernel compiled at d = " + std::to_string(Dh) +
                                             " (backward_plan() and run_tensor_cores() disagree)", pl.runs);
  });
  // dQ = scale dQacc in T, without the padded columns.
  bwd_v2::dq_convert_kernel<T><<<unsigned(std::min<int64_t>(ceil_div(rows * d_out, 256), 4096)), 256, 0, stream>>>(
      dQacc.get(), dQ, rows, int(d_out), int(p.d), p.resolved_scale());
  FA_CUDA_CHECK(cudaGetLastError());
  // dQacc and the turns go back to the stream-ordered pool after the kernels that use them.
}

}  // namespace

namespace {
// backward() and backward_varlen(): D, then the plan's kernels (on padded copies where d needs them).
void backward_impl(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
                   const void* K, const void* V, const void* O, const void* dO, const float* LSE, void* dQ,
                   void* dK, void* dV, cudaStream_t stream, BwdShape shape, int sm, const fa::VarlenDevice& packed) {
  const BwdPlan pl = backward_plan(kernel, p, dtype, shape, sm, packed);
  // Rows of Q (and LSE, D) and of K: a packed batch's tokens times heads, token-major.
  const int64_t q_rows = packed.any() ? packed.total_q * p.H : p.lse_elems();
  const int64_t kv_rows = packed.any() ? packed.total_k * p.H_kv : p.B * p.H_kv * p.N_k;
  with_type(dtype, [&](auto zero) {
    using T = decltype(zero);
    const auto* q = static_cast<const T*>(Q);
    const auto* k = static_cast<const T*>(K);
    const auto* v = static_cast<const T*>(V);
    const auto* g = static_cast<const T*>(dO);
    // D = rowsum(dO * O) (FA2 Alg. 2 line 4): one warp per row, 8 rows per thread block of 256.
    // At the real d: zero columns would add nothing to it.
    // A packed batch's D is [H, total_q], as its LSE.
    fa::DeviceBuffer<float> D(q_rows, fa::Mem::Extra, stream);
    bwd_v1::row_dots_kernel<T><<<unsigned(ceil_div(q_rows, 8)), 256, 0, stream>>>(
        static_cast<const T*>(O), g, D.get(), q_rows, int(p.d), packed.any() ? p.H : 0);
    FA_CUDA_CHECK(cudaGetLastError());
    if (pl.runs == "gpu_v1") {
      run_v1<T>(pl, p, q, k, v, g, LSE, D.get(), static_cast<T*>(dQ), static_cast<T*>(dK), static_cast<T*>(dV), stream);
    } else if constexpr (!std::is_same_v<T, float>) {
      if (pl.d_kernel == p.d) {
        run_tensor_cores<T>(pl, is_det(pl.runs), p, p.d, q, k, v, g, LSE, D.get(), static_cast<T*>(dQ),
                            static_cast<T*>(dK), static_cast<T*>(dV), stream, packed);
        return;
      }
      // Padded (runner_bwd.hpp, "Head dims"): the problem at the native width, with the real d's
      // scale (its own default would be 1/sqrt(d_kernel)); LSE and D as they are.
      fa::AttnProblem pp = p;
      pp.d = pl.d_kernel;
      pp.scale = p.resolved_scale();
      const int64_t W = pp.d, e = sizeof(T);
      fa::DeviceBuffer<T> Qp(q_rows * W, fa::Mem::Extra, stream), dOp(q_rows * W, fa::Mem::Extra, stream),
          Kp(kv_rows * W, fa::Mem::Extra, stream), Vp(kv_rows * W, fa::Mem::Extra, stream),
          dKp(kv_rows * W, fa::Mem::Extra, stream), dVp(kv_rows * W, fa::Mem::Extra, stream);
      fa::pad_columns(q, Qp.get(), q_rows, p.d, W, e, stream);
      fa::pad_columns(g, dOp.get(), q_rows, p.d, W, e, stream);
      fa::pad_columns(k, Kp.get(), kv_rows, p.d, W, e, stream);
      fa::pad_columns(v, Vp.get(), kv_rows, p.d, W, e, stream);
      run_tensor_cores<T>(pl, is_det(pl.runs), pp, p.d, Qp.get(), Kp.get(), Vp.get(), dOp.get(), LSE, D.get(),
                          static_cast<T*>(dQ), dKp.get(), dVp.get(), stream, packed);
      fa::unpad_columns(dKp.get(), dK, kv_rows, W, p.d, e, stream);
      fa::unpad_columns(dVp.get(), dV, kv_rows, W, p.d, e, stream);
      // The copies go back to the stream-ordered pool after the kernels that use them.
    }
  });
}
}  // namespace

void backward(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
              const void* K, const void* V, const void* O, const void* dO, const float* LSE, void* dQ,
              void* dK, void* dV, cudaStream_t stream, BwdShape shape, int sm) {
  backward_impl(kernel, p, dtype, Q, K, V, O, dO, LSE, dQ, dK, dV, stream, shape, sm, fa::VarlenDevice{});
}

void backward_varlen(const std::string& kernel, const fa::AttnProblem& p, fa::DType dtype, const void* Q,
                     const void* K, const void* V, const void* O, const void* dO, const float* LSE, void* dQ,
                     void* dK, void* dV, const fa::VarlenDevice& packed, cudaStream_t stream) {
  if (!packed.any()) throw fa::InputError("--cu-seqlens-q", "the offsets of a packed batch", "none");
  backward_impl(kernel, p, dtype, Q, K, V, O, dO, LSE, dQ, dK, dV, stream, BwdShape{}, 0, packed);
}

}  // namespace fa06
