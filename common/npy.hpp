// NumPy .npy files: float32, C order, little-endian, format versions 1.0-3.0.
// Spec: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
// Debian ships no maintained C++ .npy library, so this is a small reader that accepts exactly what
// the course needs and rejects everything else with an InputError naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace fa {

// Read a float32 C-order .npy file. `arg` names the flag it came from (for the error message).
// Throws InputError if the file cannot be opened or is a folder, is not .npy, is not '<f4', is
// Fortran order, or holds more or fewer data bytes than its shape says (checked before
// allocating, so a forged header cannot make it allocate memory the file does not back).
Tensor read_npy(const std::string& path, const std::string& arg);

// The same for an int32 .npy ('<i4': KV cache lengths and block tables): its elements, and its
// shape in `shape`. As strict as read_npy (a float32 file is refused, not converted).
std::vector<int32_t> read_npy_i32(const std::string& path, const std::string& arg, std::vector<int64_t>& shape);

// One output file: where, what, and the flag that named it (for error messages).
struct NpyOut {
  std::string path;
  const Tensor* x;
  std::string arg;
};

// Write every x as a float32 C-order .npy (format 1.0), all or nothing: each goes to
// "<path>.tmp<pid>" first, and only when all of them are written are they renamed into place.
// A failure removes the temporaries and leaves no file at any `path`. Throws InputError.
void write_npy_all(const std::vector<NpyOut>& outs);
// The same for one file.
void write_npy(const std::string& path, const Tensor& x, const std::string& arg);
// An int32 C-order .npy ('<i4', as read_npy_i32 reads: offsets, lengths, block tables) of `shape`
// holding x (its size the shape's product), written through a temporary as above. Throws
// InputError.
void write_npy_i32(const std::string& path, const std::vector<int64_t>& shape, const std::vector<int32_t>& x,
                   const std::string& arg);

}  // namespace fa
