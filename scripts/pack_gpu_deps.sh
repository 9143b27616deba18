#!/usr/bin/env bash
# Packs what the GPU machine lacks into .gpu_deps/ (ignored by git), to travel with the tree:
# the GPU machine has nvcc, CMake, ninja, g++, doctest, Google Benchmark, nlohmann-json and
# PyTorch, and no internet; of this project's dependencies it lacks CLI11 (header-only), whose
# headers and CMake package are copied from this machine's Debian package (libcli11-dev).
# scripts/gpu_check.sh configures with CMAKE_PREFIX_PATH=.gpu_deps.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
rm -rf .gpu_deps
mkdir -p .gpu_deps/include .gpu_deps/share/cmake
cp -r /usr/include/CLI .gpu_deps/include/
cp -r /usr/share/cmake/CLI11 .gpu_deps/share/cmake/
echo "pack_gpu_deps: .gpu_deps/ ($(du -sh .gpu_deps | cut -f1)): CLI11 $(grep -o 'CLI11_VERSION "[^"]*"' .gpu_deps/include/CLI/Version.hpp | cut -d'"' -f2)"
