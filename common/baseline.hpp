// The baseline every check compares a stage with: stage 01's materialised forward and backward
// in float32 (Vaswani et al. 2017, eq. 1; Dao et al. 2022, Appendix B.2), the "vs 01" of every
// report and the reference error of the conformance battery's rule.
// Declared here and defined by 01_naive/baseline01.cpp (library fa_baseline01, linked into
// fa_common by the top-level CMakeLists.txt), so that common/ names no stage: which stage is the
// baseline is decided where the libraries are linked, not in the plumbing.
// Shapes and layout (problem.hpp): Q, O, dO, dQ [B,H,N_q,d]; K, V, dK, dV [B,H_kv,N_k,d];
// LSE [B,H,N_q]. Nothing is thrown; sizes are validated by the caller.
#pragma once
#include "problem.hpp"

namespace fa {

// O = softmax(scale Q K^T) V and LSE, with S and P materialised (2 B H N_q N_k floats).
void baseline_forward(const AttnProblem& p, const float* Q, const float* K, const float* V, float* O, float* LSE);
// dQ, dK, dV from dO, with S, P, dP, dS materialised (4 B H N_q N_k floats).
void baseline_backward(const AttnProblem& p, const float* Q, const float* K, const float* V, const float* O,
                       const float* dO, const float* LSE, float* dQ, float* dK, float* dV);

}  // namespace fa
