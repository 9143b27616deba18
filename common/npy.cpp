#include "npy.hpp"

#include <cstdio>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "errors.hpp"

#include <unistd.h>

namespace fa {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

// The checks both readers make, for 4-byte elements of the dtype `descr` ("f4", "i4"; `name` for
// the message): opens `path`, reads and checks the header, and checks that the file holds exactly
// the data its shape says. Returns the shape, with f positioned at the data.
std::vector<int64_t> open_npy(std::ifstream& f, const std::string& path, const std::string& arg,
                              const std::string& descr_want, const std::string& name) {
  const std::string who = arg + " " + path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(who, "a .npy file", "a folder");
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw InputError(who, "a regular .npy file", "a device, pipe or socket");
  f.open(path, std::ios::binary);
  if (!f) throw InputError(who, "a readable .npy file", "a file that cannot be opened");
  char magic[8] = {};
  f.read(magic, 8);
  if (!f || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw InputError(who, "a .npy file (magic \\x93NUMPY)", "other bytes");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    f.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (b[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char b[4];
    f.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
  } else {
    throw InputError(who, ".npy format version 1, 2 or 3", "version " + std::to_string(major));
  }
  if (!f || header_len > (1u << 20)) throw InputError(who, "a .npy header", "a truncated file");
  std::string header(header_len, '\0');
  f.read(header.data(), header_len);
  if (!f) throw InputError(who, "a .npy header", "a truncated file");

  // The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    throw InputError(who, "a .npy header with 'descr'", "none");
  const std::string descr = m[1];
  if (descr != "<" + descr_want && descr != "=" + descr_want)
    throw InputError(who, "dtype " + name + " ('<" + descr_want + "')", "'" + descr + "'");
  if (!std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*(True|False))")))
    throw InputError(who, "a .npy header with 'fortran_order'", "none");
  if (m[1] == "True") throw InputError(who, "C order (fortran_order False)", "Fortran order");
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    throw InputError(who, "a .npy header with 'shape'", "none");
  std::vector<int64_t> shape;
  std::stringstream dims(m[1].str());
  std::string tok;
  while (std::getline(dims, tok, ',')) {
    if (tok.find_first_not_of(" \t") == std::string::npos) continue;
    const size_t a = tok.find_first_not_of(" \t"), z = tok.find_last_not_of(" \t");
    int64_t dim = -1;
    const auto [end, err] = std::from_chars(tok.data() + a, tok.data() + z + 1, dim);
    if (err != std::errc() || end != tok.data() + z + 1 || dim < 0)
      throw InputError(who, "non-negative integer dimensions in 'shape'", "'" + tok + "'");
    shape.push_back(dim);
  }
  int64_t n = 1;
  for (int64_t e : shape) {
    if (e > 0 && n > (int64_t(1) << 40) / e) throw InputError(who, "fewer than 2^40 elements", shape_str(shape));
    n *= e;
  }
  // Compare the size the header claims with the file before allocating anything.
  const std::streamoff data_start = f.tellg();
  f.seekg(0, std::ios::end);
  const std::streamoff have = f.tellg() - data_start;
  if (have != std::streamoff(n * 4))
    throw InputError(who, std::to_string(n * 4) + " bytes of data for shape " + shape_str(shape),
                     std::to_string(have) + " bytes");
  f.seekg(data_start);
  return shape;
}

// n 4-byte elements from f into dst.
void read_data(std::ifstream& f, void* dst, int64_t n, const std::string& who) {
  f.read(static_cast<char*>(dst), std::streamsize(n * 4));
  if (f.gcount() != std::streamsize(n * 4)) throw InputError(who, "a readable .npy file", "a read error");
}

}  // namespace

Tensor read_npy(const std::string& path, const std::string& arg) {
  std::ifstream f;
  Tensor x;
  x.shape = open_npy(f, path, arg, "f4", "float32");
  int64_t n = 1;
  for (int64_t e : x.shape) n *= e;
  x.data.resize(size_t(n));
  read_data(f, x.data.data(), n, arg + " " + path);
  return x;
}

std::vector<int32_t> read_npy_i32(const std::string& path, const std::string& arg, std::vector<int64_t>& shape) {
  std::ifstream f;
  shape = open_npy(f, path, arg, "i4", "int32");
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  std::vector<int32_t> x(static_cast<size_t>(n));
  read_data(f, x.data(), n, arg + " " + path);
  return x;
}



namespace {

// Writes a C-order .npy of `shape` holding n elements of 4 bytes at `data` (descr '<f4' or '<i4')
// to `tmp`. Throws InputError (naming `arg` and `path`) on any failure.
void write_npy_raw(const std::string& tmp, const std::string& path, const std::vector<int64_t>& dims,
                   const char* descr, const void* data, int64_t n, const std::string& arg) {
  std::string shape = "(";
  for (size_t i = 0; i < dims.size(); ++i) shape += std::to_string(dims[i]) + ", ";
  if (dims.size() > 1) shape.resize(shape.size() - 2);
  else if (dims.size() == 1) shape.resize(shape.size() - 1);  // "(5,)" for rank 1
  shape += ")";
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad so magic(6) + version(2) + length(2) + header + '\n' is a multiple of 64 (the spec's rule).
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  if (!f) throw InputError(arg + " " + path, "a writable path", "one that cannot be opened");
  const unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                 static_cast<unsigned char>(header.size() & 0xff),
                                 static_cast<unsigned char>(header.size() >> 8)};
  f.write(reinterpret_cast<const char*>(pre), 10);
  f.write(header.data(), std::streamsize(header.size()));
  f.write(static_cast<const char*>(data), std::streamsize(n * 4));
  f.close();
  if (!f) throw InputError(arg + " " + path, "a writable path", "a write error");
}

void write_npy_to(const std::string& tmp, const std::string& path, const Tensor& x, const std::string& arg) {
  write_npy_raw(tmp, path, x.shape, "<f4", x.data.data(), int64_t(x.data.size()), arg);
}

}  // namespace

void write_npy_all(const std::vector<NpyOut>& outs) {
  // A temporary name per process, so two runs writing the same output do not collide.
  const std::string suffix = ".tmp" + std::to_string(getpid());
  try {
    for (const NpyOut& o : outs) write_npy_to(o.path + suffix, o.path, *o.x, o.arg);
  } catch (...) {
    for (const NpyOut& o : outs) std::remove((o.path + suffix).c_str());
    throw;
  }
  for (size_t i = 0; i < outs.size(); ++i)
    if (std::rename((outs[i].path + suffix).c_str(), outs[i].path.c_str()) != 0) {
      for (size_t j = 0; j < outs.size(); ++j)  // undo: no output file is left behind
        std::remove((j < i ? outs[j].path : outs[j].path + suffix).c_str());
      throw InputError(outs[i].arg + " " + outs[i].path, "a writable path", "a rename error");
    }
}

void write_npy(const std::string& path, const Tensor& x, const std::string& arg) {
  write_npy_all({{path, &x, arg}});
}

void write_npy_i32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<int32_t>& x,
                   const std::string& arg) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  if (n != int64_t(x.size()))
    throw InputError(arg + " " + path, std::to_string(n) + " elements (the shape's)", std::to_string(x.size()));
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  try {
    write_npy_raw(tmp, path, shape, "<i4", x.data(), n, arg);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw InputError(arg + " " + path, "a writable path", "a rename error");
  }
}

}  // namespace fa
