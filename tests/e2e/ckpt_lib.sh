# Shared by run_ckpt.sh and run_reserve.sh (sourced): a cluster manager and test-mode node
# managers on 127.0.0.1, the VM's sessions, and a holding client (ckpt_client) whose
# pointer and contents a fresh connection checks. Expects bin, client, tool set.
set -u
tmp=$(mktemp -d)
pids=()
fails=0 passes=0
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
check() { local what=$1; shift; if "$@"; then passes=$((passes+1)); echo "ok: $what"; else fails=$((fails+1)); echo "FAIL: $what"; fi; }
die() { echo "$0: $*"; for f in "$tmp"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
wait_until() { local t=$(( $1 * 10 )); shift; while (( t-- > 0 )); do "$@" > /dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
flat() { "$tool" flat; }
ctl() { "$bin/flytctl" --timeout 60s "$@"; }
field() { sed -n "s/^$1=//p" | head -1; }

base=$(( 30000 + ($$ % 200) * 100 ))
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/operator.token"
chmod 600 "$tmp/operator.token"

# The cluster manager on 127.0.0.1:PORT (0: any); again with the same config: cm_start.
cm_config() {
  cat > "$tmp/cluster.conf" <<EOC
listen = 127.0.0.1:$1
store = sqlite:$tmp/cluster.db
operator_token_file = operator.token
heartbeat_interval = 1s
log_level = info
EOC
}
cm_start() {
  rm -f "$tmp/cm.port"
  "$bin/flyt-cluster-manager" --config "$tmp/cluster.conf" --port-file "$tmp/cm.port" >> "$tmp/cm.log" 2>&1 &
  cm_pid=$!
  pids+=($cm_pid)
  wait_until 15 test -s "$tmp/cm.port" || die "the cluster manager did not start"
  cm=127.0.0.1:$(cat "$tmp/cm.port")
  export FLYT_CM_URL=http://$cm FLYT_OPERATOR_TOKEN_FILE=$tmp/operator.token
}

start_node() {  # NAME INDEX [EXTRA CONFIG LINES]
  ctl --json node add "$1" --host-ip 127.0.0.1 | flat | field token > "$tmp/$1.token"; chmod 600 "$tmp/$1.token"
  mkdir -m 700 -p "$tmp/$1-state"
  cat > "$tmp/$1.conf" <<EOC
node_id = $1
node_token_file = $1.token
cluster_manager = http://$cm
listen = 127.0.0.1:0
advertise_host = 127.0.0.1
server_path = $bin/flyt-server
server_listen_host = 127.0.0.1
server_port_min = $(( base + $2 * 40 ))
server_port_max = $(( base + $2 * 40 + 39 ))
state_dir = $tmp/$1-state
backend = host
log_level = info
${3:-}
EOC
  "$bin/flyt-node-manager" --config "$tmp/$1.conf" --port-file "$tmp/$1.port" > "$tmp/$1.log" 2>&1 &
  eval "pid_$1=$!"
  pids+=($!)
}
node_ready() { ctl --json node show "$1" | flat | grep -q '^node.state=ready$'; }

# A session for "process" PID (the VM's token, $tmp/vm.token or TOKENFILE): prints ID
# ENDPOINT TOKEN.
session_of() {
  "$tool" http POST "$cm" /v1/sessions "$(cat "${2:-$tmp/vm.token}")" "{\"pid\": $1}" | tail -n +2 | flat \
    > "$tmp/sess.flat"
  echo "$(field session.id < "$tmp/sess.flat") $(field session.endpoint < "$tmp/sess.flat" | sed 's/^unix:[^,]*,//') $(field token < "$tmp/sess.flat")"
}
state_of() { ctl --json session show "$1" | flat | field session.state; }
node_of() { ctl --json session show "$1" | flat | field session.node_id; }
# Starts a holding client (or MODE: live) on a new session for PID; sets sid, ptr.
hold() {
  read -r sid ep tok <<< "$(session_of "$1")"
  [ -n "$sid" ] || die "no session for pid $1: $(cat "$tmp/sess.flat")"
  rm -f "$tmp/ptr.$1"
  FLYT_SERVER=$ep FLYT_SESSION_TOKEN=$tok "$client" "${2:-hold}" "$tmp/ptr.$1" > "$tmp/client.$1.log" 2>&1 &
  eval "holder_$1=$!"
  pids+=($!)
  wait_until 15 test -s "$tmp/ptr.$1" || die "the client of session $sid did not start: $(cat "$tmp/client.$1.log")"
  ptr=$(cat "$tmp/ptr.$1")
}
# A fresh connection to PID's session where it is now, checking ptr's contents.
verify() {
  read -r vsid vep vtok <<< "$(session_of "$1")"
  [ "$vsid" = "$2" ] && FLYT_SERVER=$vep FLYT_SESSION_TOKEN=$vtok "$client" check "$3" > "$tmp/check.log" 2>&1
}
