#!/usr/bin/env bash
# A live resize reaches a connected program (test_share_push.c): a
# host-backend server with a status page, a memory quota and an SM share,
# the test run over its Unix socket and over TCP (each run resizes it once).
# usage: run_share_push.sh SERVER_BIN LIB_DIR TEST_BIN
set -u
. "$(dirname "$0")/tcp_port.sh"
server=$1 libdir=$2 test=$3
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$tmp"; }
trap cleanup EXIT

"$server" --backend host --listen "unix:$tmp/s.sock" --listen "tcp://127.0.0.1:0" \
  --status-file "$tmp/status" --memory-quota 64MiB --sm-groups 0,1 --sm-granularity 8 \
  > "$tmp/server.log" 2>&1 & pid=$!
for _ in $(seq 100); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done
port=$(tcp_port_of "$tmp/server.log") || { echo "FAIL: the server reported no TCP port"; cat "$tmp/server.log"; exit 1; }

rc=0
for addr in "unix:$tmp/s.sock" "tcp://127.0.0.1:$port"; do
  echo "== over $addr"
  FLYT_SERVER=$addr LD_LIBRARY_PATH=$libdir timeout 60 "$test" "$tmp/status" || rc=1
done
grep -q "resized to" "$tmp/server.log" || { echo "FAIL: the server log says no resize"; rc=1; }
[ "$rc" = 0 ] || cat "$tmp/server.log"
exit $rc
