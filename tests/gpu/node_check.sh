#!/usr/bin/env bash
# The control plane on a real GPU: flyt-cluster-manager and flyt-node-manager
# (backend = cuda) on this machine, a VM's session placed on the GPU, and
# share_check run through the session's server with its session token.
#
# usage: tests/gpu/node_check.sh BUILD_DIR
#
#   BUILD_DIR holds bin/flyt-cluster-manager, bin/flyt-node-manager,
#   bin/flyt-server, lib/libcuda.so.1 (the Flyt client) and
#   gpu-tests/share_check. The daemons' libraries the machine lacks
#   (libmicrohttpd, libpq, ...) must be findable through LD_LIBRARY_PATH.
#   python3 makes the HTTP calls (urllib).
#
# Checks: the node registers with the GPU's real UUID, SM count and
# granularity; a VM of 32 SMs and 8 GiB gets a session whose server admits the
# program only with its token and shows it 32 SMs and 8 GiB (share_check's own
# checks: blocks on at most 32 SMs on every stream kind, allocation past the
# quota refused); two sessions of 56 SMs run at once (with NODE_CHECK_MPS=1
# the node manager runs MPS and their kernel times should be those of one
# alone); four tenants of 16, 24, 32 and 48 SMs at once, each timed alone and
# together (with MPS each must keep its alone time within 15%); release stops
# the server; a live resize of a running program from
# 16 to 64 SMs and back (a table of its kernel time and distinct SMs per
# interval, and the resize times); four processes of one 16-SM VM run at once
# on its one set of SM groups, the GPU holding 16 SMs for them; SIGTERM leaves
# nothing running.
#
# Environment (optional): OUT (results), NODE_CHECK_MPS (0),
# FLYT_TEST_CUDA_LIB (/usr/local/cuda/lib64, not needed by the daemons).
# Exit status 0 when every check passed.
set -u
die() { echo "node_check: $*" >&2; exit 2; }
[ $# -ge 1 ] || { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "no build directory $1"
for f in bin/flyt-cluster-manager bin/flyt-node-manager bin/flyt-server gpu-tests/share_check; do
    [ -x "$BUILD/$f" ] || die "no $BUILD/$f"
done
command -v python3 >/dev/null || die "python3 is needed for the HTTP calls"
DIR="${OUT:-$(mktemp -d /tmp/flyt-node-check.XXXXXX)}/node-check"
rm -rf "$DIR"
mkdir -p "$DIR/state" && chmod 700 "$DIR/state" || die "cannot create $DIR"
MPS="${NODE_CHECK_MPS:-0}"
FAILED=0
fail() { echo "node_check: FAIL $*"; FAILED=1; }
ok() { echo "node_check: ok   $*"; }

CM_PID="" NM_PID=""
# shellcheck disable=SC2317 # invoked through the EXIT trap
cleanup() {
    [ -n "$NM_PID" ] && kill -TERM "$NM_PID" 2>/dev/null && wait "$NM_PID" 2>/dev/null
    [ -n "$CM_PID" ] && kill -TERM "$CM_PID" 2>/dev/null && wait "$CM_PID" 2>/dev/null
}
trap cleanup EXIT

# api METHOD URL TOKEN [JSON] -> prints "STATUS BODY"
api() {
    python3 - "$@" <<'EOF'
import json, sys, urllib.request, urllib.error
method, url, token = sys.argv[1:4]
data = sys.argv[4].encode() if len(sys.argv) > 4 else None
req = urllib.request.Request(url, data=data, method=method)
req.add_header("Authorization", "Bearer " + token)
if data:
    req.add_header("Content-Type", "application/json")
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        print(r.status, r.read().decode() or "{}")
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode() or "{}")
except Exception as e:
    print(0, json.dumps({"error": str(e)}))
EOF
}
# jget JSON PATH (a.b.0.c) -> value
jget() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
v = json.loads(sys.argv[1])
for k in sys.argv[2].split("."):
    v = v[int(k)] if isinstance(v, list) else v.get(k) if isinstance(v, dict) else None
print("" if v is None else v if not isinstance(v, (dict, list)) else json.dumps(v))
EOF
}
wait_file() { for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

python3 -c 'import os; print(os.urandom(32).hex())' >"$DIR/operator.token"
chmod 600 "$DIR/operator.token"
OP=$(cat "$DIR/operator.token")
cat >"$DIR/cm.conf" <<EOF
listen = 127.0.0.1:0
store = sqlite:$DIR/cm.db
operator_token_file = operator.token
heartbeat_interval = 1s
node_timeout = 10s
idle_grace = 10m
EOF
"$BUILD/bin/flyt-cluster-manager" --config "$DIR/cm.conf" --port-file "$DIR/cm.port" \
    >"$DIR/cm.log" 2>&1 &
CM_PID=$!
wait_file "$DIR/cm.port" || die "the cluster manager did not start (see $DIR/cm.log)"
CM="http://127.0.0.1:$(cat "$DIR/cm.port")"

read -r st body < <(api POST "$CM/v1/nodes" "$OP" '{"id": "gpu-node", "host_ip": "127.0.0.1"}')
[ "$st" = 201 ] || die "POST /v1/nodes: $st $body"
jget "$body" token >"$DIR/node.token"
chmod 600 "$DIR/node.token"

cat >"$DIR/nm.conf" <<EOF
node_id = gpu-node
node_token_file = node.token
cluster_manager = $CM
listen = 127.0.0.1:0
advertise_host = 127.0.0.1
server_path = $BUILD/bin/flyt-server
server_listen_host = 127.0.0.1
server_port_min = 29600
server_port_max = 29650
state_dir = $DIR/state
backend = cuda
mps = $([ "$MPS" = 1 ] && echo true || echo false)
mps_pipe_dir = $DIR/mps-pipe
mps_log_dir = $DIR/mps-log
EOF
"$BUILD/bin/flyt-node-manager" --config "$DIR/nm.conf" --port-file "$DIR/nm.port" \
    >"$DIR/nm.log" 2>&1 &
NM_PID=$!
wait_file "$DIR/nm.port" || { tail -20 "$DIR/nm.log"; die "the node manager did not start"; }
for _ in $(seq 1 100); do
    read -r st body < <(api GET "$CM/v1/nodes/gpu-node" "$OP")
    [ "$(jget "$body" node.state)" = ready ] && break
    sleep 0.2
done
if [ "$(jget "$body" node.state)" = ready ]; then
    ok "node registered: $(jget "$body" node.gpus)"
else
    fail "node not ready: $body"; tail -20 "$DIR/nm.log"; exit 1
fi
nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader 2>/dev/null | head -4
uuid=$(jget "$body" node.gpus.0.uuid)
if nvidia-smi -L 2>/dev/null | grep -q "$uuid"; then ok "GPU 0's UUID $uuid is nvidia-smi's"
else fail "GPU 0's UUID $uuid is not in nvidia-smi -L"; fi

vm() { # ip sms memory -> token
    read -r st body < <(api POST "$CM/v1/vms" "$OP" \
        "{\"vm_ip\": \"$1\", \"host_ip\": \"127.0.0.1\", \"compute_units\": $2, \"memory\": \"$3\"}")
    [ "$st" = 201 ] || die "POST /v1/vms: $st $body"
    jget "$body" token
}
session() { # vm-token pid -> "id endpoint token"
    read -r st body < <(api POST "$CM/v1/sessions" "$1" "{\"pid\": $2}")
    [ "$st" = 201 ] || { echo "node_check: POST /v1/sessions: $st $body" >&2; return 1; }
    echo "$(jget "$body" session.id) $(jget "$body" session.endpoint) $(jget "$body" token)"
}
run_share() { # name endpoint token expect-sms expect-quota-bytes
    env FLYT_SERVER="$2" FLYT_SESSION_TOKEN="$3" LD_LIBRARY_PATH="$BUILD/lib" \
        SHARE_EXPECT_SMS="$4" SHARE_EXPECT_QUOTA="$5" timeout 300 \
        "$BUILD/gpu-tests/share_check" >"$DIR/$1.txt" 2>&1
}

V1=$(vm 10.250.0.1 32 8GiB)
read -r S1 E1 T1 < <(session "$V1" 1001) || die "no session"
ok "session $S1 at $E1"
if run_share share32 "$E1" "$T1" 32 $((8 << 30)); then
    ok "share_check through the session: $(grep RESULT "$DIR/share32.txt")"
else
    fail "share_check through the session:"; grep -E 'FAIL|flyt' "$DIR/share32.txt" | head -5
fi
if env FLYT_SERVER="$E1" LD_LIBRARY_PATH="$BUILD/lib" timeout 60 "$BUILD/gpu-tests/share_check" \
    >"$DIR/notoken.txt" 2>&1; then
    fail "without the session token the program got in"
else
    ok "without the session token the program is refused"
fi
read -r st _ < <(api DELETE "$CM/v1/sessions/$S1" "$V1")
if [ "$st" = 204 ]; then ok "released"; else fail "release: $st"; fi
sleep 1
if grep -q "session $S1: server pid .* stopped" "$DIR/nm.log"; then ok "its server stopped"
else fail "its server did not stop"; fi

# two tenants of 56 SMs (two of 64 do not fit in the 15 groups of 8 an H100 has) at once (disjoint SM groups: the cluster manager gives them)
V2=$(vm 10.250.0.2 56 8GiB)
V3=$(vm 10.250.0.3 56 8GiB)
read -r S2 E2 T2 < <(session "$V2" 1002) || die "no session"
read -r S3 E3 T3 < <(session "$V3" 1003) || die "no session"
run_share alone56 "$E2" "$T2" 56 $((8 << 30)) || fail "56-SM tenant alone"
run_share pairA "$E2" "$T2" 56 $((8 << 30)) & pa=$!
run_share pairB "$E3" "$T3" 56 $((8 << 30)) & pb=$!
wait $pa || fail "tenant A of the pair"
wait $pb || fail "tenant B of the pair"
ms() { sed -n 's/^RESULT ms=\([0-9.]*\).*/\1/p' "$DIR/$1.txt"; }
echo "node_check: 56-SM tenant alone $(ms alone56) ms; two at once $(ms pairA) / $(ms pairB) ms" \
     "(MPS $([ "$MPS" = 1 ] && echo on || echo off): with MPS both should be close to alone)"
read -r _ body < <(api GET "$CM/v1/sessions/$S2" "$OP")
echo "node_check: groups A $(jget "$body" session.sm_groups)"
read -r _ body < <(api GET "$CM/v1/sessions/$S3" "$OP")
echo "node_check: groups B $(jget "$body" session.sm_groups)"

# four tenants with different shares at once (16 + 24 + 32 + 48 = 120 SMs: the 15 groups of
# 8): each alone first, then all four together; with MPS each keeps its alone time
api DELETE "$CM/v1/sessions/$S2" "$V2" >/dev/null
api DELETE "$CM/v1/sessions/$S3" "$V3" >/dev/null
sleep 1
Q_SMS=(16 24 32 48) Q_S=() Q_E=() Q_T=() Q_V=()
for i in 0 1 2 3; do
    Q_V[i]=$(vm "10.250.1.$((i + 1))" "${Q_SMS[i]}" 4GiB)
    read -r Q_S[i] Q_E[i] Q_T[i] < <(session "${Q_V[i]}" $((1100 + i))) || die "no session"
done
for i in 0 1 2 3; do
    run_share "quad-alone$i" "${Q_E[i]}" "${Q_T[i]}" "${Q_SMS[i]}" $((4 << 30)) ||
        fail "${Q_SMS[i]}-SM tenant alone"
done
qp=()
for i in 0 1 2 3; do
    run_share "quad-together$i" "${Q_E[i]}" "${Q_T[i]}" "${Q_SMS[i]}" $((4 << 30)) & qp[i]=$!
done
for i in 0 1 2 3; do wait "${qp[i]}" || fail "${Q_SMS[i]}-SM tenant of the four"; done
echo "node_check: four tenants at once (MPS $([ "$MPS" = 1 ] && echo on || echo off))"
echo "node_check:   SMs  alone ms  together ms  together/alone  groups"
for i in 0 1 2 3; do
    a=$(ms "quad-alone$i") t=$(ms "quad-together$i")
    read -r _ body < <(api GET "$CM/v1/sessions/${Q_S[i]}" "$OP")
    r=$(python3 -c "print('%.2f' % ($t / $a))" 2>/dev/null || echo "?")
    printf 'node_check:   %3d  %8s  %11s  %14s  %s\n' "${Q_SMS[i]}" "$a" "$t" "$r" \
        "$(jget "$body" session.sm_groups)"
    if [ "$MPS" = 1 ]; then
        if python3 -c "import sys; sys.exit(0 if $t <= 1.15 * $a else 1)" 2>/dev/null; then
            ok "the ${Q_SMS[i]}-SM tenant ran as fast with the three others as alone"
        else
            fail "the ${Q_SMS[i]}-SM tenant slowed down beside the others ($a -> $t ms)"
        fi
    fi
done
for i in 0 1 2 3; do api DELETE "$CM/v1/sessions/${Q_S[i]}" "${Q_V[i]}" >/dev/null; done
sleep 1

# live resize: a running program's share goes 16 -> 64 -> 16 SMs (flytctl session resize's
# API); its streams (with their priority and attributes), events and memory stay, its kernel
# time and SM ids follow the share, and so does the SM count it sees (SHARE_CHANGED)
V4=$(vm 10.250.0.4 16 8GiB)
read -r S4 E4 T4 < <(session "$V4" 1004) || die "no session"
env FLYT_SERVER="$E4" FLYT_SESSION_TOKEN="$T4" LD_LIBRARY_PATH="$BUILD/lib" SHARE_EXPECT_SMS=16 \
    SHARE_INTERVALS=24 SHARE_INTERVAL_MS=200 timeout 300 "$BUILD/gpu-tests/share_check" \
    >"$DIR/resize.txt" 2>&1 &
rp=$!
intervals() { grep -c '^interval ' "$DIR/resize.txt"; }
until_intervals() {
    for _ in $(seq 1 600); do [ "$(intervals)" -ge "$1" ] && return 0; sleep 0.05; done
    return 1
}
: >"$DIR/resize-marks.txt"
for step in "6 64" "14 16"; do
    read -r at sms <<<"$step"
    until_intervals "$at" || fail "the program did not reach interval $at"
    read -r st body < <(api POST "$CM/v1/sessions/$S4/resize" "$OP" "{\"sm_count\": $sms}")
    echo "$(intervals) $sms" >>"$DIR/resize-marks.txt"
    if [ "$st" = 200 ] && [ "$(jget "$body" node.applied)" = 1 ]; then
        ok "resize to $sms SMs: server apply $(jget "$body" node.apply_ms) ms after a drain of" \
           "$(jget "$body" node.drain_ms) ms, in force $(jget "$body" node.in_force_ms) ms after" \
           "the node posted it, $(jget "$body" cluster_ms) ms end to end"
    else
        fail "resize to $sms SMs: $st $body"
    fi
done
wait $rp || fail "share_check during the resizes: $(grep FAIL "$DIR/resize.txt" | head -3)"
grep -E "program saw|kept its" "$DIR/resize.txt" | sed 's/^/node_check: /'
python3 - "$DIR/resize.txt" "$DIR/resize-marks.txt" <<'EOF' || FAILED=1
import re, sys
rows = [tuple(map(float, re.findall(r"[-0-9.]+", l)[:3]))
        for l in open(sys.argv[1]) if l.startswith("interval ")]
sees = [int(re.search(r"sees=(\d+)", l).group(1))
        for l in open(sys.argv[1]) if l.startswith("interval ")]
marks = [tuple(map(int, l.split())) for l in open(sys.argv[2])]
def share(i):  # intervals begun after the command returned run on the new share;
    s = 16     # the one during which it ran may run on either
    for at, sms in marks:
        if i > at:
            s = sms
        elif i == at:
            s = max(s, sms)
    return s
def seen_ok(i, n):  # what cudaDeviceGetAttribute may answer after interval i's work
    s, ok = 16, {16}
    for at, sms in marks:
        if i > at:
            s, ok = sms, {sms}
        elif i == at:
            ok = {s, sms}
    return n in ok
print("node_check: interval  share  kernel ms  distinct SMs  SMs seen")
bad = wrong_seen = 0
for (i, ms, d), n in zip(rows, sees):
    s = share(int(i))
    print("node_check: %8d  %5d  %9.3f  %12d  %8d" % (i, s, ms, d, n))
    bad += d > s
    wrong_seen += not seen_ok(int(i), n)
print("node_check: %s no interval ran on more SMs than its share"
      % ("ok  " if not bad else "FAIL"))
print("node_check: %s the program saw each interval's share as its SM count"
      % ("ok  " if not wrong_seen else "FAIL"))
sys.exit(1 if bad or wrong_seen else 0)
EOF
api DELETE "$CM/v1/sessions/$S4" "$V4" >/dev/null

# one VM, four processes (issue 8): the share is the VM's: all four sessions run on its one
# set of SM groups, the GPU's allocated SMs grow by 16 once, and each program's kernels run
# on at most those 16 SMs (share_check's own check); with MPS they share them at once, so
# each one's kernel time should be about four times the 16-SM one alone
sleep 1
V5=$(vm 10.250.0.5 16 8GiB)
VSIDS=() VPIDS=()
for i in 1 2 3 4; do
    read -r S E T < <(session "$V5" $((1020 + i))) || die "no session"
    VSIDS+=("$S")
    run_share "vmproc$i" "$E" "$T" 16 0 & VPIDS+=($!)
done
vgroups=$(for s in "${VSIDS[@]}"; do
    read -r _ b < <(api GET "$CM/v1/sessions/$s" "$OP"); jget "$b" session.sm_groups
done | sort -u)
if [ "$(echo "$vgroups" | wc -l)" = 1 ]; then
    ok "the VM's 4 processes run on its one set of SM groups $vgroups"
else
    fail "the VM's 4 processes got different SM groups: $vgroups"
fi
read -r _ body < <(api GET "$CM/v1/nodes/gpu-node" "$OP")
if [ "$(jget "$body" node.gpus.0.sm_allocated)" = 16 ]; then
    ok "the GPU holds the VM's 16 SMs once"
else
    fail "the GPU holds $(jget "$body" node.gpus.0.sm_allocated) SMs for a 16-SM VM"
fi
for i in 1 2 3 4; do
    wait "${VPIDS[$((i - 1))]}" || fail "process $i of the VM: $(grep FAIL "$DIR/vmproc$i.txt" | head -3)"
done
echo "node_check: the VM's 4 processes at once: $(ms vmproc1) / $(ms vmproc2) / $(ms vmproc3) /" \
     "$(ms vmproc4) ms (each on at most 16 SMs)"
for s in "${VSIDS[@]}"; do api DELETE "$CM/v1/sessions/$s" "$V5" >/dev/null; done

kill -TERM "$NM_PID"
if wait "$NM_PID"; then ok "the node manager stopped (exit 0)"; else fail "node manager exit status $?"; fi
NM_PID=""
left=$(pgrep -f "$DIR/state" || true)
if [ -z "$left" ]; then ok "no server left running"; else fail "left running: $left"; fi
if [ "$MPS" = 1 ]; then
    if grep -q "MPS control daemon of GPU 0 stopped" "$DIR/nm.log"; then ok "MPS stopped"; else fail "MPS not stopped"; fi
fi
echo "node_check: logs and outputs in $DIR"
if [ "$FAILED" = 0 ]; then echo "node_check: PASSED"; else echo "node_check: FAILED"; fi
exit "$FAILED"
