#!/usr/bin/env bash
# Checkpoint, streaming and restore times of one session on the host backend
# (no GPU): the phase lines the servers log (docs/state-format.md, "Phase
# timings"), for a session holding MIB MiB of device memory.
#
# usage: bench/state_host.sh BUILD_DIR [MIB] [BACKEND]
#
#   BUILD_DIR holds bin/flyt-server, bin/flyt-checkpoint, bin/ckpt_client and
#   lib/libcuda.so.1. MIB defaults to 256, BACKEND to host (cuda works the same
#   on a GPU machine). Runs: a checkpoint to a file, one streamed to a
#   receiving server (TCP on 127.0.0.1) and the restores of both, then the
#   live move: the session, whose program copies from it without pause, is
#   checkpointed with --stop and streamed to a receiving server that then
#   listens on the source's socket, where the program resumes. Prints the
#   servers' checkpoint, phase and restore lines, the program's longest wait
#   for a reply (the downtime it saw) and its FLYT_TRACE move timing. Exit 0
#   when every step worked and the restored bytes hold their pattern.
#   CKPT_CLIENT_IMAGES=N:KIB in the environment: the program also loads N
#   kernel images of KIB KiB each (host-backend fake fatbinaries), which the
#   streamed checkpoints pre-copy (e.g. 40:1545, PyTorch's 61.8 MB).
set -u
die() { echo "state_host: $*" >&2; exit 2; }
[ $# -ge 1 ] || { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "no build directory $1"
MIB="${2:-256}"
BACKEND="${3:-host}"
SERVER="$BUILD/bin/flyt-server"
CKPT="$BUILD/bin/flyt-checkpoint"
CLIENT="$BUILD/bin/ckpt_client"
for f in "$SERVER" "$CKPT" "$CLIENT"; do [ -x "$f" ] || die "no $f"; done
DIR=$(mktemp -d /tmp/flyt-state-bench.XXXXXX) || die "mktemp"
CUDA_LIB="${FLYT_TEST_CUDA_LIB:-/usr/local/cuda/lib64}"
PIDS=()
# shellcheck disable=SC2317 # invoked through the EXIT trap
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    [ -n "${KEEP:-}" ] || rm -rf "$DIR"
}
trap cleanup EXIT

server() { # NAME ARGS...: a server on DIR/NAME.sock (SOCK=...: there), its log DIR/NAME.log
    local name=$1; shift
    env -u FLYT_SERVER LD_LIBRARY_PATH="$CUDA_LIB" "$SERVER" --backend "$BACKEND" \
        --listen "unix:${SOCK:-$DIR/$name.sock}" "$@" >"$DIR/$name.log" 2>&1 &
    PIDS+=("$!")
}
wait_for() { # FILE
    for _ in $(seq 1 300); do [ -e "$1" ] && return 0; sleep 0.05; done
    die "$1 did not appear"
}
client() { # NAME MODE ARG
    exec env FLYT_SERVER="unix:$DIR/$1.sock" CKPT_CLIENT_MIB="$MIB" \
        LD_LIBRARY_PATH="$BUILD/lib:$CUDA_LIB" "$CLIENT" "$2" "$3"
}

server source --status-file "$DIR/source.status"
wait_for "$DIR/source.sock"
FLYT_TRACE=1 client source loop "$DIR/ptr" >"$DIR/loop.out" 2>"$DIR/loop.err" &
LOOP=$!
wait_for "$DIR/ptr"
sleep 0.2
PTR=$(cat "$DIR/ptr")

"$CKPT" "$DIR/source.status" "$DIR/file.state" >/dev/null || die "checkpoint to a file failed"

SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$SECRET" >"$DIR/secret" && chmod 600 "$DIR/secret"
PORT=$(( 20000 + RANDOM % 20000 ))
server target --restore "$DIR/target.state" --restore-listen "tcp://127.0.0.1:$PORT" \
    --restore-secret-file "$DIR/secret" --restore-timeout 60
"$CKPT" "$DIR/source.status" "$DIR/streamed.state" --to "tcp://127.0.0.1:$PORT" \
    --secret-file "$DIR/secret" >/dev/null || die "streamed checkpoint failed"
wait_for "$DIR/target.sock"
(client target check "$PTR") >/dev/null || die "the streamed session does not hold its bytes"

server fromfile --restore "$DIR/file.state"
wait_for "$DIR/fromfile.sock"
(client fromfile check "$PTR") >/dev/null || die "the restored session does not hold its bytes"

# the live move: the receiver takes the source's socket once it holds the state
PORT=$(( 20000 + RANDOM % 20000 ))
SOCK="$DIR/source.sock" server moved --restore "$DIR/moved.state" \
    --restore-listen "tcp://127.0.0.1:$PORT" --restore-secret-file "$DIR/secret" --restore-timeout 60
SOURCE_PID=${PIDS[0]}
for _ in $(seq 1 400); do grep -q "waiting up to" "$DIR/moved.log" && break; sleep 0.025; done
"$CKPT" "$DIR/source.status" "$DIR/stopped.state" --stop --to "tcp://127.0.0.1:$PORT" \
    --secret-file "$DIR/secret" >/dev/null || die "the live move's checkpoint failed"
for _ in $(seq 1 2000); do grep -q "listening on unix:" "$DIR/moved.log" && break; sleep 0.005; done
kill -TERM "$SOURCE_PID"
sleep 0.3
touch "$DIR/ptr.go"
wait "$LOOP" || die "the program did not carry on after the move: $(tail -n 3 "$DIR/loop.err")"

echo "# $MIB MiB on the $BACKEND backend"
sed 's/^/program: /' "$DIR/loop.out"
grep -h 'move timing' "$DIR/loop.err" | sed 's/^/program: /'
for name in source target fromfile moved; do
    grep -hE 'checkpointed|state phases|restored:|received the session|move timing|client came' "$DIR/$name.log" |
        sed "s/^/$name: /"
done
