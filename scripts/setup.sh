#!/usr/bin/env bash
# Installs the Debian packages the course builds with, if any are missing.
# As root it runs apt-get itself; otherwise it prints the exact command and stops (exit 1).
#   scripts/setup.sh [PACKAGE...]   also these (.ci/run adds ccache)
set -euo pipefail
pkgs=(cmake ninja-build g++ make pkg-config
      doctest-dev libcli11-dev libbenchmark-dev nlohmann-json3-dev libopenblas-dev "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing Debian packages: ${missing[*]}" >&2
  echo "setup: run as root:  sudo sh -c '$cmd'" >&2
  exit 1
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
