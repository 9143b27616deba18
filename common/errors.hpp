// Bad input is reported as one line: which argument, what was expected, what was found.
// Stage programs catch InputError in main(), print what() to stderr and exit with code 2.
#pragma once
#include <stdexcept>
#include <string>

namespace fa {

struct InputError : std::runtime_error {
  // what() reads: "<arg>: expected <expected>, found <found>"
  InputError(const std::string& arg, const std::string& expected, const std::string& found)
      : std::runtime_error(arg + ": expected " + expected + ", found " + found) {}
};

// Exit code for bad input, shared by every program (README.md, "Every program takes the same flags").
inline constexpr int kExitBadInput = 2;

}  // namespace fa
