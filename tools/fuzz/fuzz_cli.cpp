// libFuzzer target for the command line every stage program shares (common/cli.cpp), built by
// scripts/fuzz.sh with clang, AddressSanitizer and UndefinedBehaviorSanitizer. The input, split at
// newlines, is the argument list of a program with a backward (the most flags): it is parsed with
// the common flags, then checked as a program checks it before any input is made (the problem and
// its scale from the shape flags, the KV cache flags, the packed-batch flags, the dtype). Each step must either succeed or end in CLI11's
// ParseError or fa::InputError, the two a program turns into one line and exit code 2. A crash, a
// sanitizer report, a leak or any other exception is a bug; each one found becomes a test case.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli.hpp"
#include "errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;  // CLI11 takes them last first
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      args.push_back(cur);
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  args.push_back(cur);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  CLI::App app{"fuzz"};
  fa::CliFlags f;
  fa::add_common_flags(app, f, /*backward=*/true);
  try {
    app.parse(reversed);
    if (const auto p = fa::problem_from_flags(f)) fa::validate(*p);
    fa::check_cache_flags(f);  // --cache-lens' list parser, the page size, the table against the problem
    fa::check_varlen_flags(f);  // both offsets files or neither, their checks, --batch against them
    fa::check_dtype(f, f.dtype == "bf16" || f.dtype == "fp16" ? f.dtype : "fp32");
  } catch (const CLI::ParseError&) {
    // CLI11 refuses it (unknown flag, missing value, not a number): a one-line error
  } catch (const fa::InputError&) {
    // our checks refuse it: a one-line error naming the flag
  }
  return 0;
}
