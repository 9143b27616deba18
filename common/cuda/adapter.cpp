#include "adapter.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "check.hpp"
#include "device_buffer.hpp"
#include "devstats.hpp"
#include "errors.hpp"
#include "event_timer.hpp"
#include "gpu.hpp"

namespace fa {
namespace {

// Page-locked host memory for the copies to and from the GPU (faster, and not heap memory, so
// it does not count as the stage's extra host memory: it is where the inputs and outputs travel).
class Pinned {
 public:
  explicit Pinned(int64_t bytes) {
    if (bytes > 0) FA_CUDA_CHECK(cudaMallocHost(&p_, size_t(bytes)));
  }
  ~Pinned() {
    if (p_) cudaFreeHost(p_);
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / double(1ull << 30));
  return buf;
}

// Rounds n float32 values to the dtype (host) and copies them to dst (device), through `stage`.
void upload(DType t, const float* src, int64_t n, void* dst, Pinned& stage, cudaStream_t stream) {
  encode(t, src, n, stage.get());
  FA_CUDA_CHECK(cudaMemcpyAsync(dst, stage.get(), size_t(n * dtype_bytes(t)), cudaMemcpyHostToDevice, stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));  // the staging buffer is reused
}

// n values of the dtype from src (device) into dst as float32 (host).
void download(DType t, const void* src, int64_t n, float* dst, cudaStream_t stream) {
  Pinned out(n * dtype_bytes(t));
  FA_CUDA_CHECK(cudaMemcpyAsync(out.get(), src, size_t(n * dtype_bytes(t)), cudaMemcpyDeviceToHost, stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  decode(t, out.get(), n, dst);
}

// Throws InputError unless `need` bytes fit in the GPU's free memory (with 5 % to spare).
void check_fits(int64_t need) {
  const long long free_b = gpu_free_bytes();
  if (free_b >= 0 && need > free_b - free_b / 20)
    throw InputError("--seq-q/--seq-k", "a problem that fits in the GPU's " + gib(double(free_b)) + " of free memory",
                     gib(double(need)) + " needed (inputs, outputs and the kernel's workspace)");
}


}  // namespace

void check_dtype_range(const float* x, int64_t n, DType t, const std::string& arg) {
  if (t == DType::fp32) return;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(round_to(t, x[i]))) {  // rounds to infinity in the dtype
      char buf[96];
      std::snprintf(buf, sizeof buf, "%g at flat index %lld", double(x[i]), static_cast<long long>(i));
      throw InputError(arg, std::string("values that stay finite in ") + dtype_name(t) +
                                (t == DType::fp16 ? " (|x| < 65520; try --dtype bf16)" : " (|x| < 3.39e38)"),
                       buf);
    }
}

void check_dtype_range(const Inputs& in, DType t) {
  check_dtype_range(in.Q.ptr(), in.Q.numel(), t, "--q");
  check_dtype_range(in.K.ptr(), in.K.numel(), t, "--k");
  check_dtype_range(in.V.ptr(), in.V.numel(), t, "--v");
}

namespace {

// The steps of a forward on the GPU (adapter.hpp, 1 ... 4) around call(Q, K, V, O, LSE, stream) on
// the device copies: Q, O hold nq elements, K and V nkv each, LSE nl; `extra` more bytes must fit
// (workspace, the cache's arrays); setup(stream) runs once the GPU is known to be usable, before
// the first call (to upload whatever else the call reads).
using DeviceCall = std::function<void(const void* Q, const void* K, const void* V, void* O, float* LSE, cudaStream_t)>;
void forward_on_gpu(DType dtype, int64_t nq, int64_t nkv, int64_t nl, int64_t extra, const float* Q, const float* K,
                    const float* V, float* O, float* LSE, const std::function<void(cudaStream_t)>& setup,
                    const DeviceCall& call) {
  check_dtype_range(Q, nq, dtype, "--q");  // depends on the input alone: before the GPU check
  check_dtype_range(K, nkv, dtype, "--k");
  check_dtype_range(V, nkv, dtype, "--v");
  require_gpu();
  const int64_t eb = dtype_bytes(dtype);
  check_fits(eb * (2 * nq + 2 * nkv) + 4 * nl + extra);

  cudaStream_t stream = nullptr;  // the default stream: one run at a time, in order
  DeviceBuffer<uint8_t> dQ(eb * nq, Mem::Io, stream), dK(eb * nkv, Mem::Io, stream),
      dV(eb * nkv, Mem::Io, stream), dO(eb * nq, Mem::Io, stream);
  DeviceBuffer<float> dLSE(nl, Mem::Io, stream);
  {
    Pinned stage(eb * std::max(nq, nkv));
    upload(dtype, Q, nq, dQ.get(), stage, stream);
    upload(dtype, K, nkv, dK.get(), stage, stream);
    upload(dtype, V, nkv, dV.get(), stage, stream);
  }
  if (setup) setup(stream);
  // A first, untimed call loads the kernel's module and creates library handles, so the timed
  // call below measures the kernel alone.
  call(dQ.get(), dK.get(), dV.get(), dO.get(), dLSE.get(), stream);
  FA_CUDA_CHECK(cudaGetLastError());
  // Then poison the outputs: all bits set is a NaN in fp32, fp16 and bf16 alike, so an element
  // the timed call does not write shows as NaN.
  FA_CUDA_CHECK(cudaMemsetAsync(dO.get(), 0xFF, size_t(dO.bytes()), stream));
  FA_CUDA_CHECK(cudaMemsetAsync(dLSE.get(), 0xFF, size_t(dLSE.bytes()), stream));

  EventTimer timer(stream);
  call(dQ.get(), dK.get(), dV.get(), dO.get(), dLSE.get(), stream);
  FA_CUDA_CHECK(cudaGetLastError());
  devstats::set_last_ms(timer.stop());
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));

  download(dtype, dO.get(), nq, O, stream);
  FA_CUDA_CHECK(cudaMemcpyAsync(LSE, dLSE.get(), size_t(dLSE.bytes()), cudaMemcpyDeviceToHost, stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace

ForwardFn gpu_forward(DeviceForwardFn f, DType dtype, WorkspaceFn workspace) {
  return [f = std::move(f), dtype, workspace = std::move(workspace)](
             const AttnProblem& p, const float* Q, const float* K, const float* V, float* O,
             float* LSE) {
    forward_on_gpu(dtype, p.q_elems(), p.kv_elems(), p.lse_elems(), workspace ? workspace(p, dtype) : 0, Q, K, V, O,
                   LSE, {}, [&](const void* dQ, const void* dK, const void* dV, void* dO, float* dLSE, cudaStream_t s) {
                     f(p, dtype, dQ, dK, dV, dO, dLSE, s);
                   });
  };
}

CacheForwardFn gpu_forward_cache(DeviceCacheForwardFn f, DType dtype, CacheWorkspaceFn workspace) {
  return [f = std::move(f), dtype, workspace = std::move(workspace)](
             const AttnProblem& p, const KvCacheHost& c, const float* Q, const float* K, const float* V,
             float* O, float* LSE) {
    // The lengths and the table travel as int32 device arrays (inputs, like Q: not extra memory).
    DeviceBuffer<int32_t> lens, table;
    const auto setup = [&](cudaStream_t s) {
      const auto to_device = [&](const std::vector<int32_t>& x, DeviceBuffer<int32_t>& d) {
        if (x.empty()) return;
        d = DeviceBuffer<int32_t>(int64_t(x.size()), Mem::Io, s);
        FA_CUDA_CHECK(cudaMemcpyAsync(d.get(), x.data(), x.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s));
        FA_CUDA_CHECK(cudaStreamSynchronize(s));
      };
      to_device(c.lens, lens);
      to_device(c.table, table);
    };
    const int64_t ints = 4 * int64_t(c.lens.size() + c.table.size());
    forward_on_gpu(dtype, p.q_elems(), cache_elems(p, c), p.lse_elems(), ints + (workspace ? workspace(p, c, dtype) : 0),
                   Q, K, V, O, LSE, setup,
                   [&](const void* dQ, const void* dK, const void* dV, void* dO, float* dLSE, cudaStream_t s) {
                     f(p, c, dtype, dQ, dK, dV, dO, dLSE, c.has_lens() ? lens.get() : nullptr,
                       c.paged() ? table.get() : nullptr, s);
                   });
  };
}

namespace {
// A packed batch's offsets as int32 device arrays (inputs, like Q: not extra memory).
struct DeviceOffsets {
  DeviceBuffer<int32_t> q, k;
  void upload(const VarlenHost& v, cudaStream_t s) {
    for (auto [x, d] : {std::pair{&v.cu_q, &q}, std::pair{&v.cu_k, &k}}) {
      *d = DeviceBuffer<int32_t>(int64_t(x->size()), Mem::Io, s);
      FA_CUDA_CHECK(cudaMemcpyAsync(d->get(), x->data(), x->size() * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    }
    FA_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  static int64_t bytes(const VarlenHost& v) { return 4 * int64_t(v.cu_q.size() + v.cu_k.size()); }
};
}  // namespace

VarlenForwardFn gpu_forward_varlen(DeviceVarlenForwardFn f, DType dtype, VarlenWorkspaceFn workspace) {
  return [f = std::move(f), dtype, workspace = std::move(workspace)](
             const AttnProblem& p, const VarlenHost& v, const float* Q, const float* K, const float* V, float* O,
             float* LSE) {
    DeviceOffsets cu;  // uploaded by forward_on_gpu / backward_on_gpu once the GPU is checked
    const auto setup = [&](cudaStream_t s) { cu.upload(v, s); };
    forward_on_gpu(dtype, v.total_q() * p.H * p.d, v.total_k() * p.H_kv * p.d, p.H * v.total_q(),
                   cu.bytes(v) + (workspace ? workspace(p, v, dtype) : 0), Q, K, V, O, LSE, setup,
                   [&](const void* dQ, const void* dK, const void* dV, void* dO, float* dLSE, cudaStream_t s) {
                     f(p, v, dtype, dQ, dK, dV, dO, dLSE, cu.q.get(), cu.k.get(), s);
                   });
  };
}

namespace {
// The device call of a backward on the uploaded copies: (Q, K, V, O, dO, LSE, dQ, dK, dV, stream).
using DeviceBwdCall = std::function<void(const void*, const void*, const void*, const void*, const void*,
                                         const float*, void*, void*, void*, cudaStream_t)>;
// gpu_backward's steps for nq elements of Q (O, dO, dQ), nkv of K (V, dK, dV), nl of LSE and extra
// bytes of workspace: range checks, upload, a warm-up call, the gradients poisoned, a timed call,
// download. setup(stream) runs after the GPU check (the offsets of a packed batch).
void backward_on_gpu(DType dtype, int64_t nq, int64_t nkv, int64_t nl, int64_t extra, const float* Q, const float* K,
                     const float* V, const float* O, const float* dO, const float* LSE, float* dQ, float* dK,
                     float* dV, const std::function<void(cudaStream_t)>& setup, const DeviceBwdCall& f) {
  check_dtype_range(Q, nq, dtype, "--q");
  check_dtype_range(K, nkv, dtype, "--k");
  check_dtype_range(V, nkv, dtype, "--v");
  check_dtype_range(O, nq, dtype, "--o-in");
  check_dtype_range(dO, nq, dtype, "--do");
  require_gpu();
  const int64_t eb = dtype_bytes(dtype);
  check_fits(eb * (4 * nq + 4 * nkv) + 4 * nl + extra);

  cudaStream_t stream = nullptr;
  if (setup) setup(stream);
  // g*: the device copies ("g" for GPU; dQ ... are the caller's host gradients).
  DeviceBuffer<uint8_t> gQ(eb * nq, Mem::Io, stream), gK(eb * nkv, Mem::Io, stream),
      gV(eb * nkv, Mem::Io, stream), gO(eb * nq, Mem::Io, stream), gdO(eb * nq, Mem::Io, stream),
      gdQ(eb * nq, Mem::Io, stream), gdK(eb * nkv, Mem::Io, stream), gdV(eb * nkv, Mem::Io, stream);
  DeviceBuffer<float> gLSE(nl, Mem::Io, stream);
  {
    Pinned stage(std::max(eb * std::max(nq, nkv), 4 * nl));
    upload(dtype, Q, nq, gQ.get(), stage, stream);
    upload(dtype, K, nkv, gK.get(), stage, stream);
    upload(dtype, V, nkv, gV.get(), stage, stream);
    upload(dtype, O, nq, gO.get(), stage, stream);
    upload(dtype, dO, nq, gdO.get(), stage, stream);
    upload(DType::fp32, LSE, nl, gLSE.get(), stage, stream);
  }
  auto run = [&] {
    f(gQ.get(), gK.get(), gV.get(), gO.get(), gdO.get(), gLSE.get(), gdQ.get(), gdK.get(), gdV.get(), stream);
    FA_CUDA_CHECK(cudaGetLastError());
  };
  run();  // untimed warm-up (module loading)
  // Poison the gradients (NaN bits in every dtype): an element the timed call misses shows.
  for (DeviceBuffer<uint8_t>* g : {&gdQ, &gdK, &gdV})
    FA_CUDA_CHECK(cudaMemsetAsync(g->get(), 0xFF, size_t(g->bytes()), stream));
  EventTimer timer(stream);
  run();
  devstats::set_last_ms(timer.stop());
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  download(dtype, gdQ.get(), nq, dQ, stream);
  download(dtype, gdK.get(), nkv, dK, stream);
  download(dtype, gdV.get(), nkv, dV, stream);
}
}  // namespace

BackwardFn gpu_backward(DeviceBackwardFn f, DType dtype, WorkspaceFn workspace) {
  return [f = std::move(f), dtype, workspace = std::move(workspace)](
             const AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
             const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    backward_on_gpu(dtype, p.q_elems(), p.kv_elems(), p.lse_elems(), workspace ? workspace(p, dtype) : 0, Q, K, V, O,
                    dO, LSE, dQ, dK, dV, {},
                    [&](const void* gQ, const void* gK, const void* gV, const void* gO, const void* gdO,
                        const float* gL, void* gdQ, void* gdK, void* gdV, cudaStream_t s) {
                      f(p, dtype, gQ, gK, gV, gO, gdO, gL, gdQ, gdK, gdV, s);
                    });
  };
}

VarlenBackwardFn gpu_backward_varlen(DeviceVarlenBackwardFn f, DType dtype, VarlenWorkspaceFn workspace) {
  return [f = std::move(f), dtype, workspace = std::move(workspace)](
             const AttnProblem& p, const VarlenHost& v, const float* Q, const float* K, const float* V,
             const float* O, const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
    DeviceOffsets cu;  // uploaded by forward_on_gpu / backward_on_gpu once the GPU is checked
    const auto setup = [&](cudaStream_t s) { cu.upload(v, s); };
    backward_on_gpu(dtype, v.total_q() * p.H * p.d, v.total_k() * p.H_kv * p.d, p.H * v.total_q(),
                    cu.bytes(v) + (workspace ? workspace(p, v, dtype) : 0), Q, K, V, O, dO, LSE, dQ, dK, dV, setup,
                    [&](const void* gQ, const void* gK, const void* gV, const void* gO, const void* gdO,
                        const float* gL, void* gdQ, void* gdK, void* gdV, cudaStream_t s) {
                      f(p, v, dtype, gQ, gK, gV, gO, gdO, gL, gdQ, gdK, gdV, cu.q.get(), cu.k.get(), s);
                    });
  };
}

}  // namespace fa
