#!/usr/bin/env bash
# Checkpoint and restore of a running CUDA program through flyt-server.
#
# usage: tests/gpu/state_check.sh BUILD_DIR [cuda|host]
#
#   BUILD_DIR holds bin/flyt-server, bin/flyt-checkpoint, lib/libcuda.so.1
#   (the Flyt client) and gpu-tests/state_check (tests/gpu/state_check.cu).
#
# Starts a managed flyt-server (--status-file, --session-id and
# --session-key-file; the client sends its session token), runs
# `state_check fill` (buffers of 1 KiB to 64 MiB filled by a kernel, their
# addresses and checksums in a file), checkpoints the session with
# flyt-checkpoint (status page + SIGURG), lets the program end, starts
# `flyt-server --restore FILE` with the same session, and runs
# `state_check verify`, which checks every buffer at its old address with a
# kernel and a copy, then frees it. With the host backend (no kernels) the
# program fills and checks by copies: the script's logic without a GPU.
#
# Prints PASS or FAIL and the checkpoint and restore times and bytes.
# Environment (optional): OUT (results; default a new /tmp directory),
# FLYT_TEST_CUDA_LIB (/usr/local/cuda/lib64).
# Exit status: 0 on PASS, 1 on FAIL, 2 on a setup error.
set -u

die() { echo "state_check: $*" >&2; exit 2; }
[ $# -ge 1 ] || { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "no build directory $1"
BACKEND="${2:-cuda}"
SERVER="$BUILD/bin/flyt-server"
CKPT="$BUILD/bin/flyt-checkpoint"
FLYT_LIB="$BUILD/lib"
PROG="$BUILD/gpu-tests/state_check"
CUDA_LIB="${FLYT_TEST_CUDA_LIB:-/usr/local/cuda/lib64}"
for f in "$SERVER" "$CKPT" "$PROG"; do [ -x "$f" ] || die "no $f"; done
[ -e "$FLYT_LIB/libcuda.so.1" ] || die "no Flyt client in $FLYT_LIB"
command -v python3 >/dev/null || die "python3 is needed for the session token"
OUTDIR="${OUT:-$(mktemp -d /tmp/flyt-state.XXXXXX)}/state-check"
mkdir -p "$OUTDIR" || die "cannot create $OUTDIR"
[ "$BACKEND" = host ] && export STATE_CHECK_NO_KERNELS=1

PIDS=()
# shellcheck disable=SC2317 # invoked through the EXIT trap
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT

SID=s-state-check
KEY="$OUTDIR/session.key"
SOCK="$OUTDIR/server.sock"
STATUS="$OUTDIR/server.status"
STATE="$OUTDIR/session.state"
ADDRS="$OUTDIR/buffers.txt"
python3 -c 'import os; print(os.urandom(32).hex())' >"$KEY" && chmod 600 "$KEY"
TOKEN=$(python3 - "$KEY" "$SID" <<'PY'
import hashlib, hmac, sys, time
key = bytes.fromhex(open(sys.argv[1]).read().strip())
sid, exp = sys.argv[2], int(time.time()) + 3600
mac = hmac.new(key, f"{sid}\n{exp}".encode(), hashlib.sha256).hexdigest()
print(f"{mac}.{sid}.{exp}")
PY
)

# start_server NAME ARGS... -> sets SRV_PID
start_server() {
    local name=$1; shift
    rm -f "$SOCK"
    env -u FLYT_SERVER LD_LIBRARY_PATH="$CUDA_LIB" "$SERVER" --backend "$BACKEND" \
        --listen "unix:$SOCK" --session-id "$SID" --session-key-file "$KEY" "$@" \
        >"$OUTDIR/server-$name.log" 2>&1 &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
    for _ in $(seq 1 100); do
        [ -S "$SOCK" ] && return 0
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "state_check: server $name did not start:" >&2
    tail -n 20 "$OUTDIR/server-$name.log" >&2
    exit 1
}
run_prog() { # MODE, stdin from the caller
    env FLYT_SERVER="unix:$SOCK" FLYT_SESSION_TOKEN="$TOKEN" LD_LIBRARY_PATH="$FLYT_LIB:$CUDA_LIB" \
        timeout 300 "$PROG" "$1" "$ADDRS"
}
fail() { echo "state_check: $*" >&2; echo FAIL; exit 1; }

# 1. the program fills its buffers and waits, holding its session
start_server source --status-file "$STATUS"
FIFO="$OUTDIR/stdin.fifo"
rm -f "$FIFO" && mkfifo "$FIFO" || die "mkfifo"
run_prog fill <"$FIFO" >"$OUTDIR/fill.txt" 2>&1 &
PROG_PID=$!
exec 3>"$FIFO" # the program's stdin stays open until fd 3 closes
for _ in $(seq 1 600); do
    grep -q READY "$OUTDIR/fill.txt" 2>/dev/null && break
    kill -0 "$PROG_PID" 2>/dev/null || break
    sleep 0.1
done
grep -q READY "$OUTDIR/fill.txt" || { exec 3>&-; cat "$OUTDIR/fill.txt" >&2; fail "fill did not get ready"; }

# 2. the checkpoint, while the program waits; then the program ends
"$CKPT" "$STATUS" "$STATE" >"$OUTDIR/checkpoint.txt" 2>&1 ||
    { exec 3>&-; cat "$OUTDIR/checkpoint.txt" >&2; fail "checkpoint failed"; }
exec 3>&-
wait "$PROG_PID" || { cat "$OUTDIR/fill.txt" >&2; fail "fill failed"; }
kill -TERM "$SRV_PID"; wait "$SRV_PID" 2>/dev/null

# 3. a new server restores the session; the program checks its buffers there
start_server restored --restore "$STATE"
run_prog verify </dev/null >"$OUTDIR/verify.txt" 2>&1
VERIFY=$?
kill -TERM "$SRV_PID"; wait "$SRV_PID" 2>/dev/null

cat "$OUTDIR/verify.txt"
cat "$OUTDIR/checkpoint.txt"
grep -o 'restored: .*' "$OUTDIR/server-restored.log" | sed 's/^/restore: /'
[ "$VERIFY" = 0 ] && tail -n 1 "$OUTDIR/verify.txt" | grep -qx PASS ||
    { grep -E 'error|refused' "$OUTDIR/server-restored.log" | head -5 >&2; fail "verify failed"; }
grep -ho 'state phases.*' "$OUTDIR/server-source.log" "$OUTDIR/server-restored.log"
echo PASS
