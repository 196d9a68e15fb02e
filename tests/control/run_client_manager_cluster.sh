#!/usr/bin/env bash
# flyt-client-manager against the real control plane on loopback: flyt-cluster-manager
# (SQLite), flyt-node-manager in test mode (host backend, one fake GPU) starting real
# flyt-servers that admit only with the cluster's session token, and a CUDA program that
# knows nothing but the client manager's socket. With "tls MAKE_CERTS" every API is HTTPS
# (a throwaway CA from make_test_certs.sh) and every caller verifies it; tls_checks then
# shows callers with another CA or plain HTTP refused and a world-readable key refused.
# usage: run_client_manager_cluster.sh CMGR CLUSTER_MANAGER NODE_MANAGER FLYTCTL SERVER
#                                      PROBE LIB_PATH CUDA_USER [tls MAKE_CERTS]
#   LIB_PATH: CUDA_USER's LD_LIBRARY_PATH: Flyt's libcuda.so.1 first, then NVIDIA's
#   libcudart.so.13 (CUDA_USER links NVIDIA's runtime, without an RPATH)
set -u
cmgr=$1 clm=$2 nm=$3 ctl=$4 server=$5 probe=$6 libpath=$7 cuda_user=$8 mode=${9:-plain}
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
die() { echo "FAIL: $*"; for f in "$tmp"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
wait_until() { local t=$(( $1 * 10 )); shift; while (( t-- > 0 )); do "$@" > /dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
json_field() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" | head -1; }
# the id of the session of process $1, from flytctl's JSON (the last "id" before its "pid")
sid_of_pid() { "$ctl" --json session list | awk -v pid="$1" '
  /"id": "/ { match($0, /"id": "[^"]*"/); id = substr($0, RSTART + 7, RLENGTH - 8) }
  $0 ~ ("\"pid\": " pid ",?$") { print id; exit }'; }

# TLS mode: node-a registered its https:// URL (which the cluster manager verified when it
# called it); callers with another CA or plain HTTP get no answer; a daemon whose key others
# can read, or with a certificate and no key, does not start.
tls_checks() {
  echo "== TLS: who is answered, what is refused"
  "$ctl" --json node show node-a | grep -q "\"address\": \"https://127.0.0.1:" \
    && pass "node-a registered an https:// address" || fail "node-a's address: $("$ctl" --json node show node-a | grep address)"
  local out r
  out=$("$ctl" --ca "$tmp/certs/other-ca.pem" status 2>&1); r=$?
  [ $r = 3 ] && grep -q "certificate" <<<"$out" && pass "flytctl with another CA refused: $out" \
    || fail "flytctl with another CA (exit $r): $out"
  out=$("$ctl" --server "http://127.0.0.1:$clm_port" status 2>&1); r=$?
  [ $r = 3 ] && pass "plain HTTP to the HTTPS port gets no answer: $out" || fail "plain HTTP (exit $r): $out"
  sed 's|^cluster_ca_file = .*|cluster_ca_file = certs/other-ca.pem|; s|^node_id = .*|node_id = node-x|' \
    "$tmp/node.conf" > "$tmp/node-other.conf"
  out=$(timeout 3 "$nm" --config "$tmp/node-other.conf" 2>&1 | grep -m1 "certificate")
  [ -n "$out" ] && pass "a node manager trusting another CA cannot register: $out" \
    || fail "node manager with another CA: no certificate error"
  cp -p "$tmp/certs/server.key" "$tmp/certs/open.key"; chmod 644 "$tmp/certs/open.key"
  sed 's|^tls_key_file = .*|tls_key_file = certs/open.key|' "$tmp/cluster.conf" > "$tmp/cluster-open.conf"
  out=$(timeout 5 "$clm" --config "$tmp/cluster-open.conf" 2>&1); r=$?
  [ $r != 0 ] && [ $r != 124 ] && grep -q "open.key is open to other users.*chmod 600" <<<"$out" \
    && pass "a cluster manager whose key others can read does not start: $out" || fail "world-readable key (exit $r): $out"
  sed 's|^tls_key_file = .*|tls_key_file = certs/open.key|' "$tmp/node.conf" > "$tmp/node-open.conf"
  out=$("$nm" --check-config "$tmp/node-open.conf" 2>&1); r=$?
  [ $r != 0 ] && grep -q "open.key is open to other users" <<<"$out" \
    && pass "--check-config refuses it for the node manager too" || fail "node manager --check-config (exit $r): $out"
  grep -v '^tls_key_file' "$tmp/cluster.conf" > "$tmp/cluster-half.conf"
  out=$("$clm" --check-config "$tmp/cluster-half.conf" 2>&1); r=$?
  [ $r != 0 ] && grep -q "tls_cert_file .* is set without tls_key_file" <<<"$out" \
    && pass "a certificate without its key refused: $out" || fail "certificate alone (exit $r): $out"
}

# the managers listen on ports the kernel picks; the servers' range is derived from this
# shell's pid, so that runs side by side do not collide
srv_min=$(( 20000 + ($$ % 1000) * 40 )) srv_max=$(( 20000 + ($$ % 1000) * 40 + 38 ))
printf '%s\n' "$(printf 'c%.0s' $(seq 64))" > "$tmp/operator.token"; chmod 600 "$tmp/operator.token"
# the scheme, and the lines each daemon's config gets for TLS (none in plain mode)
scheme=http clm_tls= nm_tls= cmgr_tls=
if [ "$mode" = tls ]; then
  "${10}" "$tmp/certs"; r=$?
  [ $r = 77 ] && exit 77
  [ $r = 0 ] || die "make_test_certs.sh failed"
  scheme=https
  clm_tls="tls_cert_file = certs/server.pem
tls_key_file = certs/server.key
node_ca_file = certs/ca.pem"
  nm_tls="tls_cert_file = certs/server.pem
tls_key_file = certs/server.key
cluster_ca_file = certs/ca.pem"
  cmgr_tls="cluster_ca_file = certs/ca.pem"
  export FLYT_CA=$tmp/certs/ca.pem
fi
cat > "$tmp/cluster.conf" <<EOF
listen = 127.0.0.1:0
store = sqlite:$tmp/cluster.db
operator_token_file = operator.token
heartbeat_interval = 1s
node_timeout = 30s
log_level = info
$clm_tls
EOF
"$clm" --config "$tmp/cluster.conf" --port-file "$tmp/cluster.port" > "$tmp/cluster.log" 2>&1 & pids+=($!)
wait_until 10 test -s "$tmp/cluster.port" || die "cluster manager did not start"
clm_port=$(cat "$tmp/cluster.port")
export FLYT_CM_URL=$scheme://127.0.0.1:$clm_port FLYT_OPERATOR_TOKEN_FILE=$tmp/operator.token
wait_until 10 "$ctl" status || die "cluster manager did not start"

"$ctl" --json node add node-a --host-ip 127.0.0.1 > "$tmp/node.json" || die "node add"
json_field token < "$tmp/node.json" > "$tmp/node.token"; chmod 600 "$tmp/node.token"
"$ctl" --json vm add --id vm-1 --vm-ip 127.0.0.2 --host-ip 127.0.0.1 --compute-units 16 \
  --memory 1GiB > "$tmp/vm.json" || die "vm add"
json_field token < "$tmp/vm.json" > "$tmp/vm.token"; chmod 600 "$tmp/vm.token"
[ -s "$tmp/node.token" ] && [ -s "$tmp/vm.token" ] || die "no tokens: $(cat "$tmp/node.json" "$tmp/vm.json")"

cat > "$tmp/node.conf" <<EOF
node_id = node-a
node_token_file = node.token
cluster_manager = $scheme://127.0.0.1:$clm_port
listen = 127.0.0.1:0
advertise_host = 127.0.0.1
server_path = $server
server_listen_host = 127.0.0.1
server_port_min = $srv_min
server_port_max = $srv_max
state_dir = $tmp/nm-state
backend = host
log_level = info
$nm_tls
EOF
"$nm" --config "$tmp/node.conf" > "$tmp/node.log" 2>&1 & pids+=($!)
wait_until 15 sh -c "'$ctl' --json node show node-a | grep -q '\"state\": \"ready\"'" || die "node did not become ready"
pass "cluster manager, node manager (test mode) up; node-a ready"
[ "$mode" = tls ] && tls_checks

cat > "$tmp/client.conf" <<EOF
cluster_manager = $scheme://127.0.0.1:$clm_port
vm_id = vm-1
vm_token_file = vm.token
socket = $tmp/client.sock
alive_interval = 1s
log_level = info
$cmgr_tls
EOF
"$cmgr" --config "$tmp/client.conf" > "$tmp/client.log" 2>&1 & mgr=$!; pids+=($mgr)
wait_until 10 test -S "$tmp/client.sock" || die "client manager did not start"

# run as "${cuda[@]}" ARGS &: env execs the program, so $! is its pid
cuda=(env -u FLYT_SERVER -u FLYT_SESSION_TOKEN FLYT_CLIENT_MANAGER="$tmp/client.sock"
      LD_LIBRARY_PATH="$libpath" "$cuda_user")

echo "== a CUDA program through the whole cluster (session token checked by the server)"
"${cuda[@]}" 16 > "$tmp/host.out" 2>&1 & host=$!
wait $host && pass "it sees the VM's share: $(head -1 "$tmp/host.out")" || { cat "$tmp/host.out"; fail "CUDA program through the cluster"; }
sid=$(sid_of_pid $host)
[ -n "$sid" ] && pass "the cluster manager recorded session $sid for pid $host" || fail "no session for pid $host"
wait_until 10 sh -c "'$ctl' --json session show $sid | grep -q '\"state\": \"released\"'" \
  && pass "session $sid released after the program exited" || fail "session $sid not released: $("$ctl" session show "$sid")"
grep -q "admitted" "$tmp/nm-state"/*.log "$tmp/node.log" 2>/dev/null && pass "a server logged the admission" || echo "(no server admission line found in the node manager's logs)"

echo "== app-requested scaling: a program asks its client manager for another share"
req=("$cmgr" request --socket "$tmp/client.sock")
out=$("${req[@]}" --sm +16 2>&1) && fail "a request with no live session was granted: $out" \
  || { echo "$out" | grep -q "no live session" && pass "refused with no live session: $out" || fail "no-session refusal: $out"; }
"$ctl" vm update vm-1 --sm-min 8 --sm-max 32 --memory-max 2GiB > /dev/null || fail "vm update with bounds"
"$ctl" vm show vm-1 | grep -q "SMs 8..32" && pass "vm show lists the bounds" || fail "bounds not shown: $("$ctl" vm show vm-1)"
if [ -n "${FLYT_KNOWN_RESIZE_BUG:-}" ]; then
  echo "SKIPPED part: the grant seen by a running program (known bug in $FLYT_KNOWN_RESIZE_BUG builds, tests/control/client_manager.cmake)"
  "$probe" "$tmp/client.sock" hold 30 > "$tmp/r.out" 2>&1 & r=$!; pids+=($r)
  wait_until 20 grep -q held "$tmp/r.out" || fail "holder got no session"
else
  "${cuda[@]}" 16 30 32 > "$tmp/r.out" 2>&1 & r=$!; pids+=($r)
  wait_until 20 grep -q held "$tmp/r.out" || fail "program got no session: $(cat "$tmp/r.out")"
  out=$("${req[@]}" --sm +16 --reason "a bigger batch" 2>&1) \
    && echo "$out" | grep -q "^granted: .* 32 SMs" && pass "+16 SMs granted: $out" || fail "+16 SMs: $out"
  wait $r && pass "the running program sees the new share: $(tail -1 "$tmp/r.out")" || fail "program: $(cat "$tmp/r.out")"
  "$probe" "$tmp/client.sock" hold 30 > "$tmp/r.out" 2>&1 & r=$!; pids+=($r)
  wait_until 20 grep -q held "$tmp/r.out" || fail "holder got no session"
fi
out=$("${req[@]}" --sm 64 2>&1); st=$?
[ $st = 1 ] && echo "$out" | grep -q "sm_max of 32" && pass "64 SMs refused naming the bound (exit 1): $out" || fail "64 SMs: status $st: $out"
out=$("${req[@]}" --memory +4GiB 2>&1); st=$?
[ $st = 1 ] && echo "$out" | grep -q "memory_max" && pass "memory past its bound refused: $out" || fail "memory: status $st: $out"
"${req[@]}" > /dev/null 2>&1; [ $? = 2 ] && pass "no --sm or --memory: usage error (exit 2)" || fail "request without an ask"
for bad in "op=request pid=%ld" "op=request pid=%ld sm=lots" "op=request pid=%ld memory=+1" \
           "op=request pid=1 sm=+8" "op=request sm=+8"; do
  out=$("$probe" "$tmp/client.sock" line "$bad") && pass "refused: '$bad' -> ${out#status=error }" || fail "'$bad' answered: $out"
done
"$ctl" vm requests vm-1 > "$tmp/requests.txt" || fail "flytctl vm requests"
grep -q refused "$tmp/requests.txt" && pass "flytctl vm requests lists them" || fail "requests: $(cat "$tmp/requests.txt")"
[ -n "${FLYT_KNOWN_RESIZE_BUG:-}" ] || grep -q granted "$tmp/requests.txt" || fail "no granted request listed"
kill $r 2>/dev/null; wait $r 2>/dev/null

echo "== kill -9 of a CUDA program"
"${cuda[@]}" 16 60 > "$tmp/h.out" 2>&1 & h=$!; pids+=($h)
wait_until 20 grep -q held "$tmp/h.out" || fail "holder got no session: $(cat "$tmp/h.out")"
sid=$(sid_of_pid $h)
"$ctl" session show "$sid" | grep -q "active" && pass "session $sid active for pid $h" || fail "session $sid not active"
sleep 1.5
kill -9 $h; wait $h 2>/dev/null
wait_until 10 sh -c "'$ctl' --json session show $sid | grep -q '\"state\": \"released\"'" \
  && pass "session $sid released after kill -9" || fail "session $sid not released after kill -9"

echo "== kill -9 of the client manager: at its restart, a dead process's session is released at once, a live one's kept"
"$probe" "$tmp/client.sock" hold 60 > "$tmp/h3.out" 2>&1 & h3=$!; pids+=($h3)
"$probe" "$tmp/client.sock" hold 60 > "$tmp/h4.out" 2>&1 & h4=$!; pids+=($h4)
wait_until 20 grep -q held "$tmp/h3.out" || fail "holder 3 got no session"
wait_until 20 grep -q held "$tmp/h4.out" || fail "holder 4 got no session"
sid3=$(sed -n 's/.*session=\([^ ]*\).*/\1/p' "$tmp/h3.out") sid4=$(sed -n 's/.*session=\([^ ]*\).*/\1/p' "$tmp/h4.out")
grep -q "^$sid3 $h3 " "$tmp/client-manager.state" && pass "the state file (beside the socket) names $sid3 and pid $h3" || fail "state file: $(cat "$tmp/client-manager.state")"
[ "$(stat -c %a "$tmp/client-manager.state")" = 600 ] && pass "the state file is 0600" || fail "state file mode $(stat -c %a "$tmp/client-manager.state")"
kill -9 $mgr; wait $mgr 2>/dev/null
kill -9 $h4; wait $h4 2>/dev/null
sleep 1.5
"$ctl" --json session show "$sid4" | grep -q '"state": "active"' && pass "with no client manager, $sid4 of the dead pid $h4 stays active" || fail "$sid4 not active while no manager ran"
"$cmgr" --config "$tmp/client.conf" >> "$tmp/client.log" 2>&1 & mgr=$!; pids+=($mgr)
wait_until 10 sh -c "'$ctl' --json session show $sid4 | grep -q '\"state\": \"released\"'" \
  && pass "restarted: $sid4 of the dead process released at once (idle grace is 10 min)" || fail "$sid4 not released after the restart: $("$ctl" session show "$sid4")"
sleep 2.5
"$ctl" --json session show "$sid3" | grep -q '"state": "active"' && pass "$sid3 of the live pid $h3 still active" || fail "$sid3 not active after the restart"
grep -q "took over its session $sid3" "$tmp/client.log" && pass "the new run took it over" || fail "no take-over of $sid3 in the log"
kill -9 $h3; wait $h3 2>/dev/null
wait_until 10 sh -c "'$ctl' --json session show $sid3 | grep -q '\"state\": \"released\"'" \
  && pass "$sid3 released when its process is killed (the new run watches it)" || fail "$sid3 not released after kill -9 of $h3"

echo "== stopping the client manager releases what it holds"
"$probe" "$tmp/client.sock" hold 60 > "$tmp/h2.out" 2>&1 & h2=$!; pids+=($h2)
wait_until 20 grep -q held "$tmp/h2.out" || fail "holder 2 got no session"
sid2=$(sed -n 's/.*session=\([^ ]*\).*/\1/p' "$tmp/h2.out")
kill -TERM $mgr; wait $mgr && pass "client manager stopped (status 0)" || fail "client manager exit status"
"$ctl" --json session show "$sid2" | grep -q '"state": "released"' && pass "session $sid2 released at stop" || fail "session $sid2 not released at stop"
kill $h2 2>/dev/null
live=$("$ctl" --json session list --state live | grep -c '"id"')
[ "$live" = 0 ] && pass "no live session left in the cluster" || fail "$live live sessions left"
grep -qE "AddressSanitizer|runtime error" "$tmp"/*.log && fail "sanitizer reports in the logs"
[ $rc = 0 ] || "$ctl" --json session list | head -60
[ $rc = 0 ] && echo "all cluster checks passed" || { echo "--- client manager log"; tail -30 "$tmp/client.log"; }
exit $rc
