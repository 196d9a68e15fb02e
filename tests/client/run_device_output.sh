#!/usr/bin/env bash
# The driver's output reaches the application (docs/device-output.md): a
# host-backend server "prints" at its print points (FLYT_HOST_BACKEND_PRINTF,
# src/server/backend_host_print.c) and test_device_output's stdout and stderr
# must be exactly the program's own lines and the device's, in order, over a
# Unix socket and TCP, to a file and to a pipe; none of it in the server log.
# usage: run_device_output.sh SERVER_BIN LIB_DIR TEST_BIN
set -u
server=$1 libdir=$2 test=$3
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT

big_lines=16384 # 1 MiB
export FLYT_HOST_BACKEND_PRINTF="out:device one,out:device two;;err:device complains,out:device three;big:$big_lines;out:device before the host function;;out:device at exit"
{
  echo "host: start"; echo "device one"; echo "device two"
  echo "host: after sync 1"; echo "host: after sync 2"; echo "device three"
  echo "host: after sync 3"
  awk -v n=$big_lines 'BEGIN { for (i = 0; i < n; i++)
    printf "device line %07d xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", i }'
  echo "host: after the big one"; echo "device before the host function"; echo "host function"
  echo "host: after the host function"; echo "host: last line"; echo "device at exit"
} > "$tmp/want.out"
echo "device complains" > "$tmp/want.err"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$server" --backend host --listen "unix:$tmp/s.sock" > "$tmp/server.log" 2>&1 & pids+=($!)
"$server" --backend host --listen "tcp://127.0.0.1:$port" >> "$tmp/server.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do
  [ -S "$tmp/s.sock" ] && (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
  sleep 0.1
done

rc=0
compare() { # what, got, want
  if cmp -s "$2" "$3"; then echo "ok: $1"
  else echo "FAIL: $1"; diff "$3" "$2" | head -20; rc=1; fi
}
for addr in "unix:$tmp/s.sock" "tcp://127.0.0.1:$port"; do
  FLYT_SERVER=$addr LD_LIBRARY_PATH=$libdir timeout 60 "$test" > "$tmp/got.out" 2> "$tmp/got.err"
  echo "exit status $?" > "$tmp/status"
  compare "exit status over $addr" "$tmp/status" <(echo "exit status 0")
  compare "stdout to a file over $addr" "$tmp/got.out" "$tmp/want.out"
  compare "stderr over $addr" "$tmp/got.err" "$tmp/want.err"
  FLYT_SERVER=$addr LD_LIBRARY_PATH=$libdir timeout 60 "$test" 2>/dev/null | cat > "$tmp/got.out"
  compare "stdout to a pipe over $addr" "$tmp/got.out" "$tmp/want.out"
done

if grep -q "device" "$tmp/server.log"; then
  echo "FAIL: the device's output reached the server log:"; grep "device" "$tmp/server.log" | head; rc=1
fi
grep -q "session for" "$tmp/server.log" || { echo "FAIL: the server log lost its session lines"; rc=1; }
[ $rc -eq 0 ] && echo "PASS" || cat "$tmp/server.log"
exit $rc
