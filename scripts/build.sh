#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds with the default preset
# (Release, Ninja, build/). Extra arguments go to the configure step; FA_WERROR=ON in the
# environment makes every compiler warning an error (.ci/run sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake --preset default ${FA_WERROR:+-DFA_WERROR=$FA_WERROR} "$@" >/dev/null
cmake --build --preset default
