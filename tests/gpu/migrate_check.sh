#!/usr/bin/env bash
# A running program's session moved between two flyt-server processes
# mid-run, against the same program run natively (issue 10's proof).
#
# usage: tests/gpu/migrate_check.sh BUILD_DIR NAME MARK -- COMMAND [ARG...]
#
#   Runs COMMAND natively, then through Flyt on a server with a status page;
#   once COMMAND has printed a line starting with MARK, its session is
#   checkpointed with stop (flyt-checkpoint --stop), that server is stopped
#   and `flyt-server --restore` starts on the same socket, where the client
#   reconnects and carries on. The two stdouts must be identical.
#   MIGRATE_VIA=stream: a receiving server (--restore-listen, its device
#   opened first) is started before the checkpoint, which streams the state
#   to it (flyt-checkpoint --to); it then listens on the same socket. The
#   source first sends the session's kernel images, which the receiver loads
#   while the program still runs (docs/state-format.md, "Pre-copy of kernel
#   images"); "downtime" (asked -> listening) leaves out that pre-copy (the
#   session says how long it took) and the summary names it. FLYT_PRECOPY=0 in
#   the environment turns the pre-copy off (the comparison). MIGRATE_CACHE=1:
#   both servers keep kernel images in one module cache (--cache-dir), as nodes
#   that ran the program before: the receiver loads what the cache holds and is
#   sent only the rest.
#   Prints one summary line: NAME, identical, state bytes, checkpoint ms,
#   downtime ms (checkpoint asked -> restored server listening), the stall
#   the program saw (its FLYT_TRACE line), the native and Flyt wall times; before it, the servers' phase lines and the
#   program's "move timing" line (FLYT_TRACE=1: the downtime it saw, from its
#   last reply before the move to its first after, and where it went). Logs
#   under $OUT/migrate-NAME (default /tmp).
# Environment: FLYT_TEST_CUDA_LIB (/usr/local/cuda/lib64), MIGRATE_VIA
# (file, the default, or stream).
# Exit status: 0 identical, 1 not, 2 setup error.
set -u
die() { echo "migrate_check: $*" >&2; exit 2; }
[ $# -ge 5 ] && [ "$4" = -- ] || { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
VIA=${MIGRATE_VIA:-file}
case $VIA in file|stream) ;; *) die "MIGRATE_VIA must be file or stream, not $VIA" ;; esac
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "no build directory $1"
NAME=$2 MARK=$3
shift 4
SERVER="$BUILD/bin/flyt-server" CKPT="$BUILD/bin/flyt-checkpoint" FLYT_LIB="$BUILD/lib"
CUDA_LIB="${FLYT_TEST_CUDA_LIB:-/usr/local/cuda/lib64}"
for f in "$SERVER" "$CKPT"; do [ -x "$f" ] || die "no $f"; done
D="${OUT:-/tmp}/migrate-$NAME"
rm -rf "$D" && mkdir -p "$D" || die "cannot create $D"
SOCK="$D/s.sock" STATUS="$D/status" STATE="$D/session.state"
PIDS=()
CACHE=()
if [ "${MIGRATE_CACHE:-0}" = 1 ]; then
    mkdir -p "$D/cache" && CACHE=(--cache-dir "$D/cache") || die "cannot create $D/cache"
fi
cleanup() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
ms() { date +%s%3N; }

start_server() { # LOG ARGS... -> SRV
    local log=$1; shift
    rm -f "$SOCK"
    env -u FLYT_SERVER LD_LIBRARY_PATH="$CUDA_LIB" "$SERVER" --backend cuda \
        --listen "unix:$SOCK" --status-file "$STATUS" "${CACHE[@]}" "$@" >"$log" 2>&1 &
    SRV=$!; PIDS+=("$SRV")
    for _ in $(seq 1 400); do
        [ -S "$SOCK" ] && return 0
        kill -0 "$SRV" 2>/dev/null || break
        sleep 0.025
    done
    tail -n 20 "$log" >&2; die "server did not start ($log)"
}

t=$(ms)
env LD_LIBRARY_PATH="$CUDA_LIB" timeout 600 "$@" >"$D/native.out" 2>"$D/native.err" ||
    die "the native run failed: $(tail -n 3 "$D/native.err")"
native_ms=$(( $(ms) - t ))

start_server "$D/server-1.log"
t=$(ms)
env FLYT_SERVER="unix:$SOCK" FLYT_TRACE=1 LD_LIBRARY_PATH="$FLYT_LIB:$CUDA_LIB" timeout 600 "$@" \
    >"$D/flyt.out" 2>"$D/flyt.err" &
PROG=$!; PIDS+=("$PROG")
for _ in $(seq 1 6000); do
    grep -q "^$MARK" "$D/flyt.out" 2>/dev/null && break
    kill -0 "$PROG" 2>/dev/null || break
    sleep 0.01
done
grep -q "^$MARK" "$D/flyt.out" || { tail -n 5 "$D/flyt.err" >&2; die "no '$MARK' line through Flyt"; }
if [ "$VIA" = stream ]; then
    # the receiver first: its device opens while the program still runs on the source
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$D/secret"; chmod 600 "$D/secret"
    port=$(( 20000 + $$ % 20000 ))
    env -u FLYT_SERVER LD_LIBRARY_PATH="$CUDA_LIB" "$SERVER" --backend cuda --listen "unix:$SOCK" \
        --restore "$D/received.state" --restore-listen "tcp://127.0.0.1:$port" \
        --restore-secret-file "$D/secret" --restore-timeout 120 "${CACHE[@]}" >"$D/server-2.log" 2>&1 &
    RCV=$!; PIDS+=("$RCV")
    for _ in $(seq 1 800); do
        grep -q "waiting up to" "$D/server-2.log" && break
        kill -0 "$RCV" 2>/dev/null || die "the receiving server ended: $(tail -n 3 "$D/server-2.log")"
        sleep 0.025
    done
    t0=$(ms)
    "$CKPT" "$STATUS" "$STATE" --stop --to "tcp://127.0.0.1:$port" --secret-file "$D/secret" \
        >"$D/checkpoint.txt" 2>&1 ||
        { cat "$D/checkpoint.txt" >&2; echo "$NAME: FAIL checkpoint: $(cat "$D/checkpoint.txt")"; exit 1; }
    for _ in $(seq 1 4000); do
        grep -q "listening on unix:" "$D/server-2.log" && break
        kill -0 "$RCV" 2>/dev/null || break
        sleep 0.002
    done
    down_ms=$(( $(ms) - t0 ))
    grep -q "listening on unix:" "$D/server-2.log" || die "the receiver did not listen: $(tail -n 3 "$D/server-2.log")"
    kill -TERM "$SRV"; wait "$SRV" 2>/dev/null
else
    t0=$(ms)
    "$CKPT" "$STATUS" "$STATE" --stop >"$D/checkpoint.txt" 2>&1 ||
        { cat "$D/checkpoint.txt" >&2; echo "$NAME: FAIL checkpoint: $(cat "$D/checkpoint.txt")"; exit 1; }
    kill -TERM "$SRV"; wait "$SRV" 2>/dev/null
    start_server "$D/server-2.log" --restore "$STATE"
    down_ms=$(( $(ms) - t0 ))
fi
wait "$PROG"; prc=$?
flyt_ms=$(( $(ms) - t ))
bytes=$(sed -n 's/^checkpoint: \([0-9]*\) bytes in \([0-9.]*\) ms.*$/\1/p' "$D/checkpoint.txt")
ck_ms=$(sed -n 's/^checkpoint: \([0-9]*\) bytes in \([0-9.]*\) ms.*$/\2/p' "$D/checkpoint.txt")
# the kernel images sent ahead while the program still ran on the source: not downtime
pre_ms=$(sed -n 's/.*pre-copy of its kernel images of \([0-9]*\) ms.*/\1/p' "$D/checkpoint.txt")
down_ms=$(( down_ms - ${pre_ms:-0} ))
same=no
[ $prc = 0 ] && cmp -s "$D/native.out" "$D/flyt.out" && same=yes
grep -ho 'state phases.*\|the session.s client came.*' "$D/server-1.log" "$D/server-2.log" |
    sed "s/^/$NAME: /"
grep -h 'move timing' "$D/flyt.err" | sed "s/^/$NAME: /"
# the program's own stall (its trace), which also counts its reconnect and the restore
seen_ms=$(sed -n 's/.*move timing:.*downtime seen \([0-9.]*\) ms.*/\1/p' "$D/flyt.err" | tail -n 1)
printf '%s: identical %s, via %s, state %s bytes, checkpoint %s ms, downtime %s ms, stall seen by the program %s ms, native %s ms, flyt %s ms, kernel images pre-copied %s ms before the stop\n' \
    "$NAME" "$same" "$VIA" "${bytes:-?}" "${ck_ms:-?}" "$down_ms" "${seen_ms:-?}" "$native_ms" "$flyt_ms" "${pre_ms:-0}"
[ $same = yes ] && exit 0
diff "$D/native.out" "$D/flyt.out" | head -n 10
tail -n 5 "$D/flyt.err"
grep -iE "error|refused|fail" "$D/server-2.log" | head -n 5
exit 1
