#!/usr/bin/env bash
# A session blocked on a kernel that never ends, whose client is killed: the
# server must end the session within seconds and the GPU must be free again
# (docs/server.md, "A client that leaves while its call is blocked on the GPU").
#
# usage: tests/gpu/hangup_check.sh BUILD_DIR
#
#   BUILD_DIR holds bin/flyt-server, lib/libcuda.so.1 (the Flyt client) and
#   gpu-tests/hangup_check (tests/gpu/hangup_check.cu, built with the GPU
#   programs; not in run_gpu_tests.sh's list: it is killed on purpose).
#
# For each mode (ctx, stream, event, copy, free, idle over a Unix socket, ctx
# over TCP) it runs hangup_check through one flyt-server, waits for its
# "blocking in" line, lets it block 2 s, kills it (SIGKILL), and checks that the
# session process ends within 10 s, that the server logged the hang-up line,
# and that nvidia-smi no longer lists the session's pid. Last, `long` (a 3 s
# kernel) must finish through Flyt with its client connected. One line a mode,
# PASS or FAIL; exit 0 when all passed, 1 otherwise, 2 on a setup error.
# Environment (optional): OUT (results; default a new /tmp directory),
# FLYT_TEST_CUDA_LIB (/usr/local/cuda/lib64).
set -u

die() { echo "hangup_check: $*" >&2; exit 2; }
[ $# -ge 1 ] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "no build directory $1"
SERVER="$BUILD/bin/flyt-server"
FLYT_LIB="$BUILD/lib"
PROG="$BUILD/gpu-tests/hangup_check"
CUDA_LIB="${FLYT_TEST_CUDA_LIB:-/usr/local/cuda/lib64}"
[ -x "$SERVER" ] || die "no $SERVER"
[ -x "$PROG" ] || die "no $PROG (configure with -DFLYT_GPU_PROGRAMS=ON)"
[ -e "$FLYT_LIB/libcuda.so.1" ] || die "no Flyt client in $FLYT_LIB"
D="${OUT:-$(mktemp -d /tmp/flyt-hangup.XXXXXX)}/hangup-check"
rm -rf "$D"; mkdir -p "$D" || die "cannot create $D"
SOCK="$D/s.sock" LOG="$D/server.log"
PORT=$((20000 + RANDOM % 30000))
PIDS=()
# shellcheck disable=SC2317 # invoked through the EXIT trap
cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

env -u FLYT_SERVER LD_LIBRARY_PATH="$CUDA_LIB" "$SERVER" --backend cuda \
    --listen "unix:$SOCK" --listen "tcp://127.0.0.1:$PORT" >"$LOG" 2>&1 &
SRV=$!; PIDS+=("$SRV")
for _ in $(seq 1 400); do
    [ -S "$SOCK" ] && break
    kill -0 "$SRV" 2>/dev/null || break
    sleep 0.025
done
[ -S "$SOCK" ] || { tail -n 20 "$LOG" >&2; die "server did not start ($LOG)"; }

FAILED=0
# the session process serving the client of pid $1 (its HELLO line names it)
session_of() { sed -n "s/.*flyt-server\[\([0-9]*\)\] info: session for .*: client pid $1 on .*/\1/p" "$LOG" | tail -n 1; }

check_mode() { # MODE ADDRESS
    local mode=$1 addr=$2 name="$1-${2%%:*}" out prog sess t0 t
    out="$D/$name.out"
    env FLYT_SERVER="$addr" LD_LIBRARY_PATH="$FLYT_LIB:$CUDA_LIB" "$PROG" "$mode" >"$out" 2>"$D/$name.err" &
    prog=$!; PIDS+=("$prog")
    for _ in $(seq 1 3000); do
        grep -q "^hangup_check: blocking in" "$out" && break
        kill -0 "$prog" 2>/dev/null || break
        sleep 0.01
    done
    if ! grep -q "^hangup_check: blocking in" "$out"; then
        echo "hangup_check: FAIL $name: the program did not reach its blocking call: $(tail -n 2 "$out" "$D/$name.err")"
        FAILED=1; kill -KILL "$prog" 2>/dev/null; return
    fi
    sess=$(session_of "$prog")
    [ -n "$sess" ] || { echo "hangup_check: FAIL $name: no session for client pid $prog in $LOG"; FAILED=1; kill -KILL "$prog" 2>/dev/null; return; }
    sleep 2
    if ! kill -0 "$sess" 2>/dev/null; then
        echo "hangup_check: FAIL $name: session $sess ended before its client did"
        FAILED=1; kill -KILL "$prog" 2>/dev/null; return
    fi
    t0=$(date +%s%3N)
    kill -KILL "$prog"; wait "$prog" 2>/dev/null
    for _ in $(seq 1 1000); do
        kill -0 "$sess" 2>/dev/null || break
        sleep 0.01
    done
    t=$(( $(date +%s%3N) - t0 ))
    if kill -0 "$sess" 2>/dev/null; then
        echo "hangup_check: FAIL $name: session $sess still runs 10 s after its client was killed"
        FAILED=1; kill -KILL "$sess" 2>/dev/null; return
    fi
    local line
    line=$(grep -E "flyt-server\[$sess\].*(hung up while|is gone and closing)" "$LOG" | sed 's/.*info: //')
    sleep 1 # the driver tears the context down as the process goes
    if nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -qx "$sess"; then
        echo "hangup_check: FAIL $name: nvidia-smi still lists session $sess"
        FAILED=1; return
    fi
    if [ -z "$line" ]; then
        echo "hangup_check: FAIL $name: session $sess ended in $t ms but logged no hang-up line"
        FAILED=1; return
    fi
    echo "hangup_check: PASS $name: session ended $t ms after its client was killed; $(grep -q 'cudaFree returned' "$out" && echo 'cudaFree did not block; ')log: $line"
}

nvidia-smi -L 2>/dev/null | head -2
for mode in ctx stream event copy free idle; do
    check_mode "$mode" "unix:$SOCK"
done
check_mode ctx "tcp://127.0.0.1:$PORT"

t0=$(date +%s%3N)
if env FLYT_SERVER="unix:$SOCK" LD_LIBRARY_PATH="$FLYT_LIB:$CUDA_LIB" timeout 60 "$PROG" long \
    >"$D/long.out" 2>"$D/long.err" && grep -q "the 3 s kernel ended" "$D/long.out"; then
    echo "hangup_check: PASS long: a $(( $(date +%s%3N) - t0 )) ms run with a 3 s kernel, client connected"
else
    echo "hangup_check: FAIL long: $(tail -n 2 "$D/long.out" "$D/long.err")"
    FAILED=1
fi
kill -0 "$SRV" 2>/dev/null || { echo "hangup_check: FAIL the server itself died"; FAILED=1; }
echo "hangup_check: server log in $LOG"
exit "$FAILED"
