// One signature for every stage (the gau-nernst idea): the test battery, the stage programs, the
// tour and the benchmarks are written once against these types.
#pragma once
#include <functional>
#include <string>

#include "dtype.hpp"
#include "problem.hpp"

namespace fa {

struct Inputs;       // harness.hpp
struct KvCacheHost;  // kv_cache.hpp
struct VarlenHost;   // varlen.hpp

// Forward: reads Q [B,H,N_q,d], K and V [B,H_kv,N_k,d]; writes O [B,H,N_q,d] and LSE [B,H,N_q].
using ForwardFn = std::function<void(const AttnProblem&, const float* Q, const float* K,
                                     const float* V, float* O, float* LSE)>;
// Backward: reads Q, K, V, O, dO (shape of O) and LSE; writes dQ (shape of Q), dK and dV (shape
// of K).
using BackwardFn = std::function<void(const AttnProblem&, const float* Q, const float* K,
                                      const float* V, const float* O, const float* dO,
                                      const float* LSE, float* dQ, float* dK, float* dV)>;

// Forward on a KV cache (kv_cache.hpp): Q, O, LSE as above; K and V are the cache, contiguous
// [B,H_kv,N_k,d] or paged [num_pages,H_kv,P,d]; N_k is its capacity.
using CacheForwardFn = std::function<void(const AttnProblem&, const KvCacheHost&, const float* Q,
                                          const float* K, const float* V, float* O, float* LSE)>;

// Forward on a packed variable-length batch in one call (varlen.hpp), where a stage has a kernel
// that reads one (stage 05's v13) rather than running sequence by sequence: p is varlen_problem()'s
// (B sequences; N_q, N_k the longest), Q and O [total_q, H, d], K and V [total_k, H_kv, d], LSE
// [H, total_q].
using VarlenForwardFn = std::function<void(const AttnProblem&, const VarlenHost&, const float* Q,
                                           const float* K, const float* V, float* O, float* LSE)>;

// Backward on a packed batch in one call (stage 06's gpu_v3 on the GPU): p and the layout as
// VarlenForwardFn's; dO and dQ like Q, dK and dV like K.
using VarlenBackwardFn = std::function<void(const AttnProblem&, const VarlenHost&, const float* Q, const float* K,
                                            const float* V, const float* O, const float* dO, const float* LSE,
                                            float* dQ, float* dK, float* dV)>;

struct Stage {
  std::string name;    // the program's name, e.g. "01_naive"
  std::string idea;    // the one new idea, a short line for the tour's table
  ForwardFn forward;   // always set
  BackwardFn backward; // empty if the stage has no backward
  // How many N_q x N_k float matrices a call keeps per (batch, head), for the memory check
  // before a run (check_memory in harness.hpp): stage 01 forward S, P = 2, backward S, P, dP, dS = 4.
  int nxn_forward = 0, nxn_backward = 0;
  // GPU stages: the forward for an element type (--dtype fp32|fp16|bf16: Q, K, V rounded to it
  // and O stored in it). Empty for the CPU stages, which compute in fp32 and refuse other dtypes.
  std::function<ForwardFn(DType)> forward_for = {};
  // A GPU stage with an FP8 kernel (stage 05's v15): the forward for --dtype fp8 (Q, K, V go to
  // the GPU in bf16 and are quantised there to e4m3 with block scales; O comes back from bf16).
  // stage_main range-checks the inputs and calls precheck as for bf16. Empty: --dtype fp8 is
  // refused, naming the stage.
  std::function<ForwardFn()> fp8_forward = {};
  // GPU stages: what can be refused before anything runs (the kernel does not support the
  // problem, an input value overflows the dtype, there is no usable GPU). stage_main calls it
  // with in == nullptr as soon as the shape flags give the problem (before inputs are made), and
  // again with the inputs. Throws InputError.
  std::function<void(const AttnProblem&, const Inputs* in, DType)> precheck = {};
  // A stage that fails by design on some inputs (stage 01's textbook softmax): which failure
  // applies to these inputs, one line each, "" if none. The program prints each as a warning.
  std::function<std::string(const Inputs&)> diagnose = {};
  // A stage that takes a KV cache (--cache-lens, --page-size, --block-table: stage 05, kernel
  // v14): its forward on one, for an element type. Empty: the program refuses the cache flags.
  std::function<CacheForwardFn(DType)> cache_forward_for = {};
  // A stage whose forward and backward index every row through the problem's offsets
  // (q_offset(), q_row_stride() ...): it runs a packed variable-length batch (--cu-seqlens-q/-k,
  // common/varlen.hpp) sequence by sequence on offset pointers. The CPU stages set it; on the GPU
  // a call per sequence would leave the SMs idle (and the adapter uploads [B, H, N, d] rows), so
  // the GPU stages take a packed batch through varlen_forward_for / varlen_backward_for instead.
  bool varlen = false;
  // A GPU stage with a kernel that reads a packed batch in one launch (stage 05, kernel v13): its
  // forward on one, for an element type. The program then takes --cu-seqlens-q/-k.
  std::function<VarlenForwardFn(DType)> varlen_forward_for = {};
  // ... and a backward that reads one (stage 06 --device gpu: gpu_v3), with the forward above.
  std::function<VarlenBackwardFn(DType)> varlen_backward_for = {};
};

}  // namespace fa
