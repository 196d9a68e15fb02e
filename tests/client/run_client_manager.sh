#!/usr/bin/env bash
# The client library without FLYT_SERVER: it asks the client manager (here a
# fake one speaking docs/api.md's line protocol) for its server and session
# token, and sends the token when the server asks for it. Also: every way
# that fails ends in cudaErrorNoDevice with one clear line, quickly.
# usage: run_client_manager.sh SERVER_BIN LIB_DIR TEST_HOST TEST_NOSERVER TEST_AUTH FAKE_PEERS
set -u
server=$1 libdir=$2 test_host=$3 noserver=$4 test_auth=$5 fake=$6
. "$(dirname "$0")/run_lib.sh"
rc=0
fail() { echo "FAIL: $*"; rc=1; }

wait_socket() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.05; done; echo "FAIL: no socket $1"; exit 1; }
# starts a fake client manager on $tmp/cm.sock: MODE [ENDPOINT [TOKEN]]
cm_pid=
start_cm() {
  [ -n "$cm_pid" ] && { kill "$cm_pid"; wait "$cm_pid" 2>/dev/null; }
  rm -f "$tmp/cm.sock"
  "$fake" client-manager "$tmp/cm.sock" "$@" > "$tmp/cm.log" 2>&1 & cm_pid=$!; pids+=($cm_pid)
  wait_socket "$tmp/cm.sock"
}
# runs a client program with the client manager path: no FLYT_SERVER
run_cm() { env -u FLYT_SERVER -u FLYT_SESSION_TOKEN FLYT_CLIENT_MANAGER="$tmp/cm.sock" \
             LD_LIBRARY_PATH="$libdir" timeout 60 "$@"; }
# expects stderr of the last run ($tmp/err) to hold a phrase
said() { grep -q -- "$1" "$tmp/err" || fail "expected \"$1\" in: $(cat "$tmp/err")"; }

"$server" --backend host --listen "unix:$tmp/s.sock" > "$tmp/server.log" 2>&1 & pids+=($!)
wait_socket "$tmp/s.sock"

echo "== the client manager gives the endpoint: the whole client test runs through it"
start_cm ok "unix:$tmp/s.sock" unused-token
run_cm "$test_host" > "$tmp/out" 2> "$tmp/err" && tail -1 "$tmp/out" || { cat "$tmp/out" "$tmp/err"; fail "client test via the client manager"; }
grep -q "^request op=acquire pid=[0-9]* peer_pid=" "$tmp/cm.log" || fail "no acquire request: $(cat "$tmp/cm.log")"
read -r req_pid peer_pid < <(sed -n 's/^request op=acquire pid=\([0-9]*\) peer_pid=\([0-9]*\).*/\1 \2/p' "$tmp/cm.log" | head -1)
[ "$req_pid" = "$peer_pid" ] && echo "ok: the request names the caller's own pid ($req_pid)" || fail "pid $req_pid vs peer $peer_pid"
[ "$(grep -c '^request' "$tmp/cm.log")" = 1 ] && echo "ok: one request per process" || fail "more than one request"

echo "== FLYT_SERVER wins over the client manager"
FLYT_SERVER="unix:$tmp/s.sock" FLYT_CLIENT_MANAGER="$tmp/cm.sock" LD_LIBRARY_PATH="$libdir" timeout 60 "$test_host" > "$tmp/out" 2>&1 || fail "FLYT_SERVER run"
[ "$(grep -c '^request' "$tmp/cm.log")" = 1 ] && echo "ok: the client manager was not asked" || fail "client manager asked despite FLYT_SERVER"

echo "== the client manager refuses"
start_cm error
run_cm "$noserver" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out"; fail "no-device semantics"; }
said "could not get a GPU: no_capacity: needs 64 SMs"
[ "$(grep -c 'flyt:' "$tmp/err")" = 1 ] && echo "ok: one line says why: $(cat "$tmp/err")" || fail "reason printed $(grep -c 'flyt:' "$tmp/err") times"

echo "== the client manager never answers (FLYT_CLIENT_MANAGER_TIMEOUT=1)"
start_cm hang
FLYT_CLIENT_MANAGER_TIMEOUT=1 run_cm "$noserver" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out"; fail "timeout"; }
said "did not answer within 1 s"

echo "== the client manager closes without answering / answers garbage"
start_cm close
run_cm "$noserver" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out"; fail "close"; }
said "closed the connection without an answer"
start_cm garbage
run_cm "$noserver" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out"; fail "garbage"; }
said "malformed answer"

echo "== no client manager at all"
kill "$cm_pid"; wait "$cm_pid" 2>/dev/null; cm_pid=; rm -f "$tmp/cm.sock"
run_cm "$noserver" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out"; fail "no manager"; }
said "FLYT_SERVER is not set and no client manager at $tmp/cm.sock"

echo "== the client manager names a server nobody listens on"
start_cm ok "unix:$tmp/nobody.sock" t
run_cm "$noserver" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out"; fail "dead endpoint"; }
said "no GPU server reachable at unix:$tmp/nobody.sock (from session fake-1 from the client manager)"

echo "== a server that asks for a session token"
good=0123abcd.s-1.4102444800
"$fake" auth-server "unix:$tmp/auth.sock" require "$good" > "$tmp/auth.log" 2>&1 & pids+=($!)
wait_socket "$tmp/auth.sock"
start_cm ok "unix:$tmp/auth.sock" "$good"
run_cm "$test_auth" ok > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out" "$tmp/err"; fail "token from the client manager"; }
echo "-- token from the client manager: $(tail -1 "$tmp/out")"
start_cm ok "unix:$tmp/auth.sock" "wrong.s-1.4102444800"
run_cm "$test_auth" refused > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out"; fail "wrong token admitted"; }
said "refused the session token"
echo "-- wrong token: $(cat "$tmp/err")"
FLYT_SERVER="unix:$tmp/auth.sock" FLYT_SESSION_TOKEN="$good" LD_LIBRARY_PATH="$libdir" timeout 60 \
  "$test_auth" ok > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out" "$tmp/err"; fail "FLYT_SESSION_TOKEN"; }
echo "-- FLYT_SERVER + FLYT_SESSION_TOKEN: $(tail -1 "$tmp/out")"
env -u FLYT_SESSION_TOKEN FLYT_SERVER="unix:$tmp/auth.sock" LD_LIBRARY_PATH="$libdir" timeout 60 \
  "$test_auth" refused > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out"; fail "no token admitted"; }
said "requires a session token and none is known (set FLYT_SESSION_TOKEN"
echo "-- no token: $(cat "$tmp/err")"
[ "$(grep -c '^auth ok' "$tmp/auth.log")" = 2 ] && [ "$(grep -c '^auth refused' "$tmp/auth.log")" = 1 ] \
  && echo "ok: the server saw 2 good tokens and 1 bad one (none sent when none known)" \
  || fail "server side: $(cat "$tmp/auth.log")"

echo "== a server that accepts but never answers HELLO (FLYT_CONNECT_TIMEOUT=1)"
"$fake" auth-server "unix:$tmp/mute.sock" mute x > /dev/null 2>&1 & pids+=($!)
wait_socket "$tmp/mute.sock"
FLYT_SERVER="unix:$tmp/mute.sock" FLYT_CONNECT_TIMEOUT=1 LD_LIBRARY_PATH="$libdir" timeout 60 \
  "$noserver" > "$tmp/out" 2> "$tmp/err" || { cat "$tmp/out"; fail "mute server"; }
said "did not complete HELLO: no answer in time"

[ $rc = 0 ] && echo "all client-manager path checks passed"
exit $rc
