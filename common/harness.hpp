// Inputs, one timed and memory-measured run of a stage, and its comparison with stage 01 and with
// the float64 reference. Used by every stage program and by the tour.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "kv_cache.hpp"
#include "metrics.hpp"
#include "problem.hpp"
#include "stage.hpp"
#include "tensor.hpp"
#include "varlen.hpp"

namespace fa {

struct Inputs {
  AttnProblem p;
  Tensor Q, K, V;  // [B,H,N_q,d], [B,H_kv,N_k,d], [B,H_kv,N_k,d]; with a paged cache K and V are
                   // [num_pages,H_kv,P,d] and N_k its capacity (kv_cache.hpp)
  KvCacheHost cache;  // the KV cache the forward runs on (--cache-lens ...); none: the plain problem
  // A packed variable-length batch (--cu-seqlens-q/-k, varlen.hpp): Q [total_q,H,d], K and V
  // [total_k,H_kv,d], O like Q, LSE [H,total_q]; p is then varlen_problem(): B sequences, N_q and
  // N_k the longest one's. None: the plain problem.
  VarlenHost varlen;
  Tensor dO;       // shape of Q; empty unless a backward will run
  std::string source;  // "random (seed 0)" or the file names
};

// Where the default input (real Q/K/V from a pretrained transformer, see data/PROVENANCE.md) lives.
std::string default_data_dir();
// The default input: data/minilm_l0_{q,k,v}.npy (layer 0: the sharpest rows, max logit 69). Throws InputError if the files are missing.
Inputs default_inputs(bool causal, float scale);

// Load Q, K, V from .npy files (float32, C order; [B,H,N,d], [H,N,d] or [N,d]) and check that they
// form one problem: same B, K and V of one shape, one d, H % H_kv == 0, no NaN/Inf, and values
// whose float32 products cannot overflow (check_float32_range).
// Throws InputError naming the flag (--q, --k, --v) on any violation.
Inputs load_inputs(const std::string& q, const std::string& k, const std::string& v, bool causal,
                   float scale);

// Throws InputError if float32 arithmetic on these inputs could overflow before any softmax
// (max |q_i| |k_j| max(1, scale) or max |v| N_k above 1e37): such inputs would give NaN in every
// stage, including those that subtract the row max. Needs in.p set.
void check_float32_range(const Inputs& in);

// Random inputs: every element normal(0, 1), from the seed (common/rng.hpp).
Inputs random_inputs(const AttnProblem& p, uint64_t seed);

// Random inputs on the paged cache c, whose table and sizes are set (from --block-table): Q
// [B,H,N_q,d], K and V [c.num_pages,H_kv,P,d] normal(0, 1) from the seed; p.N_k is the capacity.
// Throws InputError as validate() and validate_kv_cache().
Inputs random_paged_inputs(const AttnProblem& p, const KvCacheHost& c, uint64_t seed);

// Q from a file as load_inputs() reads it, and K and V from files holding the paged cache c
// ([num_pages,H_kv,P,d], P = c.page_size; c.num_pages is set from them). p.N_k is the capacity
// pages_per_seq P. Throws InputError naming --q, --k, --v or the cache flag.
Inputs load_paged_inputs(const std::string& q, const std::string& k, const std::string& v, bool causal,
                         float scale, KvCacheHost c);

// Random inputs of a packed batch: p's heads, head dim and masks (its B, N_q, N_k are ignored),
// Q [total_q,H,d], K and V [total_k,H_kv,d] normal(0, 1) from the seed; in.p = varlen_problem().
// Throws InputError as validate_varlen() and validate().
Inputs random_varlen_inputs(const AttnProblem& p, const VarlenHost& v, uint64_t seed);

// Q, K, V of a packed batch from files: [total_q,H,d], [total_k,H_kv,d] and K's shape, float32,
// rank 3 exactly; cu_q[B] must be Q's token count and cu_k[B] K's. Throws InputError naming the
// flag (--q, --k, --v, --cu-seqlens-q, --cu-seqlens-k; `cu_q_file`, `cu_k_file` name the files).
Inputs load_varlen_inputs(const std::string& q, const std::string& k, const std::string& v, bool causal, float scale,
                          VarlenHost cu, const std::string& cu_q_file, const std::string& cu_k_file);

// The shapes of O and LSE for these inputs: [B,H,N_q,d] and [B,H,N_q], or a packed batch's
// [total_q,H,d] and [H,total_q].
std::vector<int64_t> o_shape(const Inputs& in);
std::vector<int64_t> lse_shape(const Inputs& in);

// Adds dO: from a file (shape must equal Q's; InputError on mismatch or NaN) or normal(0, 1).
void add_grad_output(Inputs& in, const std::string& path, uint64_t seed);

// Throws InputError(arg, "finite values", ...) if x holds a NaN or an infinity.
void check_finite(const Tensor& x, const std::string& arg);

// Reads a float32 .npy that must have `shape` (a file of lower rank is accepted when its shape is
// `shape` without leading 1s, as for --q) and finite values (-inf too where allow_neg_inf: LSE of
// a row that sees no key). Throws InputError naming `arg`.
Tensor load_npy_as(const std::string& path, const std::string& arg, const std::vector<int64_t>& shape,
                   bool allow_neg_inf);

// max over visible (i, j) of |S_ij| = |scale * Q_i . K_j|, in double, before any softcap (the
// capped logit is c tanh(this / c)). With abs_terms, of scale * sum_c |Q_ic K_jc| instead (the
// size of the terms a float32 dot product rounds).
double max_logit(const Inputs& in, bool abs_terms = false);

// Bytes of memory the kernel reports as available now (MemAvailable in /proc/meminfo); -1 if unknown.
int64_t available_memory_bytes();

// Throws InputError naming `arg` if `need` bytes exceed the memory available (with a 10% margin):
// a run that would not fit stops with exit code 2 before it allocates, instead of being killed by
// the kernel's out-of-memory killer (Linux overcommits, so new/malloc alone would not fail).
// `what` says what the bytes are for.
void check_memory(int64_t need, const std::string& arg, const std::string& what);

// Bytes one stage program needs for problem p: inputs and outputs (and gradients if backward),
// plus the larger of the stage's own N_q x N_k matrices and, if check, stage 01's (the baseline).
int64_t estimate_run_bytes(const AttnProblem& p, int nxn_stage, bool backward, bool check);
// The same for a packed batch: its tensors, and the N_q x N_k matrices of its largest sequence
// (a stage and stage 01 run one sequence at a time).
int64_t estimate_varlen_run_bytes(const AttnProblem& p, const VarlenHost& v, int nxn_stage, bool backward, bool check);

struct ForwardRun {
  Tensor O, LSE;
  double ms = 0;              // wall time of the stage call (milliseconds)
  int64_t extra_bytes = 0;    // peak heap bytes above inputs and outputs during the call
  // GPU stages (common/devstats.hpp): kernel time by CUDA events (ms) and peak extra GPU memory
  // (bytes, the device copies of inputs and outputs not counted); both -1 for a CPU stage.
  double gpu_ms = -1;
  int64_t gpu_extra_bytes = -1;
};
struct BackwardRun {
  Tensor dQ, dK, dV;
  double ms = 0;
  int64_t extra_bytes = 0;
  double gpu_ms = -1;
  int64_t gpu_extra_bytes = -1;
};

// Run once. Outputs are poisoned with NaN before the call, so unwritten elements show. On a packed
// batch (in.varlen), f runs sequence by sequence (varlen_forward(), varlen_backward()).
ForwardRun run_forward(const ForwardFn& f, const Inputs& in);
// The same on the inputs' KV cache (in.cache).
ForwardRun run_forward(const CacheForwardFn& f, const Inputs& in);
// A packed batch (in.varlen) in one call of f, which reads the whole batch.
ForwardRun run_forward(const VarlenForwardFn& f, const Inputs& in);
// A packed batch's backward in one call of f.
BackwardRun run_backward(const VarlenBackwardFn& f, const Inputs& in, const ForwardRun& fwd);
BackwardRun run_backward(const BackwardFn& f, const Inputs& in, const ForwardRun& fwd);

// Errors of one run against stage 01 (float32) and against float64.
struct ForwardErrors {
  ErrorStats O_vs_01, LSE_vs_01, O_vs_f64, LSE_vs_f64;
};
struct BackwardErrors {
  ErrorStats dQ_vs_01, dK_vs_01, dV_vs_01, dQ_vs_f64, dK_vs_f64, dV_vs_f64;
};

// Computes the baselines once (stage 01 in float32 and the float64 reference) and compares runs
// against them.
class Baselines {
 public:
  explicit Baselines(const Inputs& in, bool with_backward);
  ForwardErrors compare(const ForwardRun& r) const;
  BackwardErrors compare(const BackwardRun& r) const;
  double max_abs_logit() const { return max_abs_logit_; }  // max |S_ij| over visible entries
  const TensorD& O64() const { return O64_; }    // the float64 reference's O and LSE
  const TensorD& LSE64() const { return LSE64_; }

 private:
  ForwardRun naive_;
  BackwardRun naive_bwd_;
  TensorD O64_, LSE64_, dQ64_, dK64_, dV64_;
  double max_abs_logit_ = 0;
};

}  // namespace fa
