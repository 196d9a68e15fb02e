#!/usr/bin/env bash
# On the GPU machine: the elastic share (green contexts, with and without MPS),
# the node manager on the real GPU, and every GPU test program through a
# one-machine cluster compared with native. Logs under $OUT; summary last.
# usage: scripts/gpu-cluster-run.sh BUILD_DIR
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
bundle=$build/bundle
part() { # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.txt" 2>&1; local rc=$?
  echo "$name|$rc|$(( SECONDS - t0 ))s" >> "$OUT/parts.txt"
}
: > "$OUT/parts.txt"
part share_check 150 env OUT="$OUT/share" bash "$root/tests/gpu/share_check.sh" "$build"
part share_check_mps 150 env OUT="$OUT/share-mps" SHARE_MPS=1 bash "$root/tests/gpu/share_check.sh" "$build"
part node_check 150 env OUT="$OUT/node" LD_LIBRARY_PATH="$bundle" bash "$root/tests/gpu/node_check.sh" "$build"
part node_check_mps 150 env OUT="$OUT/node-mps" NODE_CHECK_MPS=1 LD_LIBRARY_PATH="$bundle" \
    bash "$root/tests/gpu/node_check.sh" "$build"
progs=()
for p in "$build"/gpu-tests/*; do [ -x "$p" ] && [ "$(basename "$p")" != share_check ] && progs+=("$p"); done
part cluster 300 env FLYT_CUDA_LIBS="$(bash "$root/tests/gpu/nvidia-libs.sh")" \
    bash "$root/scripts/flyt-local.sh" "$build" "${progs[@]}"
for f in share_check share_check_mps node_check node_check_mps; do
  echo "===== $f"; grep -E "^node_check|FAIL|fail" "$OUT/$f.txt" | tail -n 40 || tail -n 25 "$OUT/$f.txt"
done
echo "===== all GPU test programs through a one-machine cluster"
tail -n 22 "$OUT/cluster.txt"
echo "===== parts (name|rc|time)"
cat "$OUT/parts.txt"
