// doctest's main() for GPU test programs: without a usable GPU it prints why and exits with
// code 77, which ctest reports as "Skipped" (SKIP_RETURN_CODE, cmake/FaStage.cmake), so a CPU
// machine (CI) never counts GPU tests as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "gpu.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (!fa::gpu_available(&why)) {
    std::printf("SKIPPED: no usable CUDA GPU (%s)\n", why.c_str());
    return 77;
  }
  std::printf("GPU: %s\n", fa::gpu_description().c_str());
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
