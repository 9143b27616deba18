// Bad input is reported as one line: which argument, what was expected, what was found.
// Stage programs catch InputError in main(), print what() to stderr and exit with code 2.
#pragma once
#include <cstdio>
#include <stdexcept>
#include <string>

namespace fa {

struct InputError : std::runtime_error {
  // what() reads: "<arg>: expected <expected>, found <found>"
  InputError(const std::string& arg, const std::string& expected, const std::string& found)
      : std::runtime_error(arg + ": expected " + expected + ", found " + found) {}
};

// A message as one line, always: control characters (a newline in a file name...) are shown
// escaped as \xNN, and past max_len characters it is cut with "...". Used for every message
// a program prints and every message the C library (05_cuda_tiled/fa05.h) returns.
inline std::string one_line(const std::string& s, size_t max_len = std::string::npos) {
  std::string r;
  for (unsigned char c : s) {
    if (r.size() >= max_len) return r + "...";
    if (c >= 0x20 && c != 0x7f) {
      r += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      r += buf;
    }
  }
  return r;
}

// Exit code for bad input, shared by every program (README.md, "Every program takes the same flags").
inline constexpr int kExitBadInput = 2;

}  // namespace fa
