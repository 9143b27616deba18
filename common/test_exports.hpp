// For the C ABI tests (04, 05, 06): the dynamic symbols a shared library defines, so a test can
// check that libfa0N.so exports its fa0N_* functions and nothing else (no C++ template instances
// of the standard library). Test plumbing, written once here.
#pragma once
#include <link.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace fa::test {

// The path of the shared library whose file name contains `name` ("libfa04.so"), as the dynamic
// linker loaded it into this process; "" if none is loaded.
inline std::string loaded_library(const std::string& name) {
  struct Find {
    const std::string* name;
    std::string path;
  } f{&name, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        auto* f = static_cast<Find*>(out);
        const std::string lib = info->dlpi_name ? info->dlpi_name : "";
        if (lib.find(*f->name) == std::string::npos) return 0;
        f->path = lib;
        return 1;
      },
      &f);
  return f.path;
}

// The names `nm -D --defined-only` lists for the library at `path`. Throws std::runtime_error if
// nm cannot run or fails.
inline std::vector<std::string> defined_symbols(const std::string& path) {
  FILE* nm = popen(("nm -D --defined-only '" + path + "'").c_str(), "r");
  if (!nm) throw std::runtime_error("nm: could not start it");
  std::vector<std::string> out;
  char line[512];
  while (std::fgets(line, sizeof line, nm)) {
    std::string s(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    out.push_back(s.substr(s.find_last_of(' ') + 1));
  }
  if (pclose(nm) != 0) throw std::runtime_error("nm -D --defined-only " + path + ": failed");
  return out;
}

}  // namespace fa::test
