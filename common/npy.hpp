// NumPy .npy files: float32, C order, little-endian, format versions 1.0-3.0.
// Spec: https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
// Debian ships no maintained C++ .npy library, so this is a small reader that accepts exactly what
// the course needs and rejects everything else with an InputError naming the file.
#pragma once
#include <string>

#include "tensor.hpp"

namespace fa {

// Read a float32 C-order .npy file. `arg` names the flag it came from (for the error message).
// Throws InputError if the file cannot be opened, is not .npy, is not '<f4', is Fortran order,
// or is truncated.
Tensor read_npy(const std::string& path, const std::string& arg);

// Write x as a float32 C-order .npy (format 1.0). Writes to "<path>.tmp" and renames it into place,
// so a failure never leaves a partial file at `path`. Throws InputError if the file cannot be
// written.
void write_npy(const std::string& path, const Tensor& x, const std::string& arg);

}  // namespace fa
