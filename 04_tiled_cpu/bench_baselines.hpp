// Stages 01-03 for bench_04_tiled_cpu, from their own translation unit (bench_baselines.cpp),
// compiled as in their own programs (no FMA contraction), while bench_tiled.cpp is compiled with
// stage 04's -ffp-contract=fast. One set of floating-point flags per file: a stage template
// instantiated under two sets in one program would leave the linker to keep either copy, and the
// baselines would not be the stages their programs run.
// Shapes and layout (common/problem.hpp): Q, O [B,H,N_q,d]; K, V [B,H_kv,N_k,d]; LSE [B,H,N_q].
#pragma once
#include "problem.hpp"

namespace bench_baselines {
void stage01(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE);
void stage02(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE);
void stage03(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE);
}  // namespace bench_baselines
