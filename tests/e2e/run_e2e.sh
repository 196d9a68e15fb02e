#!/usr/bin/env bash
# The control plane end to end, as separate hosts: real daemons as separate processes in
# network namespaces made here, joined by veth pairs to a bridge that lives in a namespace
# of its own (the host's network is not touched; the 10.77.0.0/24 addresses exist only in
# these namespaces):
#
#   ns cm  10.77.0.1   flyt-cluster-manager (SQLite file, or PostgreSQL on the ns loopback)
#   ns op  10.77.0.2   the operator: flytctl, and raw HTTP requests (bad input)
#   ns na  10.77.0.11  flyt-node-manager node-a, test mode: one fake GPU (132 SMs in groups
#   ns nb  10.77.0.12  flyt-node-manager node-b  of 8, 80 GiB); flyt-servers on the host backend
#   ns va  10.77.0.21  flyt-client-manager of VM vm-10.77.0.21 (imported), CUDA programs
#   ns vb  10.77.0.22  flyt-client-manager of VM vm-b (added), CUDA programs
#
# Scenarios (numbered as in issue 3's test list; 9 runs before 7, which ends the sessions
# 9 needs): 1 registration; 2 VMs (import of original documents, add with a unit),
# placement with host preference, a VM's processes on its one share, a no-fit refusal
# seen by a CUDA program; 3 a CUDA program through the whole stack seeing its VM's share; 4 release on
# exit, on kill -9 and by the operator; 5 idle release (what api.md calls idle: no client
# connected and no alive report for idle_grace); 6 node loss (SIGSTOP) and return, node
# manager crash and restart, both reconciled; 9 bad input over the network and on the
# client manager's socket, answered with clear errors and nothing changed; 7 cluster
# manager kill -9 and restart with state intact, also while a session is starting; the
# operator removing a VM; every daemon stopping cleanly. 8 (both stores) is this script
# run once per store. Each check prints "ok: ..." or "FAIL: ...", and the last line is
# "N passed, M failed". Exit 0 when none failed, 77 (skip) when network namespaces cannot
# be made (not root) or, for postgresql, when the PostgreSQL server binaries are missing.
#
# usage: run_e2e.sh sqlite|postgresql BIN_DIR LIB_DIR CUDA_LIB_DIR E2E_CUDA E2E_TOOL
#   BIN_DIR: flyt-cluster-manager, flyt-node-manager, flyt-client-manager, flytctl,
#   flyt-server; LIB_DIR: Flyt's libcuda.so.1; CUDA_LIB_DIR: NVIDIA's libcudart.so.13, which
#   E2E_CUDA links without an RPATH. FLYT_E2E_KEEP=1 keeps the temp dir.
set -u
if [ $# -ne 6 ]; then
  echo "usage: $0 sqlite|postgresql BIN_DIR LIB_DIR CUDA_LIB_DIR E2E_CUDA E2E_TOOL" >&2
  exit 2
fi
kind=$1 bin=$2 libdir=$3 cudalib=$4 cuda_prog=$5 tool=$6
# absolute paths: the daemons' configs live in a temp dir
bin=$(realpath "$bin") libdir=$(realpath "$libdir") cudalib=$(realpath "$cudalib")
cuda_prog=$(realpath "$cuda_prog") tool=$(realpath "$tool")
[ -e "$libdir/libcuda.so.1" ] || { echo "$0: $libdir/libcuda.so.1 not found" >&2; exit 2; }
[ -e "$cudalib/libcudart.so.13" ] || { echo "$0: $cudalib/libcudart.so.13 not found" >&2; exit 2; }
# the CUDA programs load Flyt's libcuda.so.1 as their driver and NVIDIA's runtime
libpath=$libdir:$cudalib
case $kind in sqlite|postgresql) ;; *) echo "$0: store must be sqlite or postgresql" >&2; exit 2 ;; esac
for p in flyt-cluster-manager flyt-node-manager flyt-client-manager flytctl flyt-server; do
  [ -x "$bin/$p" ] || { echo "$0: $bin/$p not found" >&2; exit 2; }
done
t_start=$SECONDS

# ---------------------------------------------------------------- preflight: skip (77)
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to make network namespaces (ip netns); CI runs it as root"
command -v ip > /dev/null || skip "the ip command (iproute2) is not installed"
P=fe2e$$                     # prefix of everything this run makes (namespaces)
# namespaces left by an earlier run that was killed (its pid is gone): remove them and
# the processes they still hold (daemons that run had started)
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^fe2e[0-9]+-[a-z]+$'); do
  owner=${ns#fe2e}; owner=${owner%%-*}
  kill -0 "$owner" 2>/dev/null && continue
  for q in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$q" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null && echo "(removed namespace $ns of an earlier run that was killed)"
done
for d in /tmp/flyt-e2e-[0-9]*.*; do   # and its temp dir, unless kept on purpose
  [ -d "$d" ] && [ ! -e "$d/KEPT" ] || continue
  owner=${d#/tmp/flyt-e2e-}; owner=${owner%%.*}
  kill -0 "$owner" 2>/dev/null || rm -rf "$d"
done
ip netns add "$P-sw" 2> /tmp/$P-netns.err || {
  why=$(cat /tmp/$P-netns.err); rm -f /tmp/$P-netns.err
  skip "cannot make a network namespace (ip netns add: $why)"; }
rm -f /tmp/$P-netns.err
if [ "$kind" = postgresql ]; then
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ] || [ ! -x "$pgbin/pg_ctl" ]; then
    ip netns del "$P-sw"
    skip "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (scripts/install-deps.sh)"
  fi
fi

# ---------------------------------------------------------------- state, cleanup
tmp=$(mktemp -d /tmp/flyt-e2e-$$.XXXXXX)
chmod 755 "$tmp"               # PostgreSQL runs as an unprivileged user under it
hosts=(cm op na nb va vb)
npass=0 nfail=0
pg_started=

ok() { echo "ok: $*"; npass=$((npass + 1)); }
bad() { echo "FAIL: $*"; nfail=$((nfail + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

show_logs() {
  local f
  for f in "$tmp"/*/*.log; do
    [ -s "$f" ] || continue
    echo "----- ${f#$tmp/} (last 40 lines)"
    tail -n 40 "$f"
  done
  for f in "$tmp"/*.out "$tmp"/*.err; do   # the CUDA programs: what went wrong
    grep -qE '^ *FAIL|^flyt:|Sanitizer|runtime error' "$f" 2>/dev/null || continue
    echo "----- ${f#$tmp/} (some of it was expected: see the checks above)"
    grep -E -A8 '^ *FAIL|^flyt:|Sanitizer|runtime error' "$f" | head -n 40
  done
}

cleanup() {
  local p ns
  trap - EXIT INT TERM
  # our children still running (jobs -pr: never a pid that was reaped and reused):
  # SIGTERM first, so that node managers stop their servers, then SIGKILL
  local left=$(jobs -pr)
  for p in $left; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
  local deadline=$((SECONDS + 8))
  for p in $left; do
    while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    kill -9 "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  if [ -n "$pg_started" ]; then
    ip netns exec "$P-cm" runuser -u "$pg_user" -- "$pgbin/pg_ctl" -D "$tmp/pg/data" -m immediate \
      stop > /dev/null 2>&1
  fi
  # whatever still runs in the namespaces (servers the node managers started): by pid
  for ns in "${hosts[@]}" sw; do
    for p in $(ip netns pids "$P-$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  done
  for ns in "${hosts[@]}" sw; do ip netns del "$P-$ns" 2>/dev/null; done
  if [ -n "${FLYT_E2E_KEEP:-}" ]; then touch "$tmp/KEPT"; echo "(kept $tmp)"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 130' INT TERM

finish() {
  if [ "$nfail" -gt 0 ]; then
    echo "===== daemon and program logs (a check failed)"
    show_logs
  fi
  echo "$npass passed, $nfail failed ($kind store, $((SECONDS - t_start)) s)"
  [ "$nfail" = 0 ] && exit 0 || exit 1
}
die() { bad "$*"; echo "(cannot go on)"; finish; }

# wait_for SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds or time is up
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  while :; do
    "$@" > /dev/null 2>&1 && return 0
    [ $SECONDS -ge $deadline ] && return 1
    sleep 0.2
  done
}

# ---------------------------------------------------------------- the network
# A bridge in namespace "sw"; every host namespace gets eth0, the other end of its veth
# pair enslaved to the bridge. Nothing is made in the host's own network namespace.
declare -A addr=([cm]=10.77.0.1 [op]=10.77.0.2 [na]=10.77.0.11 [nb]=10.77.0.12
                 [va]=10.77.0.21 [vb]=10.77.0.22)
ip -n "$P-sw" link add br0 type bridge || die "bridge"
ip -n "$P-sw" link set br0 up
for h in "${hosts[@]}"; do
  ip netns add "$P-$h" || die "ip netns add $P-$h"
  ip link add eth0 netns "$P-$h" type veth peer name "$h" netns "$P-sw" || die "veth for $h"
  ip -n "$P-sw" link set "$h" master br0 up
  ip -n "$P-$h" link set lo up
  ip -n "$P-$h" addr add "${addr[$h]}/24" dev eth0
  ip -n "$P-$h" link set eth0 up
done
# in_ns NS COMMAND...: runs COMMAND in namespace NS (in the foreground: a function put in
# the background would make $! a subshell's pid; daemons are started with ip netns exec
# itself, which execs the program, so that $! is the daemon's pid)
in_ns() { local h=$1; shift; ip netns exec "$P-$h" "$@"; }
echo "network: namespaces $P-{${hosts[*]// /,}} on bridge br0 of $P-sw, 10.77.0.0/24"

cm_url=http://${addr[cm]}:8600
token() { od -An -tx1 -N32 /dev/urandom | tr -d ' \n'; }
mkdir -p "$tmp/cm" "$tmp/op" "$tmp/node-a" "$tmp/node-b" "$tmp/va" "$tmp/vb"
token > "$tmp/cm/operator.token"; chmod 600 "$tmp/cm/operator.token"
cp "$tmp/cm/operator.token" "$tmp/op/operator.token"
optoken=$(cat "$tmp/op/operator.token")

ctl() { in_ns op env FLYT_CM_URL="$cm_url" FLYT_OPERATOR_TOKEN_FILE="$tmp/op/operator.token" \
          "$bin/flytctl" --timeout 20s "$@"; }
flat() { "$tool" flat; }
ctlj() { ctl --json "$@" | flat; }          # flytctl's JSON, one PATH=VALUE a line
val() { sed -n "s/^$1=//p" | head -n 1; }    # val KEY_REGEX < flat
# raw HTTP from a namespace: http NS METHOD PATH TOKEN BODY -> "STATUS\nBODY"
http() { local h=$1; shift; in_ns "$h" "$tool" http "$1" "${addr[cm]}:8600" "$2" "$3" "$4"; }

# ---------------------------------------------------------------- the store
if [ "$kind" = postgresql ]; then
  pg_user=nobody
  if ! id -u "$pg_user" > /dev/null 2>&1; then
    pg_user=flyt-test
    id -u "$pg_user" > /dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$pg_user"
  fi
  mkdir -p "$tmp/pg"; chown "$pg_user" "$tmp/pg"
  runuser -u "$pg_user" -- "$pgbin/initdb" -D "$tmp/pg/data" -U flyt --auth=trust -E UTF8 --no-sync \
    > "$tmp/pg/initdb.log" 2>&1 || { cat "$tmp/pg/initdb.log"; die "initdb"; }
  in_ns cm runuser -u "$pg_user" -- "$pgbin/pg_ctl" -D "$tmp/pg/data" -l "$tmp/pg/server.log" -w -t 60 \
    -o "-p 5432 -k $tmp/pg -c listen_addresses=127.0.0.1 -c fsync=off" start > /dev/null 2>&1 \
    || { cat "$tmp/pg/server.log"; die "PostgreSQL did not start in namespace $P-cm"; }
  pg_started=1
  store="postgresql://flyt@127.0.0.1:5432/postgres"
  # PostgreSQL needs the key node secrets are sealed with (docs/api.md, "Node secrets at rest")
  token > "$tmp/cm/store.key"; chmod 600 "$tmp/cm/store.key"
  store_key_line="store_key_file = store.key"
  echo "store: PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') at $store in $P-cm (as $pg_user)"
else
  store="sqlite:$tmp/cm/cluster.db"
  echo "store: $store"
fi

# ---------------------------------------------------------------- the daemons
cat > "$tmp/cm/cluster.conf" <<EOF
listen = ${addr[cm]}:8600
store = $store
${store_key_line:-}
operator_token_file = operator.token
heartbeat_interval = 1s
node_timeout = 5s
idle_grace = 4s
placement_policy = spread
server_start_timeout = 20s
log_level = info
EOF
cm_pid=
start_cm() {
  ip netns exec "$P-cm" "$bin/flyt-cluster-manager" --config "$tmp/cm/cluster.conf" >> "$tmp/cm/cluster.log" 2>&1 &
  cm_pid=$!
  wait_for 20 ctl status
}
start_cm || die "the cluster manager did not start (or flytctl cannot reach it from $P-op)"

declare -A nm_pid
node_conf() { # NAME NS
  local n=$1 h=$2
  cat > "$tmp/$n/node.conf" <<EOF
node_id = $n
node_token_file = node.token
cluster_manager = $cm_url
listen = ${addr[$h]}:8601
advertise_host = ${addr[$h]}
server_path = $bin/flyt-server
server_listen_host = ${addr[$h]}
server_unix_socket = false
server_port_min = 9600
server_port_max = 9650
server_start_timeout = 15s
server_stop_grace = 3s
state_dir = state
backend = host
log_level = info
[test]
gpus = 1
gpu_name = "Flyt fake GPU"
gpu_sm_count = 132
gpu_sm_granularity = 8
gpu_memory = 80GiB
EOF
}
start_nm() { # NAME NS
  ip netns exec "$P-$2" "$bin/flyt-node-manager" --config "$tmp/$1/node.conf" >> "$tmp/$1/node.log" 2>&1 &
  nm_pid[$1]=$!
}
for n in node-a:na node-b:nb; do
  name=${n%%:*} h=${n##*:}
  ctlj node add "$name" --host-ip "${addr[$h]}" > "$tmp/$name/add.flat" || die "flytctl node add $name"
  val token < "$tmp/$name/add.flat" > "$tmp/$name/node.token"; chmod 600 "$tmp/$name/node.token"
  [ -s "$tmp/$name/node.token" ] || die "no token for $name"
  node_conf "$name" "$h"
  start_nm "$name" "$h"
done
ntok_a=$(cat "$tmp/node-a/node.token") ntok_b=$(cat "$tmp/node-b/node.token")

# ================================================================= 1. registration
echo "== 1. registration: both nodes ready with their fake GPU"
nodes_ready() { [ "$(ctlj node list | grep -c '^nodes\.[0-9]*\.state=ready$')" = 2 ]; }
wait_for 20 nodes_ready || die "the node managers did not both register: $(ctl node list 2>&1)"
ctlj node list > "$tmp/nodes.flat"
for i in 0 1; do
  id=$(val "nodes\.$i\.id" < "$tmp/nodes.flat")
  h=na; [ "$id" = node-b ] && h=nb
  g="nodes\.$i\.gpus\.0"
  got="$(val "nodes\.$i\.state" < "$tmp/nodes.flat") $(val "nodes\.$i\.host_ip" < "$tmp/nodes.flat") \
$(val "nodes\.$i\.address" < "$tmp/nodes.flat") $(val "$g\.name" < "$tmp/nodes.flat") \
$(val "$g\.sm_count" < "$tmp/nodes.flat")/$(val "$g\.sm_granularity" < "$tmp/nodes.flat") \
$(val "$g\.memory_total" < "$tmp/nodes.flat") $(val "$g\.sm_allocated" < "$tmp/nodes.flat")"
  # 132 SMs declared: the node reports the 128 that make whole groups of 8
  want="ready ${addr[$h]} http://${addr[$h]}:8601 Flyt fake GPU 128/8 85899345920 0"
  check "$id registered over the network: $got" [ "$got" = "$want" ]
  check "$id has exactly one GPU" [ -z "$(val "nodes\.$i\.gpus\.1\.index" < "$tmp/nodes.flat")" ]
done
sm_usable=$(val 'nodes\.0\.gpus\.0\.sm_free' < "$tmp/nodes.flat")
groups=$(val 'nodes\.0\.gpus\.0\.sm_groups' < "$tmp/nodes.flat")
check "each fake GPU offers $sm_usable SMs in $groups groups of 8" [ "$sm_usable" = $((groups * 8)) ]
check "events: node.registered for both nodes" \
  [ "$(ctlj events | grep -c '^events\.[0-9]*\.kind=node\.registered$')" = 2 ]
status_ready2() { ctlj status > "$tmp/status.flat" && grep -qx 'nodes\.ready=2' "$tmp/status.flat" &&
                  grep -qx 'capacity\.gpus=2' "$tmp/status.flat"; }
check "flytctl status: 2 ready nodes, 2 GPUs" status_ready2

# ================================================================= 2. VMs and placement
echo "== 2. VMs (import of original documents, add with a unit); placement"
cat > "$tmp/op/vms.json" <<EOF
[{"_id": {"\$oid": "65f0c0ffee0000000000a001"}, "vm_ip": "${addr[va]}", "host_ip": "${addr[na]}",
  "compute_units": 20, "memory": 2048}]
EOF
ctlj vm import "$tmp/op/vms.json" > "$tmp/va/import.flat" || die "flytctl vm import: $(ctl vm import "$tmp/op/vms.json" 2>&1)"
vm_a=vm-${addr[va]}
mem_a=2147483648 sms_a=24     # 2048 MiB; 20 SMs rounded up to 3 groups of 8
check "vm import made $vm_a (memory 2048 as MiB = $mem_a bytes, 20 SMs, host ${addr[na]})" \
  [ "$(val 'created\.0\.id' < "$tmp/va/import.flat") $(val 'created\.0\.memory' < "$tmp/va/import.flat") $(val 'created\.0\.compute_units' < "$tmp/va/import.flat") $(val 'created\.0\.host_ip' < "$tmp/va/import.flat")" = "$vm_a $mem_a 20 ${addr[na]}" ]
val 'created\.0\.token' < "$tmp/va/import.flat" > "$tmp/va/vm.token"; chmod 600 "$tmp/va/vm.token"
ctlj vm add --id vm-b --vm-ip "${addr[vb]}" --host-ip "${addr[nb]}" --compute-units 40 --memory 3GiB \
  > "$tmp/vb/add.flat" || die "flytctl vm add vm-b"
vm_b=vm-b mem_b=3221225472 sms_b=40
check "vm add made vm-b with --memory 3GiB = $mem_b bytes, 40 SMs" \
  [ "$(val 'vm\.memory' < "$tmp/vb/add.flat") $(val 'vm\.compute_units' < "$tmp/vb/add.flat")" = "$mem_b 40" ]
val token < "$tmp/vb/add.flat" > "$tmp/vb/vm.token"; chmod 600 "$tmp/vb/vm.token"
vtok_a=$(cat "$tmp/va/vm.token") vtok_b=$(cat "$tmp/vb/vm.token")
check "both VM tokens are 64 hex characters" sh -c "echo '$vtok_a$vtok_b' | grep -qxE '[0-9a-f]{128}'"
printf '{"documents": [{"vm_ip": "%s", "host_ip": "%s", "compute_units": 40, "memory": "3072MiB"}]}\n' \
  "${addr[vb]}" "${addr[nb]}" > "$tmp/op/vmb.json"
ctlj vm import "$tmp/op/vmb.json" > "$tmp/vb/import.flat"
check "re-import of vm-b's document with \"3072MiB\" updates it, same share" \
  [ "$(val 'updated\.0\.id' < "$tmp/vb/import.flat") $(val 'updated\.0\.memory' < "$tmp/vb/import.flat") $(grep -c '^created\.0\.' "$tmp/vb/import.flat")" = "vm-b $mem_b 0" ]

declare -A cm_pid_of
start_cmgr() { # NS VM_ID
  local h=$1
  [ -f "$tmp/$h/client.conf" ] || cat > "$tmp/$h/client.conf" <<EOF
cluster_manager = $cm_url
vm_id = $2
vm_token_file = vm.token
socket = $tmp/$h/client.sock
alive_interval = 1s
acquire_timeout = 30s
request_timeout = 25s
retry_max_backoff = 2s
shutdown_timeout = 10s
log_level = info
EOF
  local before=$(grep -c ' info: serving ' "$tmp/$h/client.log" 2>/dev/null)
  ip netns exec "$P-$h" "$bin/flyt-client-manager" --config "$tmp/$h/client.conf" >> "$tmp/$h/client.log" 2>&1 &
  cm_pid_of[$h]=$!
  serving() { [ "$(grep -c ' info: serving ' "$tmp/$h/client.log")" -gt "${before:-0}" ]; }
  wait_for 10 serving && test -S "$tmp/$h/client.sock"
}
start_cmgr va "$vm_a" || die "client manager of $vm_a did not start"
start_cmgr vb "$vm_b" || die "client manager of vm-b did not start"

# The CUDA program in a VM: FLYT_SERVER unset, only the client manager's socket known.
# "${cuda_va[@]}" ARGS & : ip netns exec and env exec the program, so $! is its pid.
cuda_va=(ip netns exec "$P-va" env -u FLYT_SERVER -u FLYT_SESSION_TOKEN
         FLYT_CLIENT_MANAGER="$tmp/va/client.sock" FLYT_CLIENT_MANAGER_TIMEOUT=60
         FLYT_CONNECT_TIMEOUT=10 LD_LIBRARY_PATH="$libpath" "$cuda_prog")
cuda_vb=(ip netns exec "$P-vb" env -u FLYT_SERVER -u FLYT_SESSION_TOKEN
         FLYT_CLIENT_MANAGER="$tmp/vb/client.sock" FLYT_CLIENT_MANAGER_TIMEOUT=60
         FLYT_CONNECT_TIMEOUT=10 LD_LIBRARY_PATH="$libpath" "$cuda_prog")
held() { wait_for 40 grep -q '^held$' "$tmp/$1.out"; }

# The session of process PID, as KEY=VALUE lines (the newest session with that pid)
session_of() {
  ctlj session list | awk -F= -v pid="$1" '
    { line[NR] = $0 }
    $1 ~ /^sessions\.[0-9]+\.pid$/ && $2 == pid { split($1, a, "."); n = a[2] }
    END { if (n == "") exit 1; p = "sessions." n "."
          for (i = 1; i <= NR; i++) if (index(line[i], p) == 1) print substr(line[i], length(p) + 1) }'
}
sid_of() { session_of "$1" | val id; }
state_of() { ctlj session show "$1" | val 'session\.state'; }
state_is() { [ "$(state_of "$1")" = "$2" ]; }
gpu_of() { ctlj node show "$1" | val "node\.gpus\.0\.$2"; }
sessions_flat() { ctlj session list | grep -v '\.last_activity='; }
# event_count KIND SUBJECT: how many events of that kind about that subject
event_count() {
  ctlj events | awk -F= -v k="$1" -v s="$2" '
    $1 ~ /\.kind$/ { split($1, a, "."); kind[a[2]] = $2 }
    $1 ~ /\.subject$/ { split($1, a, "."); subj[a[2]] = $2 }
    END { n = 0; for (i in kind) if (kind[i] == k && subj[i] == s) n++; print n }'
}
# the ports of the flyt-servers running in namespace NS, one a line
server_ports() {
  local q
  for q in $(ip netns pids "$P-$1"); do tr '\0' ' ' < "/proc/$q/cmdline" 2>/dev/null; echo; done |
    sed -n 's/.*flyt-server .*--listen tcp:\/\/[0-9.]*:\([0-9]*\) .*/\1/p'
}
no_server_for() { ! server_ports "$1" | grep -qx "$2"; }

# no fit: vm-b, with no live session yet, asks for more SMs than a GPU has (128); once it
# holds a share, its further processes join that share instead of being placed
ctl vm update vm-b --compute-units 136 > /dev/null || bad "flytctl vm update vm-b"
sessions_flat > "$tmp/sessions-before-nofit.flat"
"${cuda_vb[@]}" nofit > "$tmp/nofit.out" 2> "$tmp/nofit.err"; rc=$?
check "a program of a VM asking 136 SMs sees cudaErrorNoDevice (exit $rc)" [ $rc = 0 ]
check "it is told why, once: $(head -c 300 "$tmp/nofit.err")" \
  sh -c "[ \$(grep -c '^flyt: ' '$tmp/nofit.err') = 1 ] && grep -q 'no_capacity' '$tmp/nofit.err' && grep -q '136' '$tmp/nofit.err'"
check "the refusal recorded no session" diff "$tmp/sessions-before-nofit.flat" <(sessions_flat)
ctl vm update vm-b --compute-units 40 > /dev/null || bad "flytctl vm update vm-b back"

# VM-B first, both GPUs empty: the tie would go to node-a (node id order), host
# preference takes node-b.
"${cuda_vb[@]}" hold $sms_b $mem_b > "$tmp/hb1.out" 2> "$tmp/hb1.err" & hb1=$!
held hb1 || die "a VM-B program got no GPU: $(cat "$tmp/hb1.out" "$tmp/hb1.err")"
session_of $hb1 > "$tmp/hb1.session"
sid_b1=$(val id < "$tmp/hb1.session")
check "VM-B's first session $sid_b1 is on node-b (its host_ip), not node-a (the tie's pick)" \
  [ "$(val node_id < "$tmp/hb1.session") $(val state < "$tmp/hb1.session")" = "node-b active" ]
"${cuda_va[@]}" hold $sms_a $mem_a > "$tmp/ha1.out" 2> "$tmp/ha1.err" & ha1=$!
held ha1 || die "a VM-A program got no GPU: $(cat "$tmp/ha1.out" "$tmp/ha1.err")"
session_of $ha1 > "$tmp/ha1.session"
sid_a1=$(val id < "$tmp/ha1.session")
check "$vm_a's session $sid_a1 is on node-a (its host_ip) with $sms_a SMs (20 rounded up to groups of 8)" \
  [ "$(val node_id < "$tmp/ha1.session") $(val sm_count < "$tmp/ha1.session") $(val memory_quota < "$tmp/ha1.session")" = "node-a $sms_a $mem_a" ]
# node-b now has fewer free SMs than node-a: spread alone would pick node-a
"${cuda_vb[@]}" hold $sms_b $mem_b > "$tmp/hb2.out" 2> "$tmp/hb2.err" & hb2=$!
held hb2 || die "a second VM-B program got no GPU: $(cat "$tmp/hb2.out" "$tmp/hb2.err")"
session_of $hb2 > "$tmp/hb2.session"
sid_b2=$(val id < "$tmp/hb2.session")
check "VM-B's second process joins its share on node-b" \
  [ "$(val node_id < "$tmp/hb2.session")" = node-b ]
g1=$(grep '^sm_groups\.' "$tmp/hb1.session" | cut -d= -f2 | sort -n | tr '\n' ' ')
g2=$(grep '^sm_groups\.' "$tmp/hb2.session" | cut -d= -f2 | sort -n | tr '\n' ' ')
check "VM-B's two processes run on its one set of 5 SM groups: [$g1] and [$g2]" \
  sh -c "[ '$g1' = '$g2' ] && [ \$(echo $g1 | wc -w) = 5 ]"
check "node-b's GPU: VM-B's 40 SMs and 3 GiB allocated once" \
  [ "$(gpu_of node-b sm_allocated) $(gpu_of node-b memory_allocated)" = "40 $mem_b" ]


# ================================================================= 3. a CUDA program through the stack
echo "== 3. a CUDA program in a VM through client manager, cluster manager, node manager, server"
"${cuda_va[@]}" run $sms_a $mem_a > "$tmp/ra.out" 2> "$tmp/ra.err" & ra=$!
wait $ra; rc=$?
check "allocate, copy, check and free through the host backend: $(grep -cE '^ +ok ' "$tmp/ra.out") checks passed (exit $rc)" \
  [ $rc = 0 ]
grep -E -A1 '^ +FAIL ' "$tmp/ra.out" | head -5
check "it saw the VM's share in cudaGetDeviceProperties and cudaMemGetInfo" \
  sh -c "grep -qE '^ +ok +the device has the VM.s $sms_a SMs' '$tmp/ra.out' && grep -qE '^ +ok +the device has the VM.s $mem_a bytes' '$tmp/ra.out' && grep -qE '^ +ok +cudaMemGetInfo' '$tmp/ra.out'"
check "the held programs passed the same checks before holding" \
  sh -c "! grep -qE '^ +FAIL ' '$tmp/ha1.out' '$tmp/hb1.out' '$tmp/hb2.out'"
session_of $ra > "$tmp/ra.session"
check "its session was on node-a with endpoint tcp://${addr[na]}:96xx" \
  sh -c "grep -qx 'node_id=node-a' '$tmp/ra.session' && grep -qE '^endpoint=tcp://${addr[na]//./\\.}:96[0-9][0-9]$' '$tmp/ra.session'"

# ================================================================= 4. release on exit and kill -9
echo "== 4. release when the process ends: exit and kill -9"
sid_ra=$(val id < "$tmp/ra.session")
check "session $sid_ra of the program that exited is released" wait_for 10 state_is "$sid_ra" released
"${cuda_va[@]}" hold $sms_a $mem_a > "$tmp/ha2.out" 2> "$tmp/ha2.err" & ha2=$!
held ha2 || bad "a VM-A program got no GPU: $(cat "$tmp/ha2.out" "$tmp/ha2.err")"
sid_a2=$(sid_of $ha2)
check "session $sid_a2 of the next program is active" state_is "$sid_a2" active
alloc_before=$(gpu_of node-a sm_allocated)
kill -9 $ha2; wait $ha2 2>/dev/null
t0=$SECONDS
check "after kill -9 its session is released (within 10 s)" wait_for 10 state_is "$sid_a2" released
echo "   (released $((SECONDS - t0)) s after the kill)"
check "node-a's allocation went back from $alloc_before to $sms_a SMs" [ "$(gpu_of node-a sm_allocated)" = $sms_a ]
port_a2=$(ctlj session show "$sid_a2" | val 'session\.endpoint'); port_a2=${port_a2##*:}
check "its flyt-server on node-a is gone" wait_for 10 no_server_for na "$port_a2"
# the operator releases a session: its server stops, the program's next call fails
"${cuda_va[@]}" hold $sms_a $mem_a > "$tmp/ha3.out" 2> "$tmp/ha3.err" & ha3=$!
held ha3 || bad "a VM-A program got no GPU: $(cat "$tmp/ha3.out" "$tmp/ha3.err")"
sid_a3=$(sid_of $ha3)
port_a3=$(ctlj session show "$sid_a3" | val 'session\.endpoint'); port_a3=${port_a3##*:}
ctl session release "$sid_a3" > /dev/null; rc=$?
check "flytctl session release $sid_a3 (exit $rc)" [ $rc = 0 ]
check "... its server on node-a is stopped" wait_for 10 no_server_for na "$port_a3"
check "... and the session is released" state_is "$sid_a3" released
kill -USR1 $ha3; wait $ha3; rc=$?
check "the program's next CUDA call fails (exit $rc, not 0)" [ $rc != 0 ]

# ================================================================= 5. idle release
echo "== 5. idle release (idle_grace 4 s): no client connected and no alive report"
# A program that closes its connection to the server but keeps running: its client
# manager still reports it alive, so it is not idle.
"${cuda_vb[@]}" disconnect $sms_b $mem_b > "$tmp/db.out" 2> "$tmp/db.err" & db=$!
wait_for 40 grep -q '^disconnected$' "$tmp/db.out" || bad "the disconnecting program: $(cat "$tmp/db.out" "$tmp/db.err")"
sid_db=$(sid_of $db)
nb_metric_is() { in_ns nb "$tool" http GET "${addr[nb]}:8601" /metrics - - | grep -qx "$1 $2"; }
nb_servers_ok() { nb_metric_is flyt_node_servers 3 && nb_metric_is flyt_node_servers_connected 2; }
check "node-b runs 3 servers, 2 with a client connected (its /metrics)" wait_for 10 nb_servers_ok
sleep 7   # idle_grace + 3 heartbeats: long enough to be released if it counted as idle
check "a running process that disconnected keeps its session past idle_grace (alive reports)" \
  state_is "$sid_db" active
# Without its client manager nobody reports the VM's processes alive: the disconnected
# session is idle; connected ones are not; one whose process then ends becomes idle.
kill -9 "${cm_pid_of[vb]}"; wait "${cm_pid_of[vb]}" 2>/dev/null
t0=$SECONDS
check "with VM-B's client manager killed, the disconnected session $sid_db is released as idle" \
  wait_for 15 state_is "$sid_db" released
echo "   (released $((SECONDS - t0)) s after the client manager was killed)"
reason=$(ctlj session show "$sid_db" | val 'session\.end_reason')
check "its end reason says idle: $reason" [ "${reason#idle}" != "$reason" ]
kill -TERM $hb2; wait $hb2 2>/dev/null
t0=$SECONDS
check "a program that ends while its client manager is down: session $sid_b2 released" \
  wait_for 15 state_is "$sid_b2" released
echo "   (released $((SECONDS - t0)) s after the program ended)"
reason=$(ctlj session show "$sid_b2" | val 'session\.end_reason')
check "... as idle: $reason" [ "${reason#idle}" != "$reason" ]
check "the connected program's session $sid_b1 stays active without alive reports" state_is "$sid_b1" active
start_cmgr vb "$vm_b" || die "VM-B's client manager did not restart"
check "VM-B's client manager restarted, replacing its stale socket" kill -0 "${cm_pid_of[vb]}"
kill -TERM $db; wait $db 2>/dev/null

# ================================================================= 6. node loss and return
echo "== 6. node loss and return (heartbeat 1 s, node_timeout 5 s)"
node_state_is() { [ "$(ctlj node show "$1" | val 'node\.state')" = "$2" ]; }
kill -STOP "${nm_pid[node-b]}"
t0=$SECONDS
check "node-b's node manager stopped (SIGSTOP): node-b is lost" wait_for 20 node_state_is node-b lost
echo "   (lost $((SECONDS - t0)) s after SIGSTOP)"
check "its session $sid_b1 ended lost" state_is "$sid_b1" lost
ctl --json status | flat > "$tmp/status-lost.flat"
check "its capacity is withdrawn: flytctl status counts 1 GPU, $sm_usable SMs" \
  [ "$(val 'capacity\.gpus' < "$tmp/status-lost.flat") $(val 'capacity\.sm_total' < "$tmp/status-lost.flat")" = "1 $sm_usable" ]
http op GET /metrics "$optoken" - > "$tmp/metrics-lost.txt"
check "/metrics has node-a's GPU and not node-b's" \
  sh -c "grep -q '^flyt_gpu_sm_total{node=\"node-a\"' '$tmp/metrics-lost.txt' && ! grep -q 'node=\"node-b\"' '$tmp/metrics-lost.txt' && grep -q '^flyt_nodes{state=\"lost\"} 1' '$tmp/metrics-lost.txt'"
"${cuda_vb[@]}" run $sms_b $mem_b > "$tmp/rb.out" 2> "$tmp/rb.err" & rb=$!
wait $rb; rc=$?
node=$(session_of $rb | val node_id)
check "a new VM-B program runs (exit $rc); its session went to node-a ($node), node-b being lost" \
  [ "$rc $node" = "0 node-a" ]
kill -CONT "${nm_pid[node-b]}"
t0=$SECONDS
check "node-b's node manager continues: node-b is ready again" wait_for 15 node_state_is node-b ready
echo "   (ready $((SECONDS - t0)) s after SIGCONT)"
check "event node.lost and node.returned for node-b" \
  [ "$(event_count node.lost node-b) $(event_count node.returned node-b)" = "1 1" ]
port_b1=$(ctlj session show "$sid_b1" | val 'session\.endpoint'); port_b1=${port_b1##*:}
check "reconciled: the lost session's server is stopped on node-b" wait_for 15 no_server_for nb "$port_b1"
check "the lost session stays lost; node-b has nothing allocated" \
  [ "$(state_of "$sid_b1") $(gpu_of node-b sm_allocated)" = "lost 0" ]
kill -USR1 $hb1; wait $hb1; rc=$?
check "the program of the lost session finds its server gone (exit $rc, not 0)" [ $rc != 0 ]
# the node manager crashes with a session running, and is restarted (by systemd, which
# also kills what the crashed unit left: KillMode=mixed, done here by hand)
"${cuda_vb[@]}" hold $sms_b $mem_b > "$tmp/hb3.out" 2> "$tmp/hb3.err" & hb3=$!
held hb3 || bad "VM-B program after node-b returned: $(cat "$tmp/hb3.out" "$tmp/hb3.err")"
sid_b3=$(sid_of $hb3)
check "a VM-B session goes to node-b again: $sid_b3" [ "$(session_of $hb3 | val node_id)" = node-b ]
rereg=$(event_count node.reregistered node-b)
kill -9 "${nm_pid[node-b]}"; wait "${nm_pid[node-b]}" 2>/dev/null
for q in $(ip netns pids "$P-nb"); do kill -9 "$q" 2>/dev/null; done
start_nm node-b nb
check "node-b's restarted node manager registers again: ready" wait_for 15 node_state_is node-b ready
check "event node.reregistered for node-b" [ "$(event_count node.reregistered node-b)" = $((rereg + 1)) ]
check "reconciled at registration: session $sid_b3, whose server is gone, ended lost" \
  wait_for 10 state_is "$sid_b3" lost
check "node-b has nothing allocated" [ "$(gpu_of node-b sm_allocated)" = 0 ]
kill -TERM $hb3; wait $hb3 2>/dev/null

# live sessions for what follows: one on each node
"${cuda_vb[@]}" hold $sms_b $mem_b > "$tmp/hb4.out" 2> "$tmp/hb4.err" & hb4=$!
held hb4 || die "VM-B program after node-b restarted: $(cat "$tmp/hb4.out" "$tmp/hb4.err")"
sid_b4=$(sid_of $hb4)
check "VM-B's new session $sid_b4 is on node-b" [ "$(session_of $hb4 | val node_id)" = node-b ]

# ================================================================= 9. bad input
echo "== 9. bad input through the network: clear errors, nothing changed"
snapshot() { # the state an operator sees, minus heartbeat and activity times
  { ctlj vm list; ctlj node list | grep -v '\.last_heartbeat='
    ctlj session list | grep -v '\.last_activity='; ctlj events; } > "$1"
}
snapshot "$tmp/snap-bad-before"
# expect NS METHOD PATH TOKEN BODY STATUS CODE [TEXT]: the answer has STATUS and error
# code CODE (and TEXT in its message)
expect() {
  local h=$1 m=$2 path=$3 tok=$4 body=$5 st=$6 code=$7 text=${8:-} out
  out=$(http "$h" "$m" "$path" "$tok" "$body")
  local got_st got_code msg
  got_st=$(echo "$out" | head -n 1)
  got_code=$(echo "$out" | tail -n +2 | flat 2>/dev/null | val 'error\.code')
  msg=$(echo "$out" | tail -n +2 | flat 2>/dev/null | val 'error\.message')
  local what="$m $path ${tok:0:6}${tok:+..} -> $got_st $got_code: $msg"
  [ "$tok" = - ] && what="$m $path (no token) -> $got_st $got_code: $msg"
  if [ "$got_st" = "$st" ] && [ "$got_code" = "$code" ] && { [ -z "$text" ] || [[ "$msg" == *"$text"* ]]; }; then
    ok "$what"
  else
    bad "$what (wanted $st $code${text:+ mentioning '$text'})"
  fi
}
newvm='"vm_ip": "10.77.0.99", "host_ip": "10.77.0.12"'
expect op POST /v1/vms "$optoken" '{"vm_ip": "10.77.0.99", ' 400 bad_request
expect op POST /v1/vms "$optoken" '[1, 2]' 400 bad_request
expect op POST /v1/vms "$optoken" "{$newvm, \"memory\": \"1GiB\"}" 400 bad_request compute_units
expect op POST /v1/vms "$optoken" "{$newvm, \"compute_units\": -8, \"memory\": \"1GiB\"}" 400 bad_request compute_units
expect op POST /v1/vms "$optoken" "{$newvm, \"compute_units\": 8, \"memory\": \"1.5GiB\"}" 400 bad_request memory
expect op POST /v1/vms "$optoken" "{\"id\": \"vm-b\", $newvm, \"compute_units\": 8, \"memory\": 1024}" 409 conflict
expect op POST /v1/vms/import "$optoken" "{\"documents\": [{$newvm, \"compute_units\": 8, \"memory\": 1024}, {\"vm_ip\": \"10.77.0.98\", \"host_ip\": \"10.77.0.12\", \"compute_units\": 8, \"memory\": \"lots\"}]}" 400 bad_request 'documents[1].memory'
expect op GET /v1/vms/vm-nope "$optoken" - 404 not_found
expect op PATCH /v1/vms/vm-nope "$optoken" '{"compute_units": 8}' 404 not_found
expect op PATCH /v1/vms/vm-b "$optoken" '{"compute_units": "lots"}' 400 bad_request compute_units
expect op DELETE /v1/vms/vm-b "$optoken" - 409 conflict
expect op GET /v1/sessions/s-nope "$optoken" - 404 not_found
expect op DELETE /v1/sessions/s-nope "$optoken" - 404 not_found
expect op DELETE /v1/nodes/node-nope "$optoken" - 404 not_found
expect op POST /v1/nodes "$optoken" "{\"id\": \"node-a\", \"host_ip\": \"${addr[na]}\"}" 409 conflict
expect op POST /v1/nodes "$optoken" '{"id": "bad id!", "host_ip": "10.77.0.13"}' 400 bad_request id
expect op GET /v1/vms - - 401 unauthorized
expect op GET /v1/vms "$(printf '0%.0s' $(seq 64))" - 401 unauthorized
expect op GET /metrics - - 401 unauthorized
expect va GET /v1/vms "$vtok_a" - 403 forbidden
expect na GET /v1/sessions "$ntok_a" - 403 forbidden
expect va DELETE "/v1/sessions/$sid_b4" "$vtok_a" - 403 forbidden
expect va POST "/v1/sessions/$sid_b4/alive" "$vtok_a" - 403 forbidden
expect va POST /v1/sessions "$vtok_a" '{"pid": "one"}' 400 bad_request pid
expect vb POST /v1/sessions - '{"pid": 4242}' 401 unauthorized
expect na POST /v1/nodes/node-b/heartbeat "$ntok_a" '{"sessions": []}' 403 forbidden
expect na POST /v1/nodes/node-b/register "$ntok_a" '{"address": "http://10.77.0.11:8601", "host_ip": "10.77.0.11", "gpus": [], "sessions": []}' 403 forbidden
expect na POST /v1/nodes/node-a/heartbeat "$ntok_a" 'not json' 400 bad_request
expect na POST "/v1/nodes/node-a/sessions/$sid_b4/ended" "$ntok_a" '{"reason": "released"}' 404 not_found
expect vb POST /v1/vms "$vtok_b" "{$newvm, \"compute_units\": 8, \"memory\": 1024}" 403 forbidden
expect op GET /v1/nope "$optoken" - 404 not_found
expect op PUT /v1/vms "$optoken" '{}' 405 bad_request
head -c $((1024 * 1024 + 100)) /dev/zero | tr '\0' ' ' > "$tmp/op/big.json"
expect op POST /v1/vms "$optoken" "@$tmp/op/big.json" 413 bad_request
# the client manager's socket in a VM: bad lines, and a process asking for another one
sock_expect() { # NS LINE TEXT: the answer is status=error with TEXT in its message
  local out
  out=$(in_ns "$1" "$tool" sock "$tmp/$1/client.sock" "$2")
  if [[ "$out" == "status=error message="*"$3"* ]]; then
    ok "client manager of $1: '$2' -> $out"
  else
    bad "client manager of $1: '$2' -> '$out' (wanted status=error ...$3...)"
  fi
}
sock_expect va 'hello world' 'no op'
sock_expect va 'op=steal pid=%PID%' 'unknown op'
sock_expect va 'op=acquire pid=-3' 'pid'
sock_expect vb 'op=acquire pid=%PPID%' 'is not the caller'
sock_expect vb "op=release pid=$hb4" 'is not the caller'
# flytctl's view of errors: exit status 1 for a refusal, 3 for a bad token
ctl vm show vm-nope > /dev/null 2> "$tmp/op/ctl.err"; rc=$?
check "flytctl vm show vm-nope: exit 1, '$(head -n 1 "$tmp/op/ctl.err")'" \
  sh -c "[ $rc = 1 ] && grep -q 'not_found' '$tmp/op/ctl.err' && grep -q 'HTTP 404' '$tmp/op/ctl.err'"
echo "$vtok_a" > "$tmp/op/wrong.token"; chmod 600 "$tmp/op/wrong.token"
in_ns op "$bin/flytctl" --server "$cm_url" --token-file "$tmp/op/wrong.token" vm list > /dev/null 2>&1; rc=$?
check "flytctl with a VM's token instead of the operator's: exit $rc (3)" [ $rc = 3 ]
sleep 1.5    # a heartbeat or two
snapshot "$tmp/snap-bad-after"
check "nothing changed: VMs, nodes, sessions and events are as before" \
  diff "$tmp/snap-bad-before" "$tmp/snap-bad-after"
check "VM-B's session $sid_b4 is still active" state_is "$sid_b4" active

# ================================================================= 7. cluster manager restart
echo "== 7. the cluster manager is killed (kill -9) and restarted on the same store"
snapshot "$tmp/snap-restart-before"
ctl --json status | flat | grep -v '^health\.' > "$tmp/status-before"
last_event=$(ctlj events | sed -n 's/^events\.[0-9]*\.id=//p' | tail -n 1)
kill -9 "$cm_pid"; wait "$cm_pid" 2>/dev/null
sleep 1.5   # heartbeats and alive reports fail meanwhile
start_cm || die "the cluster manager did not restart on its store"
ok "the cluster manager is back on the same store"
snapshot "$tmp/snap-restart-after"
check "VMs, nodes (GPUs, allocations), sessions and events are as before the restart" \
  diff "$tmp/snap-restart-before" "$tmp/snap-restart-after"
sleep 3     # the nodes heartbeat and the client managers report alive to the new process
snapshot "$tmp/snap-restart-later"
ctl --json status | flat | grep -v '^health\.' > "$tmp/status-after"
check "... and still so after 3 s of heartbeats and alive reports" \
  diff "$tmp/snap-restart-before" "$tmp/snap-restart-later"
check "nothing counted twice: flytctl status capacity and session counts are the same" \
  diff "$tmp/status-before" "$tmp/status-after"
check "node-a allocates $sms_a SMs and node-b $sms_b (one live session each)" \
  [ "$(gpu_of node-a sm_allocated) $(gpu_of node-b sm_allocated)" = "$sms_a $sms_b" ]
kill -USR1 $ha1 $hb4
wait $ha1; rc1=$?; wait $hb4; rc2=$?
check "the programs held across the restart read their data back and exit 0 ($rc1, $rc2)" \
  [ "$rc1 $rc2" = "0 0" ]
both_released() { state_is "$sid_a1" released && state_is "$sid_b4" released; }
check "their sessions are released through the restarted cluster manager" wait_for 10 both_released
ctlj events | sed -n 's/^events\.[0-9]*\.id=//p' > "$tmp/event-ids"
dups=$(sort -n "$tmp/event-ids" | uniq -d | wc -l) last=$(tail -n 1 "$tmp/event-ids")
check "events go on after $last_event (now $last), no id used twice" [ "$dups $((last > last_event))" = "0 1" ]
"${cuda_vb[@]}" run $sms_b $mem_b > "$tmp/rb2.out" 2> "$tmp/rb2.err"; rc=$?
check "a new program runs after the restart (exit $rc)" [ $rc = 0 ]

# Killed while a session is starting: node-a's node manager is stopped (SIGSTOP), so the
# cluster manager's request to start a server hangs with the session "starting".
echo "== 7b. the cluster manager is killed while a session is starting"
kill -STOP "${nm_pid[node-a]}"
"${cuda_va[@]}" run $sms_a $mem_a > "$tmp/rs.out" 2> "$tmp/rs.err" & rs=$!
starting_sid() { ctlj session list --state starting | val 'sessions\.0\.id'; }
has_starting() { [ -n "$(starting_sid)" ]; }
wait_for 15 has_starting || bad "no session became starting: $(ctl session list 2>&1 | tail -n 3)"
sid_s=$(starting_sid)
kill -9 "$cm_pid"; wait "$cm_pid" 2>/dev/null
start_cm || die "the cluster manager did not restart on its store"
kill -CONT "${nm_pid[node-a]}"
check "the session left starting ($sid_s) is failed at the next start" state_is "$sid_s" failed
wait $rs; rc=$?
check "the program got a session on its client manager's retry and ran (exit $rc)" [ $rc = 0 ]
n_rs=$(ctlj session list --vm "$vm_a" | grep -cx "sessions\.[0-9]*\.pid=$rs")
check "its process has 2 sessions: the failed one and the one it used ($n_rs)" [ "$n_rs" = 2 ]
servers_a_none() { [ "$(server_ports na | wc -l)" = 0 ] && [ "$(gpu_of node-a sm_allocated)" = 0 ]; }
check "reconciled: the server node-a started late for the failed session is stopped; node-a runs none, allocates 0" \
  wait_for 15 servers_a_none
check "node-a stayed ready" node_state_is node-a ready

# the operator removes a VM with a live session: the session ends, and the VM's client
# manager, whose token is gone, gets no GPU for its next process
echo "== the operator removes VM vm-b (--force) while it has a live session"
"${cuda_vb[@]}" hold $sms_b $mem_b > "$tmp/hb5.out" 2> "$tmp/hb5.err" & hb5=$!
held hb5 || bad "VM-B program: $(cat "$tmp/hb5.out" "$tmp/hb5.err")"
sid_b5=$(sid_of $hb5)
ctl vm remove vm-b > /dev/null 2>&1; rc=$?
check "flytctl vm remove vm-b without --force is refused (exit $rc): it has a live session" [ $rc = 1 ]
ctl vm remove vm-b --force > /dev/null; rc=$?
check "flytctl vm remove vm-b --force (exit $rc) releases its session" wait_for 10 state_is "$sid_b5" released
ctlj vm list > "$tmp/vms-after-remove.flat"
check "flytctl vm list has $vm_a and not vm-b" \
  sh -c "grep -qx 'vms\.0\.id=$vm_a' '$tmp/vms-after-remove.flat' && ! grep -q '=vm-b\$' '$tmp/vms-after-remove.flat'"
kill -TERM $hb5; wait $hb5 2>/dev/null
"${cuda_vb[@]}" nofit > "$tmp/gone.out" 2> "$tmp/gone.err"; rc=$?
check "a new VM-B program gets no GPU (exit $rc): $(head -c 250 "$tmp/gone.err")" \
  sh -c "[ $rc = 0 ] && grep -q 'unauthorized' '$tmp/gone.err'"

# ================================================================= the end
echo "== stopping: every daemon ends on SIGTERM with status 0, nothing left running"
check "no live session is left" [ "$(ctlj session list --state live | grep -c '^sessions\.[0-9]*\.id=')" = 0 ]
check "both GPUs have nothing allocated" \
  [ "$(gpu_of node-a sm_allocated) $(gpu_of node-b sm_allocated)" = "0 0" ]
for h in va vb; do
  kill -TERM "${cm_pid_of[$h]}"; wait "${cm_pid_of[$h]}"; rc=$?
  check "client manager of $h exits 0 ($rc)" [ $rc = 0 ]
done
for n in node-a node-b; do
  kill -TERM "${nm_pid[$n]}"; wait "${nm_pid[$n]}"; rc=$?
  check "node manager $n exits 0 ($rc)" [ $rc = 0 ]
done
kill -TERM "$cm_pid"; wait "$cm_pid"; rc=$?
check "cluster manager exits 0 ($rc)" [ $rc = 0 ]
# processes still exiting (an empty command line) get a moment to be gone
for _ in $(seq 30); do
  left=""
  for h in cm na nb va vb; do
    for q in $(ip netns pids "$P-$h"); do
      c=$(tr '\0' ' ' < /proc/$q/cmdline 2>/dev/null)
      case $c in *postgres*) ;; *) left="$left [$h: $q $c]" ;; esac
    done
  done
  [ -z "$left" ] && break
  sleep 0.1
done
check "no process of ours is left in the namespaces${left}" [ -z "$left" ]
sanitizer=$(grep -lE 'AddressSanitizer|LeakSanitizer|runtime error:' "$tmp"/*.out "$tmp"/*.err "$tmp"/*/*.log 2>/dev/null | tr '\n' ' ')
check "no sanitizer report in any log${sanitizer:+: $sanitizer}" [ -z "$sanitizer" ]
finish
