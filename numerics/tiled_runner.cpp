// Stage 04's forward for the precision experiment, in its own translation unit so that it is
// compiled with stage 04's flags (-ffp-contract=fast: a * b + c becomes one FMA in its
// micro-kernels, as in the 04_tiled_cpu program) while stages 01-03 keep the default (no FMA).
#include "experiment.hpp"
#include "tiled.hpp"

namespace numx {

void tiled_forward(const fa::AttnProblem& p, const float* Q, const float* K, const float* V,
                   float* O, float* LSE, int64_t Br, int64_t Bc) {
  tiled::Blocks blk;
  blk.Br = Br;
  blk.Bc = Bc;
  blk.threads = 1;  // one thread: the experiment shares the machine; results do not depend on it
  tiled::forward<float>(p, Q, K, V, O, LSE, blk);
}

}  // namespace numx
