#!/usr/bin/env bash
# Builds Flyt and runs every test that needs no GPU, in two configurations:
# a plain build and a build with AddressSanitizer and UBSan.
# usage: scripts/test.sh [--quick]   (--quick: plain build only)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
run_config() { # name, extra cmake args...
  local name=$1; shift
  local dir="$root/build-$name"
  echo "=== $name build"
  cmake -S "$root" -B "$dir" -DFLYT_GPU_PROGRAMS=OFF "$@" > "$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j "$jobs" 2>&1 | grep -vE '^\[ *[0-9]+%\]' || true
  cmake --build "$dir" -j "$jobs" > /dev/null
  (cd "$dir" && ctest --output-on-failure --timeout 600)
}
run_config plain -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${1:-}" != "--quick" ]; then
  ASAN_OPTIONS=detect_leaks=1 run_config sanitize -DCMAKE_BUILD_TYPE=Debug -DFLYT_SANITIZE=address,undefined
fi
