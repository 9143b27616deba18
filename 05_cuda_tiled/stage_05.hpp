// Stage 05 as the programs, the tests, the tour and the benchmarks see it (common/stage.hpp):
// one kernel version of runner.hpp behind the common ForwardFn, through the host adapter
// (common/cuda/adapter.hpp: round to the dtype, upload, run, download).
#pragma once
#include "adapter.hpp"
#include "kv_cache.hpp"
#include "runner.hpp"
#include "runner_fp8.hpp"
#include "stage.hpp"
#include "varlen.hpp"

// The ForwardFn of `kernel` in `dtype` with the knobs `cfg`. A problem the kernel cannot run is
// refused (fa05::plan throws InputError) before anything touches the GPU.
inline fa::ForwardFn stage_05_forward(const std::string& kernel, fa::DType dtype, const fa05::Config& cfg = {}) {
  fa::ForwardFn on_gpu = fa::gpu_forward(
      [kernel, cfg](const fa::AttnProblem& p, fa::DType t, const void* Q, const void* K,
                    const void* V, void* O, float* LSE, cudaStream_t stream) {
        fa05::forward(kernel, p, t, Q, K, V, O, LSE, cfg, stream);
      },
      dtype,
      [kernel, cfg](const fa::AttnProblem& p, fa::DType t) { return fa05::plan(kernel, p, t, cfg).workspace_bytes; });
  return [=](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
    fa05::plan(kernel, p, dtype, cfg);
    on_gpu(p, Q, K, V, O, LSE);
  };
}

// The ForwardFn of v15, the FP8 kernel (runner_fp8.hpp): Q, K, V go to the GPU in bf16 and are
// quantised there to e4m3 blocks (the bf16 values of a battery's inputs, already e4m3 times a
// power of two, come through that exactly); O comes back from bf16. Refuses (Unsupported) what
// plan_fp8 refuses before anything touches the GPU.
inline fa::ForwardFn stage_05_fp8_forward(const fa05::Config& cfg = {}) {
  fa::ForwardFn on_gpu = fa::gpu_forward(
      [cfg](const fa::AttnProblem& p, fa::DType, const void* Q, const void* K, const void* V, void* O, float* LSE,
            cudaStream_t stream) { fa05::forward_fp8(p, Q, K, V, O, LSE, cfg, stream); },
      fa::DType::bf16, [cfg](const fa::AttnProblem& p, fa::DType) { return fa05::fp8_workspace_bytes(p, cfg); });
  return [=](const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE) {
    fa05::plan_fp8(p, cfg);
    on_gpu(p, Q, K, V, O, LSE);
  };
}

// The runner's view of a host KV cache: its sizes, and the arrays at lens and table (device
// pointers for forward(); plan() reads only the sizes and which pointers are set, so the host
// arrays serve it).
inline fa05::KvCache kv_cache_view(const fa::KvCacheHost& c, const int32_t* lens, const int32_t* table) {
  return {c.has_lens() ? lens : nullptr, c.paged() ? table : nullptr, c.page_size, c.pages_per_seq, c.num_pages};
}
inline fa05::KvCache kv_cache_view(const fa::KvCacheHost& c) { return kv_cache_view(c, c.lens.data(), c.table.data()); }

// The same on a KV cache (--cache-lens, --page-size, --block-table): v14 or auto, plan() refuses
// the others. The cache is validated on the host here, where it is made: forward() never reads
// its arrays on the host (runner.hpp).
inline fa::CacheForwardFn stage_05_cache_forward(const std::string& kernel, fa::DType dtype, const fa05::Config& cfg = {}) {
  fa::CacheForwardFn on_gpu = fa::gpu_forward_cache(
      [kernel, cfg](const fa::AttnProblem& p, const fa::KvCacheHost& c, fa::DType t, const void* Q, const void* K,
                    const void* V, void* O, float* LSE, const int32_t* lens, const int32_t* table, cudaStream_t stream) {
        fa05::forward(kernel, p, t, Q, K, V, O, LSE, kv_cache_view(c, lens, table), cfg, stream);
      },
      dtype,
      [kernel, cfg](const fa::AttnProblem& p, const fa::KvCacheHost& c, fa::DType t) {
        return fa05::plan(kernel, p, t, cfg, kv_cache_view(c)).workspace_bytes;
      });
  return [=](const fa::AttnProblem& p, const fa::KvCacheHost& c, const float* Q, const float* K, const float* V,
             float* O, float* LSE) {
    fa::validate_kv_cache(p, c);
    fa05::plan(kernel, p, dtype, cfg, kv_cache_view(c));
    on_gpu(p, c, Q, K, V, O, LSE);
  };
}

// The runner's view of a host packed batch: its totals, and the offsets at cu_q and cu_k (device
// pointers for forward_varlen(); plan() reads only the totals and whether cu_q is set).
inline fa05::Varlen varlen_view(const fa::VarlenHost& v, const int32_t* cu_q, const int32_t* cu_k) {
  return {cu_q, cu_k, v.total_q(), v.total_k()};
}
inline fa05::Varlen varlen_view(const fa::VarlenHost& v) { return varlen_view(v, v.cu_q.data(), v.cu_k.data()); }

// The same on a packed batch (--cu-seqlens-q/-k): v13 or auto, in one launch; plan() refuses the
// others. The offsets are validated on the host here, where they are made (forward_varlen() never
// reads them on the host).
inline fa::VarlenForwardFn stage_05_varlen_forward(const std::string& kernel, fa::DType dtype, const fa05::Config& cfg = {}) {
  fa::VarlenForwardFn on_gpu = fa::gpu_forward_varlen(
      [kernel, cfg](const fa::AttnProblem& p, const fa::VarlenHost& v, fa::DType t, const void* Q, const void* K,
                    const void* V, void* O, float* LSE, const int32_t* cu_q, const int32_t* cu_k, cudaStream_t stream) {
        fa05::forward_varlen(kernel, p, t, Q, K, V, O, LSE, varlen_view(v, cu_q, cu_k), cfg, stream);
      },
      dtype,
      [kernel, cfg](const fa::AttnProblem& p, const fa::VarlenHost& v, fa::DType t) {
        return fa05::plan(kernel, p, t, cfg, {}, varlen_view(v)).workspace_bytes;
      });
  return [=](const fa::AttnProblem& p, const fa::VarlenHost& v, const float* Q, const float* K, const float* V,
             float* O, float* LSE) {
    fa::validate_varlen(v);
    fa::validate_varlen_problem(p, v);
    fa05::plan(kernel, p, dtype, cfg, {}, varlen_view(v));
    on_gpu(p, v, Q, K, V, O, LSE);
  };
}

// The stage for one kernel version ("v1", "cublas": fa05::kernels()); fp32 unless the program's
// --dtype says otherwise (forward_for).
inline fa::Stage stage_05(const std::string& kernel, const fa05::Config& cfg = {}) {
  const fa05::KernelInfo& k = fa05::kernel_info(kernel);
  fa::Stage s;
  s.name = "05_cuda_tiled";
  s.idea = k.name + ": " + k.idea;
  s.forward = stage_05_forward(kernel, fa::DType::fp32, cfg);
  s.forward_for = [kernel, cfg](fa::DType t) { return stage_05_forward(kernel, t, cfg); };
  s.cache_forward_for = [kernel, cfg](fa::DType t) { return stage_05_cache_forward(kernel, t, cfg); };
  s.varlen_forward_for = [kernel, cfg](fa::DType t) { return stage_05_varlen_forward(kernel, t, cfg); };
  s.nxn_forward = 0;
  return s;
}
