#!/usr/bin/env bash
# Flyt's main job on one machine, with the built-in defaults: build Flyt,
# start a flyt-server, and run a CUDA program through it, saying what it did.
# usage: scripts/quickstart.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
say() { printf '\n==> %s\n' "$*"; }

say "installing build dependencies (Debian packages)"
bash "$root/scripts/install-deps.sh"

say "building Flyt in $build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" > "$build.build.log" 2>&1 || { tail -40 "$build.build.log"; exit 1; }
echo "built: $build/bin/flyt-server, $build/bin/flyt-run, $build/lib/libcudart.so.13"

tmp=$(mktemp -d)
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
sock="$tmp/flyt.sock"

start_server() { # backend
  "$build/bin/flyt-server" --backend "$1" --listen "unix:$sock" > "$tmp/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 50); do [ -S "$sock" ] && return 0; sleep 0.1; done
  echo "flyt-server did not start:"; cat "$tmp/server.log"; exit 1
}

if nvidia-smi -L > "$tmp/gpus" 2>/dev/null && ldconfig -p | grep -q 'libcuda.so.1 '; then
  say "GPU found: $(head -1 "$tmp/gpus")"
  prog="$build/gpu-tests/vector_add"
  [ -x "$prog" ] || { echo "$prog was not built (is nvcc at /usr/local/cuda/bin?)"; exit 1; }
  start_server cuda
  say "running $prog natively"
  LD_LIBRARY_PATH=/usr/local/cuda/lib64 "$prog" > "$tmp/native.out"
  cat "$tmp/native.out"
  say "running the same unmodified program through Flyt (flyt-run --server unix:$sock)"
  "$build/bin/flyt-run" --server "unix:$sock" -- "$prog" > "$tmp/flyt.out"
  cat "$tmp/flyt.out"
  if cmp -s "$tmp/native.out" "$tmp/flyt.out"; then
    say "identical output: the program's CUDA calls ran in flyt-server (pid $server_pid) on the GPU"
  else
    say "outputs differ"; diff "$tmp/native.out" "$tmp/flyt.out" || true; exit 1
  fi
else
  say "no GPU on this machine (no NVIDIA driver found)"
  echo "Showing the client-to-server path with the host-memory test backend instead:"
  echo "a program using the CUDA runtime (memory, copies, streams, events, callbacks) runs"
  echo "through Flyt's libcudart.so.13 against a flyt-server that keeps 'device' memory on the host."
  start_server host
  "$build/bin/flyt-run" --server "unix:$sock" -- "$build/bin/test_client_host" > "$tmp/demo.out" 2>&1 \
    || { cat "$tmp/demo.out"; exit 1; }
  echo "$(grep -c '^ok:' "$tmp/demo.out") CUDA runtime checks passed through flyt-server (pid $server_pid)."
  cat <<MSG

To use a real GPU, on a GPU node run:
    $build/bin/flyt-server --listen tcp://0.0.0.0:7000
and here:
    $build/bin/flyt-run --server tcp://GPU-NODE:7000 -- ./your_cuda_app
MSG
fi
