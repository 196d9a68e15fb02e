#!/usr/bin/env bash
# FLYT_PROFILE=1: one table per process that made calls, at its exit; a
# forked child that made none prints nothing (not its parent's counts).
# usage: run_profile.sh SERVER_BIN LIB_DIR TEST_BIN
set -u
server=$1 libdir=$2 test=$3
. "$(dirname "$0")/run_lib.sh"
"$server" --backend host --listen "unix:$tmp/s.sock" > "$tmp/server.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done
FLYT_PROFILE=1 FLYT_SERVER="unix:$tmp/s.sock" LD_LIBRARY_PATH=$libdir timeout 60 "$test" > "$tmp/out" 2> "$tmp/err" ||
  { echo "FAIL: the program failed"; cat "$tmp/out" "$tmp/err"; exit 1; }
parent=$(sed -n 's/^parent //p' "$tmp/out")
tables=$(grep -c "^flyt: profile of pid" "$tmp/err")
rc=0
[ "$tables" = 1 ] || { echo "FAIL: $tables profile tables, want 1"; rc=1; }
grep -q "^flyt: profile of pid $parent: [1-9][0-9]* requests" "$tmp/err" ||
  { echo "FAIL: no table of the parent ($parent) with its requests"; rc=1; }
grep -Eq "^flyt: MEM_ALLOC +1 +1 " "$tmp/err" || { echo "FAIL: MEM_ALLOC not counted once"; rc=1; }
[ $rc = 0 ] && echo "FLYT_PROFILE: one table, the parent's ($parent)" || cat "$tmp/err"
exit $rc
