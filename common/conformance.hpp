// The conformance battery: one list of attention problems that every stage runs, and the rule
// that judges a stage on each of them (README.md, "How correctness is proven").
//
// The rule (as FlashAttention's own test-suite uses it): for every output X in {O, LSE},
//   err(stage) <= 2 * err(stage 01 in float32) + floor,     err = max_i |X_i - X_i(float64)|
// and, for float32 CPU stages, max_i |X_i - X_i(stage 01)| <= 1e-5 * max(1, max|X(float64)|).
// NaN never passes; outputs are poisoned with NaN before every run. Rows that see no key must give
// O = 0 exactly and LSE = -inf. Where stage 01 itself overflows (logits above ~88.7, its known
// failure), its error is infinite and the float32 error bound fp32_bound() stands in for it.
//
// GPU stages in 16 bits (--dtype fp16|bf16) read Q, K, V rounded to the dtype and write O in it.
// The battery then rounds the case's inputs first, so the float64 reference, stage 01 and the
// stage all see the same values, and the stage is judged on its own error, not the inputs'
// rounding. Its baseline is what an fp32-arithmetic kernel with that storage would make:
//   err(stage 01 in float32 on the rounded inputs) + err(storage)
// where err(storage) is the error of exact attention whose O (and, for a kernel that multiplies P
// in 16 bits, P) is rounded to the dtype (reference_forward_stored in reference.hpp). The rule is
// unchanged: err(stage) <= 2 * baseline + floor. This is FlashAttention's own test rule, whose
// baseline is PyTorch attention in the same low precision.
#pragma once
#include <string>
#include <vector>

#include "dtype.hpp"
#include "harness.hpp"
#include "stage.hpp"

namespace fa {

// How a case's Q, K, V are made.
enum class Fill {
  Normal,     // every element normal(0, 1)
  HighDims,   // normal, with element c of each row scaled by (1 + 3c/d): the last dims dominate,
              // so a kernel that drops or truncates high dimensions fails
  Logits30,   // normal, with Q rescaled so that max |S_ij| is exactly 30
  Logits100,  // ... exactly 100: exp overflows float32 (stage 01's known failure)
  LogitsNeg20000,  // every logit near -20000: a finite "-inf" (-1e4) as the initial max or the mask
                   // value then wins; built so that every score is exact in float32 (case_inputs)
  EqualKeys,  // every key row equal: all scores tie, O_i = mean of the visible V rows,
              // LSE_i = s + log(count)
  OnesV,      // V all ones: O = 1 for every row that sees a key
  RealL0,     // all-MiniLM-L6-v2 layer 0 Q/K/V (data/), the problem's flags give causal only
  RealL5,     // all-MiniLM-L6-v2 layer 5 Q/K/V
};

struct Case {
  std::string name;
  AttnProblem p;  // a packed batch: its heads, head dim, masks, scale, softcap (B, N_q, N_k unused)
  Fill fill = Fill::Normal;
  // A packed variable-length batch (varlen.hpp): the query and key offsets, B + 1 entries each;
  // empty: the plain problem p. Such a case runs every stage sequence by sequence (run_forward()).
  std::vector<int32_t> cu_q = {}, cu_k = {};
};

// The forward battery (~90 cases: sizes, ragged pairs, head dims, masks, GQA, batch, logit
// ranges, scales, exact answers, real-model inputs).
std::vector<Case> forward_battery();
// The subset used for backward stages (problems small enough for the materialised backward).
std::vector<Case> backward_battery();

// The variant battery (issue 34: sliding windows and softcaps, all through GQA): windows of 0
// and 1 key, below a block, across block edges, asymmetric, one-sided, with causal, with
// N_q != N_k (rows that see no key included), wider than N; softcaps 1 to 50 on logits of 30 and
// 100; both together; real-model inputs. The CPU stages run it, and the GPU kernels that take a
// window and a softcap (the others refuse them in 05's plan(), 06's backward_plan()), so
// forward_battery() holds none.
std::vector<Case> variant_battery();
// Its subset small enough for the materialised backward (N_q N_k <= 500^2).
std::vector<Case> variant_backward_battery();

// The packed-batch battery (issue 34, varlen.hpp): sequences of 0, 1, 127, 129 and ~1000 tokens in
// one batch, N_q(b) != N_k(b) (a sequence with queries and no key, keys and no query, a decode
// row, more queries than keys under causal), causal, windows, softcaps on logits of 100, all
// through GQA, and many short sequences. Judged by the same rule as every case.
std::vector<Case> varlen_battery();
// Its subset for the backward (still with a sequence of ~1000 tokens, causal).
std::vector<Case> varlen_backward_battery();

// Inputs of a case, deterministic (the seed is a hash of the case name). dO is always filled.
Inputs case_inputs(const Case& c);

// A first-order estimate of the float32 error of attention on this input (eps = 2^-23):
//   one logit  : eps * (A + 1), A = max_ij scale * sum_c |Q_ic K_jc| (rounding of the dot product)
//   one sum    : eps * sqrt(N_k) (a sum over the keys, errors of random sign)
//   O          : (logit + sum) * max|V|;   LSE: logit + sum + eps * (1 + A + log N_k)
// Stage 01 is held to twice this (its measured errors sit at 0.01x-0.8x of it across the
// battery), and where stage 01 overflows, this estimate stands in for its error.
struct Fp32Bound {
  double O = 0, LSE = 0;
};
Fp32Bound fp32_bound(const Inputs& in);

// Where a stage stores values in fewer bits than float32 (see the top of this file).
struct Storage {
  DType dtype = DType::fp32;  // Q, K, V read and O written in this type
  bool P_in_dtype = false;    // P rounded to dtype before it multiplies V (tensor cores, cuBLAS)
  // FP8 (stage 05's v15; dtype must then be bf16, O's type): Q, K, V are read in e4m3 with one
  // power-of-two scale per 64 query rows of a (b, h) and per 128 keys of a (b, kv head)
  // (fp8::round_e4m3_blocks: everyone gets those values), P as an e4m3 multiple of 1/256
  // (reference_forward_stored_fp8 is the storage baseline), and the tensor cores' FP8 products
  // accumulate with about 13 significand bits (2^-13 per 32-product step, not float32's 2^-23):
  //   S_ij off by at most dS = (d / 32) 2^-13 A (A = max_ij scale sum_c |Q_ic K_jc|; one step a 32 dims),
  //   O by (e^(2 dS) - 1) max|V| through the weights and (Bc / 32) 2^-13 max|V| through P V (v15
  //   accumulates each key block of Bc = 128 on its own, then adds it in float32), LSE by dS;
  // these terms join the baseline, and the rule is unchanged: err <= 2 baseline + floor.
  // Source of the 13 bits: DeepSeek-V3's report (2024, section 3.3.2: "around 14 bits" retained in
  // H800 FP8 GEMM accumulation); docs/fp8.md.
  bool fp8 = false;
};

// Runs forward `f` on every case of the battery and CHECKs the rule above (doctest assertions;
// call it from inside a TEST_CASE). is_stage01 = true checks stage 01 itself: against float64 with
// the float32 bound, and, where logits exceed ln(FLT_MAX), that it overflows (the known failure).
void check_forward_battery(const ForwardFn& f, bool is_stage01 = false, Storage st = {});
// One case (used by the battery and by stage-specific tests).
void check_forward_case(const ForwardFn& f, const Case& c, bool is_stage01 = false, Storage st = {});

// The same rule over the variant battery (the CPU stages in float32; the GPU kernels that take a
// window and a softcap in their storage type st, as check_forward_battery).
void check_variant_forward_battery(const ForwardFn& f, bool is_stage01 = false, Storage st = {});
// The same rule over the packed-batch battery (float32 CPU stages: f runs per sequence).
void check_varlen_forward_battery(const ForwardFn& f, bool is_stage01 = false);
// The same with a forward that reads the whole batch in one call (stage 05's v13), in its storage
// type st (the storage error computed per sequence, as check_forward_case does for one problem).
void check_varlen_forward_battery(const VarlenForwardFn& f, Storage st = {});
// One packed-batch case (c.cu_q, c.cu_k set) the same way.
void check_varlen_forward_case(const VarlenForwardFn& f, const Case& c, Storage st = {});

// Same for a backward: dQ, dK, dV against the float64 reference backward, with stage 01's backward
// error as the baseline. `forward` (a backward from O and LSE: stage 06 and later) gives the O and
// LSE the backward consumes, its own forward's; then the baseline also carries the error that
// storing LSE in float32 causes by itself (reference_backward with lse_in_float32), measured in
// float64. Without it, the backward gets stage 01's O and LSE.
// A 16-bit backward (st.dtype fp16/bf16: the GPU's gpu_v2): Q, K, V, dO are rounded to the dtype
// for everyone, and the baseline adds what storage alone causes (reference_backward with
// BackwardStorage: D from the O the backward receives, P and dS in the dtype when st.P_in_dtype,
// the gradients in the dtype), in place of the float32-LSE term it includes.
void check_backward_battery(const BackwardFn& f, bool is_stage01 = false, const ForwardFn& forward = {},
                            Storage st = {});
// The same over the variant backward battery (float32 CPU backwards; GPU backwards in st).
void check_variant_backward_battery(const BackwardFn& f, bool is_stage01 = false, const ForwardFn& forward = {},
                                    Storage st = {});
// The same over the packed-batch backward battery (float32 CPU backwards, per sequence).
void check_varlen_backward_battery(const BackwardFn& f, bool is_stage01 = false, const ForwardFn& forward = {});
// One case (used by the battery and by stage-specific tests).
void check_backward_case(const BackwardFn& f, const Case& c, bool is_stage01 = false, const ForwardFn& forward = {},
                         Storage st = {});

}  // namespace fa
