#!/usr/bin/env bash
# Checkpoint, restore, migration and node drain end to end on the host backend: a cluster
# manager and two node managers (test mode) on 127.0.0.1; sessions taken with the VM's
# token; ckpt_client holds 1 MiB with a pattern, the state moves, a fresh connection to
# the new endpoint (with a fresh token) checks the pointer and its contents.
# usage: run_ckpt.sh BIN_DIR CKPT_CLIENT E2E_TOOL (setup: ckpt_lib.sh)
bin=$1 client=$2 tool=$3
source "$(dirname "$0")/ckpt_lib.sh"
cm_config 0
cm_start
start_node na 0
start_node nb 1
wait_until 30 node_ready na || die "node na not ready"
wait_until 30 node_ready nb || die "node nb not ready"
ctl --json vm add --id vm1 --vm-ip 127.0.0.2 --host-ip 127.0.0.1 --compute-units 16 --memory 64MiB \
  | flat | field token > "$tmp/vm.token"
chmod 600 "$tmp/vm.token"

# 1. checkpoint with stop to a file, restore on the other node
hold 1001
sid1=$sid
from=$(node_of "$sid1")
other=$([ "$from" = na ] && echo nb || echo na)
ctl checkpoint "$sid1" --to "$tmp/s1.state" --stop > "$tmp/ckpt.out" 2> "$tmp/ckpt.err"
check "flytctl checkpoint --stop writes the file ($(cat "$tmp/ckpt.out"))" test -s "$tmp/s1.state"
check "the session is suspended" wait_until 5 sh -c "[ \"\$($bin/flytctl --json session show $sid1 | $tool flat | sed -n 's/^session.state=//p')\" = suspended ]"
check "its server told the client it is suspended (the program waits for the restore)" \
  grep -q "is suspended (preempted) at request byte" "$tmp"/*.log
kill "$(eval echo \$holder_1001)" 2>/dev/null
ctl restore "$tmp/s1.state" --node "$other" > "$tmp/restore.out" 2> "$tmp/restore.err"
check "flytctl restore on $other: $(cat "$tmp/restore.out" "$tmp/restore.err" | tr '\n' ' ')" \
  [ "$(state_of "$sid1")" = active ] 
check "the session now runs on $other" [ "$(node_of "$sid1")" = "$other" ]
check "the restored server holds the allocation and its contents (fresh connection)" verify 1001 "$sid1" "$ptr"

# 2. migration with pointers and contents checked through a fresh connection
hold 1002
sid2=$sid
src=$(node_of "$sid2")
ctl migrate "$sid2" > "$tmp/mig.out" 2> "$tmp/mig.err"
rc=$?
check "flytctl migrate (exit $rc): $(cat "$tmp/mig.out")" [ $rc = 0 ]
check "migrate printed its downtime" grep -q "downtime [0-9]* ms" "$tmp/mig.out"
check "the session moved off $src" [ "$(node_of "$sid2")" != "$src" ]
check "the migration event records the downtime" sh -c "$bin/flytctl --json events | grep -q 'downtime'"
kill "$(eval echo \$holder_1002)" 2>/dev/null
check "migrated: pointer and contents hold (fresh connection)" verify 1002 "$sid2" "$ptr"

# 3. a second concurrent migration is refused (409): the first one waits on a stopped target
hold 1003
sid3=$sid
src3=$(node_of "$sid3")
dst3=$([ "$src3" = na ] && echo nb || echo na)
wait_until 10 node_ready "$dst3"
kill -STOP "$(eval echo \$pid_$dst3)"
"$tool" http POST "$cm" "/v1/sessions/$sid3/migrate" "$(cat "$tmp/operator.token")" "{\"node\": \"$dst3\"}" > "$tmp/first.out"
"$tool" http POST "$cm" "/v1/sessions/$sid3/migrate" "$(cat "$tmp/operator.token")" '{}' > "$tmp/second.out"
kill -CONT "$(eval echo \$pid_$dst3)"
check "the first migration of $sid3 is accepted: $(head -1 "$tmp/first.out")" grep -q '^202' "$tmp/first.out"
check "a second migration of $sid3 at once is refused: $(head -1 "$tmp/second.out")" grep -q '^409' "$tmp/second.out"
mig_done() { "$bin/flytctl" --json session show "$sid3" | "$tool" flat | grep -q '^session.state=active$'; }
check "the first migration ends with the session active" wait_until 60 mig_done
kill "$(eval echo \$holder_1003)" 2>/dev/null
wait_until 10 node_ready na; wait_until 10 node_ready nb

# 4. a migration that fails midway (target node manager killed) leaves the source running
hold 1004
sid4=$sid
src=$(node_of "$sid4")
dst=$([ "$src" = na ] && echo nb || echo na)
kill -STOP "$(eval echo \$pid_$dst)"
ctl --timeout 30s migrate "$sid4" --node "$dst" > "$tmp/fail.out" 2> "$tmp/fail.err"
rc=$?
kill -CONT "$(eval echo \$pid_$dst)"
check "a migration to a stopped node manager fails (exit $rc): $(tail -1 "$tmp/fail.err")" [ $rc != 0 ]
check "the session is active on its source $src again" sh -c "[ \"\$($bin/flytctl --json session show $sid4 | $tool flat | sed -n 's/^session.state=//p')\" = active ] && [ \"\$($bin/flytctl --json session show $sid4 | $tool flat | sed -n 's/^session.node_id=//p')\" = $src ]"
kill "$(eval echo \$holder_1004)" 2>/dev/null
check "after the failed migration: pointer and contents hold on the source" verify 1004 "$sid4" "$ptr"

# 5. live: a program that got its session from its client manager carries on across a
# migration of that session to the other node (it asks its client manager again)
printf 'cluster_manager = http://%s\nvm_id = vm1\nvm_token_file = vm.token\nsocket = %s\nlog_level = info\n' \
  "$cm" "$tmp/client.sock" > "$tmp/cmgr.conf"
"$bin/flyt-client-manager" --config "$tmp/cmgr.conf" > "$tmp/cmgr.log" 2>&1 &
pids+=($!)
wait_until 15 test -S "$tmp/client.sock" || die "the client manager did not start"
wait_until 10 node_ready na; wait_until 10 node_ready nb
env -u FLYT_SERVER -u FLYT_SESSION_TOKEN FLYT_CLIENT_MANAGER="$tmp/client.sock" FLYT_TRACE=1 \
  "$client" live "$tmp/live.ptr" > "$tmp/live.out" 2> "$tmp/live.log" &
live_pid=$!
pids+=($live_pid)
wait_until 15 test -s "$tmp/live.ptr" || die "the live client did not start: $(cat "$tmp/live.log")"
ctl --json session list --vm vm1 --state live | flat > "$tmp/live.flat"
at=$(sed -n "s/\.pid=$live_pid\$//p" "$tmp/live.flat" | head -1)
sid6=$(sed -n "s/^$at\.id=//p" "$tmp/live.flat")
[ -n "$sid6" ] || die "no session for the live client (pid $live_pid)"
src6=$(node_of "$sid6")
ctl migrate "$sid6" > "$tmp/live-mig.out" 2> "$tmp/live-mig.err"
rc=$?
check "flytctl migrate of a connected program's session $sid6 (exit $rc): $(cat "$tmp/live-mig.out")" [ $rc = 0 ]
check "it was streamed to a receiving server" grep -q '(stream)' "$tmp/live-mig.out"
check "the session moved off $src6" [ "$(node_of "$sid6")" != "$src6" ]
# its kernel image went to the target and was loaded there before the source stopped it
check "the target preloaded its kernel image before the stop" \
  grep -q "1 of 1 kernel image(s) preloaded before the stop" "$tmp"/n*.log
check "the restore took it, loading none again" \
  grep -q "1 module(s) taken preloaded, 0 loaded again" "$tmp"/n*.log
touch "$tmp/live.ptr.go"
wait "$live_pid"
rc=$?
check "the program carried on after its session moved (exit $rc): $(cat "$tmp/live.out" "$tmp/live.log" | tr '\n' ' ')" [ $rc = 0 ]
# where the move's time went as the program saw it (it idled meanwhile: its last reply
# came long before the move; the redirect through the client manager is the middle part)
grep -h 'move timing' "$tmp/live.log" | sed 's/^/run_ckpt: live program: /'

# 7. streamed vs file: the downtime of each path with 32 MiB (written to the log and
# docs/api.md)
downtime_of() { sed -n 's/.*downtime \([0-9]*\) ms.*/\1/p' "$1"; }
wait_until 10 node_ready na; wait_until 10 node_ready nb
export CKPT_CLIENT_MIB=32
hold 1006
ctl migrate "$sid" --via file > "$tmp/via-file.out" 2> "$tmp/via-file.err"
check "migrate --via file: $(cat "$tmp/via-file.out")" grep -q '(file)' "$tmp/via-file.out"
check "--via file: pointer and contents hold" verify 1006 "$sid" "$ptr"
kill "$(eval echo \$holder_1006)" 2>/dev/null
hold 1007
ctl migrate "$sid" --via stream > "$tmp/via-stream.out" 2> "$tmp/via-stream.err"
check "migrate --via stream: $(cat "$tmp/via-stream.out")" grep -q '(stream)' "$tmp/via-stream.out"
check "--via stream: pointer and contents hold" verify 1007 "$sid" "$ptr"
kill "$(eval echo \$holder_1007)" 2>/dev/null
unset CKPT_CLIENT_MIB
echo "run_ckpt: downtime of a 32 MiB session on the host backend: streamed $(downtime_of "$tmp/via-stream.out") ms, through a file $(downtime_of "$tmp/via-file.out") ms"

# 8. a target that fails while the state streams in (it cannot write it): the session
# stays on its source, running, its client still connected
wait_until 10 node_ready na; wait_until 10 node_ready nb
hold 1008 live
sid8=$sid
src8=$(node_of "$sid8")
dst8=$([ "$src8" = na ] && echo nb || echo na)
mkdir "$tmp/$dst8-state/$sid8.received.tmp"
ctl migrate "$sid8" --node "$dst8" > "$tmp/cut.out" 2> "$tmp/cut.err"
rc=$?
check "a stream the target fails to take fails the migration (exit $rc): $(tail -1 "$tmp/cut.err")" [ $rc != 0 ]
check "the reason is the target's" grep -q 'receiver refused the state' "$tmp/cut.err"
check "the session is active on its source $src8" sh -c "[ \"\$($bin/flytctl --json session show $sid8 | $tool flat | sed -n 's/^session.state=//p')\" = active ] && [ \"\$($bin/flytctl --json session show $sid8 | $tool flat | sed -n 's/^session.node_id=//p')\" = $src8 ]"
check "its client is still connected to the source (never moved)" kill -0 "$(eval echo \$holder_1008)"
check "no receiving server is left on $dst8" sh -c "! pgrep -a -f -- '[-]-restore-listen' | grep -q $sid8"
touch "$tmp/ptr.1008.go"
wait "$(eval echo \$holder_1008)"
rc=$?
check "after the failed stream its client finds its pointer and contents on the source (exit $rc): $(cat "$tmp/client.1008.log" | tr '\n' ' ')" [ $rc = 0 ]
rmdir "$tmp/$dst8-state/$sid8.received.tmp"

# 9. a node whose GPU is of another architecture (nc: compute capability 8.0, its own model
# name), reported at registration: placement leaves it out even when named (the state was
# saved on 9.0, where the client cut its kernel images, and nc's server would refuse it);
# the session stays on its source, running, and a move placement chooses goes elsewhere
start_node nc 2 '[test]
gpu_name = "Flyt fake GPU (sm_80)"
gpu_compute_capability = "8.0"'
wait_until 30 node_ready nc || die "node nc not ready"
wait_until 10 node_ready na; wait_until 10 node_ready nb
check "nc's GPU is listed with its compute capability" \
  sh -c "$bin/flytctl --json node show nc | $tool flat | grep -q 'compute_capability=8.0'"
hold 1009 live
sid9=$sid
src9=$(node_of "$sid9")
on_source9() { [ "$(state_of "$sid9")" = active ] && [ "$(node_of "$sid9")" = "$src9" ]; }
ctl migrate "$sid9" --node nc > "$tmp/arch.out" 2> "$tmp/arch.err"
rc=$?
check "a move to node nc of another architecture is refused by placement (exit $rc): $(tail -1 "$tmp/arch.err")" \
  sh -c "[ $rc != 0 ] && grep -q 'no GPU of compute capability 9.0' '$tmp/arch.err'"
ctl migrate "$sid9" --node nc --gpu 0 > "$tmp/arch1.out" 2> "$tmp/arch1.err"
rc=$?
check "also with its GPU named (exit $rc)" sh -c "[ $rc != 0 ] && grep -q 'compute capability' '$tmp/arch1.err'"
check "the session is active on its source $src9" wait_until 10 on_source9
check "its client is still connected to the source" kill -0 "$(eval echo \$holder_1009)"
ctl migrate "$sid9" > "$tmp/arch2.out" 2> "$tmp/arch2.err"
rc=$?
check "a move placement chooses passes over the emptier nc (exit $rc, now on $(node_of "$sid9")): $(tail -1 "$tmp/arch2.err")" \
  sh -c "[ $rc = 0 ] && [ \"\$($bin/flytctl --json session show $sid9 | $tool flat | sed -n 's/^session.node_id=//p')\" != nc ]"
kill "$(eval echo \$holder_1009)" 2>/dev/null
check "moved within its architecture: pointer and contents hold (fresh connection)" verify 1009 "$sid9" "$ptr"

# 6. drain migrates a node's sessions away
wait_until 10 node_ready "$dst"
hold 1005
sid5=$sid
n5=$(node_of "$sid5")
ctl node drain "$n5" > "$tmp/drain.out" 2> "$tmp/drain.err"
rc=$?
check "flytctl node drain $n5 (exit $rc): $(cat "$tmp/drain.out")" [ $rc = 0 ]
check "the drained node's session moved" [ "$(node_of "$sid5")" != "$n5" ]
check "the node is draining" sh -c "$bin/flytctl --json node show $n5 | $tool flat | grep -q '^node.state=draining$'"
kill "$(eval echo \$holder_1005)" 2>/dev/null
check "drained: pointer and contents hold" verify 1005 "$sid5" "$ptr"

echo "run_ckpt: $passes passed, $fails failed"
[ $fails = 0 ] || { for f in "$tmp"/*.log; do echo "--- $f"; tail -15 "$f"; done; exit 1; }
