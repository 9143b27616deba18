// The precision experiment: the course's own attention cores (stages 01-04), run with inputs
// stored in fp32, fp16 or bf16 and arithmetic in fp32 or in the storage format, compared with the
// float64 reference (common/reference.hpp). The program (precision.cpp) and the test
// (test_numerics.cpp) both drive it through run_input().
//
// Vocabulary used in the results (docs/results/precision.json, docs/numerics.md):
//   format   how Q, K, V are stored: fp32 (as given), fp16 or bf16 (each element rounded to
//            nearest even once, before anything is computed)
//   accum    the type T the stage core is instantiated with, i.e. the precision of EVERY
//            intermediate (dot products, scores, max, exp, softmax sum l, output accumulator):
//            fp32 (T = float), fp16/bf16 (T = lowp::Half / lowp::BFloat16), fp64 (T = double,
//            the control: it shows how far the orders differ when rounding is ~1e-16)
//   order    naive  : 01_naive/naive.hpp            naive::forward<T>          (no max subtracted)
//            safe   : 02_safe_softmax/safe_softmax.hpp  safe_softmax::forward<T>  (the materialised
//                     standard attention: S, P stored, three passes)
//            online : 03_online_softmax/online_softmax.hpp online_softmax::forward<T> (one pass)
//            merge  : stage 03's partial() over blocks of Bc keys, folded left with merge()
//                     (the block order of FlashAttention, with stage 03's arithmetic; any T)
//            tiled  : 04_tiled_cpu/tiled.hpp  tiled::forward<float>(..., Blocks{Br, Bc, 1 thread})
//                     (float32 only: its micro-kernels are; FMA-contracted as in its program)
//            ablate:<part>  an instrument, not a stage: safe softmax evaluated in float64 with ONE
//                     part rounded to the 16-bit format (inputs, scores, exp, sum, output, all)
//   errors   O_max_abs  = max |O - O_ref64(original fp32 inputs)|        (what a user sees)
//            O_rms      = RMS of the same differences
//            O_max_abs_cmp = max |O - O_ref64(the ROUNDED inputs)|       (the computation's own
//                         error, the part an evaluation order could change)
//            LSE_max_abs = max |LSE - LSE_ref64(original)|
//            O_vs_safe  = max |O - O_safe| with safe run in the same format and accum
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "problem.hpp"
#include "tensor.hpp"

namespace numx {

// One attention problem. Q holds only the query rows that are evaluated (p.N_q of them; rows are
// independent, so a sample of rows gives the per-row error statistics at O(rows * N * d) cost).
struct Input {
  std::string name;   // "randn", "randn_sharp", "minilm_l0", ...
  fa::AttnProblem p;  // p.N_k = N keys, p.N_q = evaluated rows
  fa::Tensor Q, K, V;
};

struct Row {
  std::string input, format, accum, order;
  int64_t N = 0, rows = 0, d = 0, heads = 0, Bc = 0;  // Bc = 0: not a blocked order
  double O_max_abs = 0, O_rms = 0, O_rel_rms = 0, O_max_abs_cmp = 0, O_rms_cmp = 0;
  double LSE_max_abs = 0, O_vs_safe = 0;
  int64_t nonfinite = 0;  // elements of O or LSE that are NaN or infinite
  // Properties of the input (same for every row of one input).
  double max_logit = 0, max_abs_V = 0, rms_O_ref = 0;
  double ms = 0;  // wall time of the core call (information only)
};

struct Options {
  std::vector<int64_t> blocks;     // Bc values for merge/tiled
  bool naive = true;               // run stage 01 too
  bool ablation = false;           // run the float64 ablation
  std::vector<std::string> formats = {"fp32", "fp16", "bf16"};
  bool fp64_control = true;        // also accum = fp64 on fp32 inputs
  int64_t tiled_Br = 16;
};

// Random problem: Q [1,1,rows,d], K and V [1,1,N,d], every element normal(0,1), then Q multiplied
// by q_scale (so logits S = scale * q.k have standard deviation ~q_scale).
Input random_input(const std::string& name, int64_t N, int64_t rows, int64_t d, double q_scale,
                   uint64_t seed);
// Real all-MiniLM-L6-v2 layer Q/K/V from data/ (B=1, H=12, N=256, d=32, every row evaluated).
Input minilm_input(int layer);

// Runs every configuration of `opt` on one input.
std::vector<Row> run_input(const Input& in, const Options& opt);

// Tiled stage 04 on float32 (tiled_runner.cpp, compiled with stage 04's flags).
void tiled_forward(const fa::AttnProblem& p, const float* Q, const float* K, const float* V,
                   float* O, float* LSE, int64_t Br, int64_t Bc);

}  // namespace numx
