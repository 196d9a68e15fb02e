#!/usr/bin/env bash
# What NVIDIA's libraries ship to the server as kernel images, and that a
# server's image cache (--cache-dir) keeps later sessions from shipping them
# again: cublas_gemm natively, then through Flyt without a cache, with a cold
# cache, the same cache warm, and a new server on the warm cache. Over TCP
# (loopback): on one machine images always go unhashed (docs/protocol.md).
# usage: tests/gpu/module_cache_check.sh BUILD_DIR   (logs under $OUT)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd)
out=${OUT:-$(mktemp -d)}/module-cache
mkdir -p "$out"
prog=$build/gpu-tests/cublas_gemm
nv=$(bash "$root/tests/gpu/nvidia-libs.sh")
port=${FLYT_CACHE_CHECK_PORT:-47460}
now() { date +%s.%N; }
server_pid=
log=
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%6.2f", b - a }'; }
start() { # cache dir or "" (no cache)
  log=$out/server.$2.log
  "$build/bin/flyt-server" --listen "tcp://127.0.0.1:$port" ${1:+--cache-dir "$1"} > "$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0; sleep 0.05; done
  echo "module_cache_check: server did not start"; exit 2
}
stop() { kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; }
run() { # label
  local t0 t1 rc
  t0=$(now)
  env LD_LIBRARY_PATH="$nv" "$build/bin/flyt-run" --server "tcp://127.0.0.1:$port" -- "$prog" > "$out/$1.out" 2>&1
  rc=$?
  t1=$(now)
  sleep 0.2 # the session's last log line
  printf '%-24s| %-3s | %s s | %s\n' "$1" "$rc" "$(elapsed "$t0" "$t1")" \
    "$(grep -o '[0-9]* kernel images received ([0-9]* bytes), [0-9]* from the cache dir' "$log" | tail -1)"
}
t0=$(now); env LD_LIBRARY_PATH="$nv" "$prog" > "$out/native.out" 2>&1; rc=$?; t1=$(now)
echo "run                     | rc  | time     | images"
printf '%-24s| %-3s | %s s | %s\n' native "$rc" "$(elapsed "$t0" "$t1")" "-"
start "" nocache;   run "no cache";            stop
rm -rf "$out/cache"; mkdir -p "$out/cache"
start "$out/cache" cold; run "cache, first session"; run "cache, second session"; stop
start "$out/cache" warm; run "new server, warm cache"; stop
echo "cache dir: $(ls "$out/cache" | wc -l) images, $(du -sh "$out/cache" | cut -f1)"
