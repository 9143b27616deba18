// libFuzzer target for the .npy reader (common/npy.cpp), built by scripts/fuzz.sh with clang,
// AddressSanitizer and UndefinedBehaviorSanitizer. Every input is written to a file and read as
// a .npy: the reader must either return a tensor whose size matches its shape or throw
// fa::InputError (one line for the user). A crash, a sanitizer report, a leak or any other
// exception is a bug; each one found becomes a test case in test_common.cpp.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "errors.hpp"
#include "npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/fa_fuzz_npy_" + std::to_string(getpid()) + ".npy";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    const fa::Tensor t = fa::read_npy(path, "--q");
    int64_t n = 1;
    for (int64_t e : t.shape) n *= e;
    if (n != t.numel()) std::abort();  // a tensor that does not hold what its shape says
  } catch (const fa::InputError&) {
    // refused with a message: the expected outcome for malformed input
  }
  return 0;
}
