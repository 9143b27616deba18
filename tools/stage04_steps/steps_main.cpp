// The timing harness of tools/stage04_steps.py: one build of stage 04 (tiled.hpp and
// microkernel.hpp from the include path the script chooses), run on B = 1, H = 8 random inputs.
//   steps_main N d causal threads BrxBc...   ->  one line per block shape: "Br Bc seconds"
// Each call runs every block shape twice, timing the second; the script calls the builds in turn, many times, and
// keeps each one's best time (so that another process's moment on the CPU cannot decide a step).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "harness.hpp"
#include "tiled.hpp"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: steps_main N d causal threads BrxBc...\n");
    return 2;
  }
  const int64_t N = std::atoll(argv[1]), d = std::atoll(argv[2]);
  const fa::AttnProblem p = fa::make_problem(1, 8, 8, N, N, d, std::atoi(argv[3]) != 0);
  const fa::Inputs in = fa::random_inputs(p, 1);
  std::vector<float> O(size_t(p.q_elems())), L(size_t(p.lse_elems()));
  for (int i = 5; i < argc; ++i) {
    tiled::Blocks b;
    if (std::sscanf(argv[i], "%ldx%ld", &b.Br, &b.Bc) != 2) return 2;
    b.threads = std::atoi(argv[4]);
    // An untimed call first: the OpenMP threads are started, the pages of O and of the block
    // buffers touched, before the timed one.
    tiled::forward<float>(p, in.Q.data.data(), in.K.data.data(), in.V.data.data(), O.data(), L.data(), b);
    const auto t0 = std::chrono::steady_clock::now();
    tiled::forward<float>(p, in.Q.data.data(), in.K.data.data(), in.V.data.data(), O.data(), L.data(), b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%ld %ld %.6f\n", b.Br, b.Bc, s);
  }
  return 0;
}
