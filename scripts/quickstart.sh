#!/usr/bin/env bash
# Flyt's main job on one machine, with the built-in defaults: build Flyt,
# start the cluster manager (SQLite), a node manager and a client manager,
# and run a CUDA program through them, saying what it did (flyt-local.sh).
# usage: scripts/quickstart.sh [BUILD_DIR [PROGRAM...]]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
[ $# -gt 0 ] && shift
say() { printf '\n==> %s\n' "$*"; }

say "installing build dependencies (Debian packages)"
bash "$root/scripts/install-deps.sh"

say "building Flyt in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$build.build.log" 2>&1 || { tail -40 "$build.build.log"; exit 1; }
echo "built: $build/bin/flyt-server, $build/bin/flyt-run, $build/lib/libcuda.so.1 (Flyt's client: the CUDA driver library)"

say "starting a one-machine Flyt cluster (scripts/flyt-local.sh)"
exec bash "$root/scripts/flyt-local.sh" "$build" "$@"
