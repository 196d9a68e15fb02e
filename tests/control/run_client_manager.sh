#!/usr/bin/env bash
# flyt-client-manager as a real daemon, against a fake cluster manager (made with
# flyt_http: fake_cluster_manager.c) whose sessions all point at a real flyt-server
# with the host-memory backend.
# usage: run_client_manager.sh CMGR FAKE_CM PROBE SERVER LIB_PATH TEST_HOST TEST_NOSERVER EXAMPLE_CONF
#   LIB_PATH: the CUDA programs' LD_LIBRARY_PATH: Flyt's libcuda.so.1 first, then NVIDIA's
#   libcudart.so.13 (the programs link NVIDIA's runtime, without an RPATH)
set -u
cmgr=$1 fake_clm=$2 probe=$3 server=$4 libpath=$5 test_host=$6 noserver=$7 example=$8
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
rc=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; rc=1; }
# waits up to $1 seconds for grep -E $2 in file $3
wait_for() { local t=$(( $1 * 20 )); while (( t-- > 0 )); do grep -qE -- "$2" "$3" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
wait_socket() { for _ in $(seq 200); do [ -S "$1" ] && return 0; sleep 0.05; done; return 1; }

vm_token=$(printf 'a%.0s' $(seq 64))
printf '%s\n' "$vm_token" > "$tmp/vm.token"; chmod 600 "$tmp/vm.token"
clm_log=$tmp/clm.log
# a port the kernel says is free now, so that runs side by side do not collide
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port) metrics_port=$(free_port)
clm_pid=
start_cm() { # FIRST_ID [ENDPOINT [more options]]
  local first=$1 endpoint=${2:-unix:$tmp/s.sock}; shift; shift
  "$fake_clm" --listen "127.0.0.1:$port" --vm-token "$vm_token" --endpoint "$endpoint" \
    --log "$clm_log" --first-id "$first" --refuse-file "$tmp/refuse" --fail-file "$tmp/fail" "$@" \
    > "$tmp/fake_clm.out" 2>&1 & clm_pid=$!; pids+=($clm_pid)
  wait_for 5 listening "$tmp/fake_clm.out" || { echo "FAIL: fake cluster manager did not start"; cat "$tmp/fake_clm.out"; exit 1; }
}
write_conf() { # FILE WATCH
  cat > "$1" <<EOF
# test config
cluster_manager = http://127.0.0.1:$port/
vm_id = vm-test
vm_token_file = vm.token
socket = $tmp/run/client.sock
socket_mode = 0660
log_level = debug
alive_interval = 1s
acquire_timeout = 8s
request_timeout = 3s
retry_max_backoff = 2s
shutdown_timeout = 5s
process_watch = $2
metrics_listen = 127.0.0.1:$metrics_port
max_connections_per_user = 4
EOF
}
mgr_pid=
start_mgr() { # WATCH
  write_conf "$tmp/cmgr.conf" "$1"
  "$cmgr" --config "$tmp/cmgr.conf" > "$tmp/mgr.log" 2>&1 & mgr_pid=$!; pids+=($mgr_pid)
  wait_socket "$tmp/run/client.sock" || { echo "FAIL: client manager did not start"; cat "$tmp/mgr.log"; exit 1; }
}
stop_mgr() {
  kill -TERM "$mgr_pid"; local st=0; wait "$mgr_pid" || st=$?
  return $st
}
# session id the fake handed to pid $1
session_of_pid() { sed -n "s/^create \(s-[0-9]*\) pid=$1 .*/\1/p" "$clm_log" | tail -1; }

echo "== command line and config"
"$cmgr" --version | grep -q "^flyt-client-manager [0-9]" && pass "--version" || fail "--version"
"$cmgr" --help | grep -q "vm_token_file" && pass "--help lists the config keys" || fail "--help"
write_conf "$tmp/good.conf" auto
"$cmgr" --check-config "$tmp/good.conf" > /dev/null && pass "a good config is accepted" || fail "good config refused"
check_bad() { # NAME LINE_TO_ADD EXPECTED
  { cat "$tmp/good.conf"; echo "$2"; } > "$tmp/bad.conf"
  local line; line=$(wc -l < "$tmp/bad.conf")
  local out; out=$("$cmgr" --config "$tmp/bad.conf" 2>&1); local st=$?
  if [ $st = 2 ] && grep -qF -- "$3" <<<"$out"; then pass "$1 refused: $out"; else fail "$1: status $st: $out"; fi
}
check_bad "an unknown key" "colour = blue" "bad.conf:$(( $(wc -l < "$tmp/good.conf") + 1 )): unknown key"
check_bad "a malformed line" "just words" "bad.conf:$(( $(wc -l < "$tmp/good.conf") + 1 )):"
sed 's/^socket_mode = .*/socket_mode = 0999/' "$tmp/good.conf" > "$tmp/bad.conf"
out=$("$cmgr" --config "$tmp/bad.conf" 2>&1); [ $? = 2 ] && grep -q "bad.conf:6: socket_mode: expected octal" <<<"$out" && pass "socket_mode 0999 refused: $out" || fail "socket_mode: $out"
sed 's/^process_watch = .*/process_watch = sometimes/' "$tmp/good.conf" > "$tmp/bad.conf"
out=$("$cmgr" --config "$tmp/bad.conf" 2>&1); [ $? = 2 ] && grep -q "bad.conf:13: process_watch" <<<"$out" && pass "process_watch refused: $out" || fail "process_watch: $out"
chmod 644 "$tmp/vm.token"
out=$("$cmgr" --config "$tmp/good.conf" 2>&1); [ $? = 2 ] && grep -q "good.conf:4: vm_token_file: .*open to other users" <<<"$out" && pass "a world-readable token file refused: $out" || fail "token mode: $out"
chmod 600 "$tmp/vm.token"
sed "s|^vm_token_file = .*|vm_token_file = $tmp/vm.token|" "$example" > "$tmp/example.conf"
out=$("$cmgr" --check-config "$tmp/example.conf" 2>&1) && pass "configs/client-manager.conf is accepted (token path replaced)" || fail "example config: $out"
out=$("$cmgr" --config "$tmp/nonexistent.conf" 2>&1); [ $? = 2 ] && grep -q "nonexistent.conf" <<<"$out" && pass "a missing config file: $out" || fail "missing config: $out"

"$server" --backend host --listen "unix:$tmp/s.sock" > "$tmp/server.log" 2>&1 & pids+=($!)
wait_socket "$tmp/s.sock" || { echo "FAIL: server did not start"; exit 1; }
start_cm 1
start_mgr pidfd
[ "$(stat -c %a "$tmp/run/client.sock")" = 660 ] && pass "socket mode 0660 as configured" || fail "socket mode $(stat -c %a "$tmp/run/client.sock")"

echo "== a CUDA program gets its server through the client manager"
env -u FLYT_SERVER FLYT_CLIENT_MANAGER="$tmp/run/client.sock" LD_LIBRARY_PATH="$libpath" \
  "$test_host" > "$tmp/host.out" 2>&1 & host=$!
wait $host; st=$?
[ $st = 0 ] && pass "test_client_host passed through the client manager: $(tail -1 "$tmp/host.out")" \
  || { cat "$tmp/host.out"; fail "test_client_host via the client manager"; }
sid=$(session_of_pid $host)
[ -n "$sid" ] && pass "the cluster manager made session $sid for pid $host" || fail "no session for pid $host: $(cat "$clm_log")"
wait_for 5 "^release $sid\$" "$clm_log" && pass "released $sid after the program exited" || fail "no release of $sid"

echo "== the protocol: same pid, same session; pid must be the caller's"
"$probe" "$tmp/run/client.sock" twice > "$tmp/p.out" 2>&1 & p=$!; wait $p; st=$?
[ $st = 0 ] && [ "$(grep -c "^create .* pid=$p " "$clm_log")" = 1 ] && pass "asked twice, one session: $(head -1 "$tmp/p.out" | cut -c1-60)..." || { cat "$tmp/p.out"; fail "twice"; }
"$probe" "$tmp/run/client.sock" wrong-pid > "$tmp/p.out" 2>&1 && grep -q "is not the caller" "$tmp/p.out" \
  && pass "asking for another pid refused: $(cat "$tmp/p.out")" || { cat "$tmp/p.out"; fail "wrong-pid"; }
"$probe" "$tmp/run/client.sock" garbage > "$tmp/p.out" 2>&1 && pass "malformed request: $(cat "$tmp/p.out")" || { cat "$tmp/p.out"; fail "garbage"; }
"$probe" "$tmp/run/client.sock" release > "$tmp/p.out" 2>&1 & p=$!; wait $p; st=$?
[ $st = 0 ] && pass "op=release releases early; the next acquire gets a new session" || { cat "$tmp/p.out"; fail "release"; }

echo "== one user cannot take every connection (max_connections_per_user = 4)"
"$probe" "$tmp/run/client.sock" idle 4 30 > "$tmp/idle.out" 2>&1 & idle=$!; pids+=($idle)
wait_for 5 "^open 4" "$tmp/idle.out" || fail "the idle connections did not open: $(cat "$tmp/idle.out")"
"$probe" "$tmp/run/client.sock" acquire > "$tmp/p.out" 2>&1
grep -q "too many connections of your user" "$tmp/p.out" \
  && pass "a fifth connection of the same user is refused: $(cut -c1-90 "$tmp/p.out")" \
  || { cat "$tmp/p.out"; fail "per-user limit"; }
if [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null; then
  chmod 755 "$tmp" "$tmp/run"; chmod 666 "$tmp/run/client.sock"
  setpriv --reuid 65534 --regid 65534 --clear-groups "$probe" "$tmp/run/client.sock" acquire > "$tmp/p.out" 2>&1 \
    && pass "another user still gets its session: $(cut -c1-60 "$tmp/p.out")..." \
    || { cat "$tmp/p.out"; fail "another user was locked out"; }
  chmod 700 "$tmp"
else
  echo "skip: another user's connection (needs root and setpriv)"
fi
kill $idle 2>/dev/null; wait $idle 2>/dev/null
for _ in $(seq 100); do "$probe" "$tmp/run/client.sock" acquire > "$tmp/p.out" 2>&1 && break; sleep 0.05; done
grep -q "^status=ok" "$tmp/p.out" && pass "the user's connections closed: it is served again" \
  || { cat "$tmp/p.out"; fail "not served after its connections closed"; }

echo "== kill -9 (pidfd), and alive pings"
"$probe" "$tmp/run/client.sock" hold 60 > "$tmp/h1.out" 2>&1 & h1=$!; pids+=($h1)
wait_for 10 held "$tmp/h1.out" || fail "holder got no session: $(cat "$tmp/h1.out")"
s1=$(session_of_pid $h1)
wait_for 4 "^alive $s1\$" "$clm_log" && pass "alive pings for $s1 while its process runs" || fail "no alive for $s1"
kill -9 $h1; wait $h1 2>/dev/null
wait_for 5 "^release $s1\$" "$clm_log" && pass "released $s1 after kill -9" || fail "no release of $s1 after kill -9"

metrics=$( (exec 3<>/dev/tcp/127.0.0.1/$metrics_port && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && cat <&3) 2>&1)
grep -q '^flyt_client_manager_released_total [1-9]' <<<"$metrics" && grep -q '^flyt_client_manager_sessions{state="live"} 0' <<<"$metrics" \
  && pass "metrics: $(grep -E '^flyt_client_manager_(released|acquired)_total' <<<"$metrics" | tr '\n' ' ')" || fail "metrics: $metrics"

echo "== the cluster manager briefly unreachable"
"$probe" "$tmp/run/client.sock" hold 60 > "$tmp/h2.out" 2>&1 & h2=$!; pids+=($h2)
wait_for 10 held "$tmp/h2.out" || fail "holder 2 got no session"
s2=$(session_of_pid $h2)
kill "$clm_pid"; wait "$clm_pid" 2>/dev/null
kill -9 $h2; wait $h2 2>/dev/null
"$probe" "$tmp/run/client.sock" hold 60 > "$tmp/h3.out" 2>&1 & h3=$!; pids+=($h3)
sleep 2
grep -q "unreachable" "$tmp/mgr.log" && pass "logged: $(grep -m1 unreachable "$tmp/mgr.log" | cut -d' ' -f3-)" || fail "no unreachable log"
start_cm 100
wait_for 8 "^release $s2" "$clm_log" && pass "released $s2 (killed during the outage) once it was back" || fail "no release of $s2 after the outage"
wait_for 8 held "$tmp/h3.out" && pass "a request made during the outage got a session after retries" || fail "request during outage: $(cat "$tmp/h3.out")"
grep -q "answers again" "$tmp/mgr.log" && pass "logged the return" || fail "no 'answers again' log"
s3=$(session_of_pid $h3)

echo "== errors of the cluster manager reach the program"
touch "$tmp/refuse"
env -u FLYT_SERVER FLYT_CLIENT_MANAGER="$tmp/run/client.sock" LD_LIBRARY_PATH="$libpath" timeout 30 \
  "$noserver" > "$tmp/host.out" 2>&1 || { cat "$tmp/host.out"; fail "not cudaErrorNoDevice at once"; }
grep -q "flyt: FLYT_SERVER is not set and the client manager at .* could not get a GPU: HTTP 409 no_capacity: needs 64 SMs" "$tmp/host.out" \
  && pass "no capacity: $(grep -m1 'flyt:' "$tmp/host.out")" || { cat "$tmp/host.out"; fail "no_capacity not reported"; }
rm -f "$tmp/refuse"

echo "== stopping releases every session"
"$probe" "$tmp/run/client.sock" hold 60 > "$tmp/h4.out" 2>&1 & h4=$!; pids+=($h4)
wait_for 10 held "$tmp/h4.out" || fail "holder 4 got no session"
s4=$(session_of_pid $h4)
stop_mgr && pass "SIGTERM: exit status 0" || fail "client manager exit status $?"
grep -q "^release $s3\$" "$clm_log" && grep -q "^release $s4\$" "$clm_log" && pass "released $s3 and $s4 on stop" || fail "stop did not release $s3 $s4: $(tail -5 "$clm_log")"
[ ! -e "$tmp/run/client.sock" ] && pass "socket removed" || fail "socket left behind"
kill $h3 $h4 2>/dev/null

echo "== watching through /proc (no pidfd)"
start_mgr proc
grep -q "watching processes through /proc" "$tmp/mgr.log" && pass "process_watch = proc" || fail "not in /proc mode"
"$probe" "$tmp/run/client.sock" hold 60 > "$tmp/h5.out" 2>&1 & h5=$!; pids+=($h5)
wait_for 10 held "$tmp/h5.out" || fail "holder 5 got no session"
s5=$(session_of_pid $h5)
kill -9 $h5; wait $h5 2>/dev/null
wait_for 5 "^release $s5\$" "$clm_log" && pass "released $s5 after kill -9 (/proc)" || fail "no release of $s5 (/proc)"
"$probe" "$tmp/run/client.sock" acquire > "$tmp/p.out" 2>&1 & p=$!; wait $p
s6=$(session_of_pid $p)
wait_for 5 "^release $s6\$" "$clm_log" && pass "released $s6 after a normal exit (/proc)" || fail "no release of $s6 (/proc)"
stop_mgr || fail "exit status (/proc)"

echo "== session tokens end to end: a server that admits only its own session"
key=$(printf '5a%.0s' $(seq 32))
printf '%s\n' "$key" > "$tmp/session.key"; chmod 600 "$tmp/session.key"
"$server" --backend host --listen "unix:$tmp/auth.sock" --session-id s-500 \
  --session-key-file "$tmp/session.key" > "$tmp/auth-server.log" 2>&1 & pids+=($!)
wait_socket "$tmp/auth.sock" || { cat "$tmp/auth-server.log"; fail "admission server did not start"; }
kill "$clm_pid"; wait "$clm_pid" 2>/dev/null
start_cm 500 "unix:$tmp/auth.sock" --session-key "$key"
start_mgr auto
env -u FLYT_SERVER FLYT_CLIENT_MANAGER="$tmp/run/client.sock" LD_LIBRARY_PATH="$libpath" \
  "$test_host" > "$tmp/host.out" 2>&1 & host=$!
wait $host && pass "session s-500's token admitted: test_client_host passed ($(tail -1 "$tmp/host.out"))" \
  || { tail -20 "$tmp/host.out"; fail "admission with the cluster's token"; }
grep -q "session s-500 admitted" "$tmp/auth-server.log" && pass "the server logged the admission" || fail "no admission in the server log"
# the next session (s-501) carries a token for s-501: this server refuses it
env -u FLYT_SERVER FLYT_CLIENT_MANAGER="$tmp/run/client.sock" LD_LIBRARY_PATH="$libpath" timeout 30 \
  "$noserver" > "$tmp/host.out" 2>&1 || { cat "$tmp/host.out"; fail "a token for another session was not refused"; }
grep -q "refused the session token" "$tmp/host.out" && pass "a token for another session refused: $(grep -m1 'flyt:' "$tmp/host.out")" || { cat "$tmp/host.out"; fail "refusal message"; }
wait_for 5 "^release s-501" "$clm_log" || fail "s-501 not released"
stop_mgr || fail "exit status (tokens)"

creates=$(grep -c '^create' "$clm_log"); releases=$(grep -cE '^release s-[0-9]+( unknown)?$' "$clm_log")
echo "cluster manager saw $creates creations and $releases releases"
[ "$creates" = "$releases" ] && pass "every session made was released" || { cat "$clm_log"; fail "creations and releases differ"; }
if grep -qE "ERROR|AddressSanitizer|runtime error" "$tmp/mgr.log"; then fail "errors in the client manager log"; grep -E "ERROR|Sanitizer|runtime error" "$tmp/mgr.log"; fi
[ $rc = 0 ] && echo "all client manager checks passed" || { echo "--- client manager log"; tail -40 "$tmp/mgr.log"; }
exit $rc
