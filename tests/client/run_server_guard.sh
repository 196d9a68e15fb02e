#!/usr/bin/env bash
# A server whose library path finds Flyt's libcuda.so.1 instead of NVIDIA's
# driver refuses the session with a reason, rather than talking to itself.
# usage: run_server_guard.sh SERVER_BIN LIB_DIR(S) NOSERVER_BIN FLYT_LIB_DIR
set -u
server=$1 libpath=$2 noserver=$3 flytlib=$4
tmp=$(mktemp -d)
LD_LIBRARY_PATH=$flytlib "$server" --backend cuda --listen "unix:$tmp/s.sock" > "$tmp/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -S "$tmp/s.sock" ] && break; sleep 0.05; done
rc=0
FLYT_SERVER=unix:$tmp/s.sock LD_LIBRARY_PATH=$libpath timeout 30 "$noserver" > "$tmp/client.out" 2>&1 \
  && echo "ok: the program sees no device" || { echo "FAIL: the program saw a device"; cat "$tmp/client.out"; rc=1; }
if grep -q "is Flyt's client library, not NVIDIA's driver" "$tmp/server.log"; then
  echo "ok: the server says why: $(grep -o "[^ ]*libcuda.so.1 is Flyt's client library[^:]*" "$tmp/server.log" | head -1)"
else
  echo "FAIL: the server did not say it loaded Flyt's own library"; cat "$tmp/server.log"; rc=1
fi
exit $rc
