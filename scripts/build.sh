#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds with the default preset
# (Release, Ninja, build/). Extra arguments go to the configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default "$@" >/dev/null
cmake --build --preset default
