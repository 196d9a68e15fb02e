#!/usr/bin/env bash
# Installs the Debian packages Flyt's build and tests need. Idempotent.
# The CUDA 13 toolkit (headers, nvcc) is expected at /usr/local/cuda and is
# not installed here.
set -euo pipefail
packages=(build-essential cmake pkg-config libssl-dev iproute2 procps
          libmicrohttpd-dev libjansson-dev libcurl4-openssl-dev libsqlite3-dev libpq-dev
          postgresql clang openssl)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
