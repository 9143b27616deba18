// Stage 01's materialised backward for bench_06_backward_recompute, in its own translation unit,
// compiled as in stage 01's program (no FMA contraction) while bench_backward.cpp is compiled with
// stage 06's -ffp-contract=fast: a stage template instantiated under two sets of floating-point
// flags in one program would leave the linker to keep either copy (04_tiled_cpu/bench_baselines.hpp
// says the same for the forward).
// Shapes and layout (common/problem.hpp): Q, O, dO, dQ [B,H,N_q,d]; K, V, dK, dV [B,H_kv,N_k,d];
// LSE [B,H,N_q].
#include "naive_backward.hpp"

namespace bench_baselines {
void stage01_backward(const fa::AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
                      const float* dO, const float* LSE, float* dQ, float* dK, float* dV) {
  naive::backward<float>(p, Q, K, V, O, dO, LSE, dQ, dK, dV);
}
}  // namespace bench_baselines
