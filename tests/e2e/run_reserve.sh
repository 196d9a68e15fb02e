#!/usr/bin/env bash
# Migrations' capacity reservations and their recovery after a crash of the cluster manager
# (docs/design.md, "Reservations"), end to end on the host backend. Each node has one GPU
# of 4 SM groups (8 SMs each) and 256 MiB.
#  1. while a migration to nb is in flight (nb's node manager stopped), its target share is
#     reserved: nb shows it allocated, and a placement needing it is refused at once;
#  2. the cluster manager killed (SIGKILL, test hook FLYT_CLM_TEST_KILL_AT) at a step of a
#     migration; restarted, it completes the migration (target started) or rolls it back
#     (source running, or its state file there), and counts the share once.
# usage: run_reserve.sh BIN_DIR CKPT_CLIENT E2E_TOOL (setup: ckpt_lib.sh)
bin=$1 client=$2 tool=$3
source "$(dirname "$0")/ckpt_lib.sh"
# any free port first (a fixed one collided with another socket in CI), then the same
# one on every restart: the node managers keep its URL
cm_config 0
cm_start
cm_config "${cm##*:}"
gpu='test.gpu_sm_count = 32
test.gpu_sm_granularity = 8
test.gpu_memory = 256MiB'
start_node na 0 "$gpu"
start_node nb 1 "$gpu"
wait_until 30 node_ready na || die "node na not ready"
wait_until 30 node_ready nb || die "node nb not ready"
vm_add() {  # ID IP SMS MEMORY
  ctl --json vm add --id "$1" --vm-ip "$2" --host-ip 127.0.0.1 --compute-units "$3" --memory "$4" \
    | flat | field token > "$tmp/$1.token"
  chmod 600 "$tmp/$1.token"
}
vm_add vm1 127.0.0.2 16 64MiB
cp "$tmp/vm1.token" "$tmp/vm.token"
vm_add vm2 127.0.0.3 24 64MiB
vm_add vm3 127.0.0.4 8 224MiB
allocated() { ctl --json node show "$1" | flat | field "node.gpus.0.$2"; }
op() { "$tool" http "$1" "$cm" "$2" "$(cat "$tmp/operator.token")" "${3:-}"; }
counted_once() { [ "$(allocated "$1" sm_allocated)" = 16 ] && [ "$(allocated "$(other "$1")" sm_allocated)" = 0 ]; }
no_server_on() { ! pgrep -f -- "flyt-server .*--session-id $2 .*$tmp/$1-state/" > /dev/null; }
other() { [ "$1" = na ] && echo nb || echo na; }

# 1. the reservation holds the target's groups and memory against a racing placement
hold 1001
sid1=$sid
src=$(node_of "$sid1")
dst=$(other "$src")
kill -STOP "$(eval echo \$pid_$dst)"
op POST "/v1/sessions/$sid1/migrate" "{\"node\": \"$dst\"}" > "$tmp/mig1.out"
check "the migration to the stopped $dst is accepted: $(head -1 "$tmp/mig1.out")" grep -q '^202' "$tmp/mig1.out"
check "in flight, $dst shows the reserved 16 SMs allocated ($(allocated "$dst" sm_allocated))" \
  [ "$(allocated "$dst" sm_allocated)" = 16 ]
check "and its 64 MiB ($(allocated "$dst" memory_allocated))" [ "$(allocated "$dst" memory_allocated)" = 67108864 ]
# vm2 needs 3 groups: 2 are free on each node, counting the reservation
"$tool" http POST "$cm" /v1/sessions "$(cat "$tmp/vm2.token")" '{"pid": 2001}' > "$tmp/race.out"
check "a session needing the reserved groups is refused: $(head -2 "$tmp/race.out" | tr '\n' ' ')" \
  grep -q '^409' "$tmp/race.out"
# vm3 needs 224 MiB: 192 MiB are free on each node, counting the reservation
"$tool" http POST "$cm" /v1/sessions "$(cat "$tmp/vm3.token")" '{"pid": 3001}' > "$tmp/race-mem.out"
check "a session needing the reserved memory is refused: $(head -2 "$tmp/race-mem.out" | tr '\n' ' ')" \
  grep -q '^409' "$tmp/race-mem.out"
kill -CONT "$(eval echo \$pid_$dst)"
check "the migration ends with the session active" wait_until 60 sh -c "[ \"\$($bin/flytctl --json session show $sid1 | $tool flat | sed -n 's/^session.state=//p')\" = active ]"
check "it runs on $dst" [ "$(node_of "$sid1")" = "$dst" ]
check "the share is counted once: $dst 16 SMs ($(allocated "$dst" sm_allocated)), $src 0 ($(allocated "$src" sm_allocated))" \
  counted_once "$dst"
kill "$(eval echo \$holder_1001)" 2>/dev/null
check "migrated: pointer and contents hold" verify 1001 "$sid1" "$ptr"
ctl session release "$sid1" > /dev/null 2>&1

# 2. kill -9 at STEP of a migration (VIA stream|file), restart: EXPECT target|source
# MODE hold: the client holds its allocation and goes; a fresh connection checks it where
# the session runs now. live: the client stays connected to a source that never stopped.
crash_at() {  # STEP VIA EXPECT PID MODE
  local step=$1 via=$2 expect=$3 pid=$4 mode=$5
  wait_until 10 node_ready na; wait_until 10 node_ready nb
  hold "$pid" "$mode"
  local s=$sid from to
  from=$(node_of "$s")
  to=$(other "$from")
  kill "$cm_pid"; wait "$cm_pid" 2>/dev/null
  FLYT_CLM_TEST_KILL_AT=$step cm_start
  local stream=true; [ "$via" = file ] && stream=false
  op POST "/v1/sessions/$s/migrate" "{\"node\": \"$to\", \"stream\": $stream}" > "$tmp/crash.out"
  # killed at placement, the manager may die before its 202 is written: no answer then
  check "[$step/$via] the migration is accepted: $(head -1 "$tmp/crash.out")" \
    sh -c "grep -q '^202' '$tmp/crash.out' || { [ $step = migrate.placed ] && ! grep -q . '$tmp/crash.out'; }"
  check "[$step/$via] the manager killed itself at $step" wait_until 60 sh -c "! kill -0 $cm_pid 2>/dev/null"
  wait "$cm_pid" 2>/dev/null
  check "[$step/$via] it left the session migrating" \
    sh -c "sqlite3 '$tmp/cluster.db' \"SELECT state FROM sessions WHERE id = '$s'\" 2>/dev/null | grep -qx migrating || ! command -v sqlite3 > /dev/null"
  cm_start
  local want=$to; [ "$expect" = source ] && want=$from
  check "[$step/$via] after the restart the session is active again" wait_until 60 sh -c "[ \"\$($bin/flytctl --json session show $s | $tool flat | sed -n 's/^session.state=//p')\" = active ]"
  check "[$step/$via] on its $expect $want ($(node_of "$s"))" [ "$(node_of "$s")" = "$want" ]
  check "[$step/$via] counted once: $want 16 SMs ($(allocated "$want" sm_allocated)), the other 0 ($(allocated "$(other "$want")" sm_allocated))" \
    counted_once "$want"
  check "[$step/$via] no server of the session is left on $(other "$want")" no_server_on "$(other "$want")" "$s"
  if [ "$mode" = live ]; then
    touch "$tmp/ptr.$pid.go"
    wait "$(eval echo \$holder_$pid)"
    local rc=$?
    check "[$step/$via] its client, connected all along, finds its pointer and contents (exit $rc)" [ $rc = 0 ]
  else
    kill "$(eval echo \$holder_$pid)" 2>/dev/null
    check "[$step/$via] pointer and contents hold (fresh connection)" verify "$pid" "$s" "$ptr"
  fi
  ctl events > "$tmp/events.out" 2>&1
  check "[$step/$via] an event says what the restart did" grep -q "after a restart of the cluster manager" "$tmp/events.out"
  ctl session release "$s" > /dev/null 2>&1
}
crash_at migrate.placed stream source 1002 live
crash_at migrate.started stream target 1003 hold
crash_at migrate.checkpointed stream target 1004 hold
crash_at migrate.checkpointed file source 1005 hold

echo "run_reserve: $passes passed, $fails failed"
[ $fails = 0 ] || { for f in "$tmp"/*.log; do echo "--- $f"; tail -15 "$f"; done; exit 1; }
