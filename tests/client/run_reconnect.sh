#!/usr/bin/env bash
# A session moved under a running program (tests/client/test_reconnect.c):
# over a Unix socket and over TCP, the program has its session checkpointed
# with FLYT_CKPT_STOP; this script waits for the state file, stops that
# server, and after a pause starts flyt-server --restore on the same
# endpoints, where the program carries on. Then the deadline: no server
# comes back, and the program gets an error and a line on stderr; and with
# FLYT_RESUME=0 the move is a lost server at once. The program's pinned host
# memory, shared with the server over the Unix socket, is shared again with
# the restored one (HOST_REMAP); restored on a server reached over TCP only,
# it cannot be, which the client says once, and copies through it fail.
# usage: run_reconnect.sh SERVER_BIN LIB_DIR TEST_BIN [BACKEND]
# (BACKEND: host by default, as in CI; cuda on a GPU machine)
set -u
server=$1 libdir=$2 test=$3 backend=${4:-host}
. "$(dirname "$0")/run_lib.sh"

wait_for() { # $1 = a path that appears
  for _ in $(seq 200); do [ -e "$1" ] && return 0; sleep 0.1; done
  echo "FAIL: $1 did not appear"; return 1
}

start_server() { # $1 = log, then extra arguments; sets srv
  local log=$1; shift
  "$server" --backend "$backend" --listen "unix:$tmp/s.sock" "$@" > "$log" 2>&1 & srv=$!
  pids+=($srv)
  wait_for "$tmp/s.sock" || { cat "$log"; return 1; }
}

rc=0
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/key"; echo >> "$tmp/key"
chmod 600 "$tmp/key"
managed=(--session-id tenant-7 --session-key-file "$tmp/key")
for kind in unix managed tcp; do
  echo "== a session moved: $kind"
  rm -f "$tmp/s.sock" "$tmp/$kind.state"
  extra=(); [ $kind = managed ] && extra=("${managed[@]}")
  start_server "$tmp/$kind-1.log" --listen "tcp://127.0.0.1:0" --status-file "$tmp/status" "${extra[@]}" || exit 1
  port=$(tcp_port_of "$tmp/$kind-1.log") || { echo "FAIL: no TCP port"; cat "$tmp/$kind-1.log"; exit 1; }
  addr="unix:$tmp/s.sock"; [ $kind = tcp ] && addr="tcp://127.0.0.1:$port"
  # managed (a session token, presented again at the reconnect) over a Unix
# socket; over TCP with a small replay buffer: the client waits for room (PING) often
  replay=""; [ $kind = tcp ] && replay=16384
  [ $kind = managed ] && export FLYT_TEST_SESSION_KEY=$tmp/key FLYT_TEST_SESSION_ID=tenant-7
  FLYT_REPLAY_BYTES=$replay FLYT_TRACE=1 FLYT_SERVER=$addr FLYT_TEST_STATUS=$tmp/status FLYT_TEST_STATE=$tmp/$kind.state \
    LD_LIBRARY_PATH=$libdir timeout 120 "$test" resume > "$tmp/$kind.out" 2> "$tmp/$kind.err" & prog=$!
  wait_for "$tmp/$kind.state" || { cat "$tmp/$kind.out" "$tmp/$kind.err" "$tmp/$kind-1.log"; exit 1; }
  sleep 0.5
  kill "$srv"; wait "$srv" 2>/dev/null
  sleep 1 # the program is blocked meanwhile, retrying
  start_server "$tmp/$kind-2.log" --listen "tcp://127.0.0.1:$port" --restore "$tmp/$kind.state" "${extra[@]}" || exit 1
  unset FLYT_TEST_SESSION_KEY FLYT_TEST_SESSION_ID
  if wait $prog; then grep "resumed at" "$tmp/$kind.err"; tail -1 "$tmp/$kind.out"
  else cat "$tmp/$kind.out" "$tmp/$kind.err"; rc=1; fi
  grep -q "moved at request byte" "$tmp/$kind-1.log" || { echo "FAIL: no move notice"; cat "$tmp/$kind-1.log"; rc=1; }
  grep -q "reconnects to resume" "$tmp/$kind-2.log" && grep -q "restored:" "$tmp/$kind-2.log" ||
    { echo "FAIL: the restored server did not serve the resumed session"; cat "$tmp/$kind-2.log"; rc=1; }
  if [ $kind != tcp ]; then
    n=$(grep -c "shared again, device-mapped" "$tmp/$kind-2.log")
    [ "$n" = 2 ] || { echo "FAIL: $n of 2 pinned regions shared again"; cat "$tmp/$kind-2.log"; rc=1; }
  fi
  kill "$srv"; wait "$srv" 2>/dev/null
done

echo "== a session moved from a Unix socket to a server reached over TCP only"
rm -f "$tmp/s.sock" "$tmp/u2t.state"
start_server "$tmp/u2t-1.log" --listen "tcp://127.0.0.1:0" --status-file "$tmp/status" || exit 1
port=$(tcp_port_of "$tmp/u2t-1.log") || { echo "FAIL: no TCP port"; exit 1; }
FLYT_TEST_REGIONS=lost FLYT_SERVER="unix:$tmp/s.sock,tcp://127.0.0.1:$port" FLYT_TEST_STATUS=$tmp/status \
  FLYT_TEST_STATE=$tmp/u2t.state LD_LIBRARY_PATH=$libdir timeout 120 "$test" resume \
  > "$tmp/u2t.out" 2> "$tmp/u2t.err" & prog=$!
wait_for "$tmp/u2t.state" || { cat "$tmp/u2t.out" "$tmp/u2t.err" "$tmp/u2t-1.log"; exit 1; }
sleep 0.5
kill "$srv"; wait "$srv" 2>/dev/null
rm -f "$tmp/s.sock"
"$server" --backend "$backend" --listen "tcp://127.0.0.1:$port" --restore "$tmp/u2t.state" \
  > "$tmp/u2t-2.log" 2>&1 & srv=$!
pids+=($srv)
if wait $prog; then tail -1 "$tmp/u2t.out"; else cat "$tmp/u2t.out" "$tmp/u2t.err"; rc=1; fi
n=$(grep -c "cannot be shared again" "$tmp/u2t.err")
[ "$n" = 1 ] || { echo "FAIL: the client said $n times that its regions are lost"; cat "$tmp/u2t.err"; rc=1; }
grep -q "is not shared with this server" "$tmp/u2t-2.log" ||
  { echo "FAIL: the restored server did not log the refused copy"; cat "$tmp/u2t-2.log"; rc=1; }
kill "$srv"; wait "$srv" 2>/dev/null

# lost NAME ENV LINE: the session moved and nobody resumed it: the program
# (run with ENV, e.g. "VAR=VALUE VAR2=VALUE") gets an error, and LINE on stderr
lost() {
  local name=$1 env=$2 line=$3
  rm -f "$tmp/s.sock"
  start_server "$tmp/$name.log" --status-file "$tmp/status" || exit 1
  env $env FLYT_SERVER="unix:$tmp/s.sock" FLYT_TEST_STATUS=$tmp/status \
    FLYT_TEST_STATE=$tmp/$name.state LD_LIBRARY_PATH=$libdir timeout 60 "$test" deadline \
    > "$tmp/$name.out" 2> "$tmp/$name.err" || { cat "$tmp/$name.out" "$tmp/$name.err"; rc=1; }
  tail -1 "$tmp/$name.out"
  grep -q "$line" "$tmp/$name.err" || { echo "FAIL: no line on stderr: $line"; cat "$tmp/$name.err"; rc=1; }
  kill "$srv"; wait "$srv" 2>/dev/null
}

echo "== a suspended (preempted) session waits past FLYT_RECONNECT_TIMEOUT_S for its restore"
rm -f "$tmp/s.sock" "$tmp/susp.state"
start_server "$tmp/susp-1.log" --status-file "$tmp/status" || exit 1
FLYT_TEST_SUSPEND=1 FLYT_RECONNECT_TIMEOUT_S=1 FLYT_SERVER="unix:$tmp/s.sock" FLYT_TEST_STATUS=$tmp/status \
  FLYT_TEST_STATE=$tmp/susp.state LD_LIBRARY_PATH=$libdir timeout 120 "$test" resume \
  > "$tmp/susp.out" 2> "$tmp/susp.err" & prog=$!
wait_for "$tmp/susp.state" || { cat "$tmp/susp.out" "$tmp/susp.err" "$tmp/susp-1.log"; exit 1; }
sleep 0.5
kill "$srv"; wait "$srv" 2>/dev/null
sleep 3 # past FLYT_RECONNECT_TIMEOUT_S: a moved session would have failed by now
start_server "$tmp/susp-2.log" --restore "$tmp/susp.state" || exit 1
if wait $prog; then tail -1 "$tmp/susp.out"; else cat "$tmp/susp.out" "$tmp/susp.err"; rc=1; fi
grep -q "is suspended (preempted) at request byte" "$tmp/susp-1.log" ||
  { echo "FAIL: the server did not tell the client it is suspended"; cat "$tmp/susp-1.log"; rc=1; }
grep -q "the session is suspended (preempted)" "$tmp/susp.err" ||
  { echo "FAIL: the client did not say it waits for the restore"; cat "$tmp/susp.err"; rc=1; }
kill "$srv"; wait "$srv" 2>/dev/null

echo "== no server comes back: the deadline"
lost deadline FLYT_RECONNECT_TIMEOUT_S=2 "not resumed within 2 s (FLYT_RECONNECT_TIMEOUT_S)"
echo "== a suspended session with a limit (FLYT_SUSPEND_TIMEOUT_S) that nobody restores"
lost suspend-limit "FLYT_TEST_SUSPEND=1 FLYT_SUSPEND_TIMEOUT_S=2" "not resumed within 2 s (FLYT_SUSPEND_TIMEOUT_S)"
echo "== FLYT_RESUME=0: a move is a lost server, said at once"
lost noresume FLYT_RESUME=0 "FLYT_RESUME=0 says not to follow it"
exit $rc
