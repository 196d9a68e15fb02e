#!/usr/bin/env bash
# CUDA IPC between two processes of one server (test_ipc.c), and a process of
# another server refused: its session is not of the same tenant, which the
# exporting session's log says.
# usage: run_ipc.sh SERVER_BIN LIB_DIR TEST_BIN
set -u
server=$1 libdir=$2 test=$3
. "$(dirname "$0")/run_lib.sh"
"$server" --backend host --listen "unix:$tmp/a.sock" > "$tmp/a.log" 2>&1 & pids+=($!)
"$server" --backend host --listen "unix:$tmp/b.sock" > "$tmp/b.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/a.sock" ] && [ -S "$tmp/b.sock" ] && break; sleep 0.1; done
rc=0
FLYT_SERVER="unix:$tmp/a.sock" FLYT_OTHER_SERVER="unix:$tmp/b.sock" LD_LIBRARY_PATH=$libdir \
  timeout 60 "$test" > "$tmp/out" 2>&1 || { echo "FAIL: test_ipc failed"; rc=1; }
cat "$tmp/out"
grep -q "not a session of the same tenant, refused" "$tmp/a.log" ||
  { echo "FAIL: the exporting session did not refuse the other server's session"; rc=1; }
if grep "killed by signal" "$tmp/a.log" "$tmp/b.log"; then echo "FAIL: a session crashed"; rc=1; fi
[ $rc = 0 ] || { echo "--- server a"; cat "$tmp/a.log"; echo "--- server b"; cat "$tmp/b.log"; }
exit $rc
