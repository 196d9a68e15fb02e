#!/usr/bin/env bash
# The SM and memory share of flyt-server on a real GPU (green contexts).
#
# usage: tests/gpu/share_check.sh BUILD_DIR
#
#   BUILD_DIR holds bin/flyt-server, lib/libcuda.so.1 (the Flyt client) and
#   gpu-tests/share_check (tests/gpu/share_check.cu, built by
#   tests/gpu/CMakeLists.txt with the GPU programs).
#
# Runs share_check natively (whole GPU), then through flyt-server with shares
# of 16, 32 and 64 SMs (--sm-groups of --sm-granularity 8) and a memory quota,
# and 32 SMs on scattered groups (must be as fast as contiguous ones), and
# prints the kernel times side by side. With SHARE_MPS=1 it also starts
# MPS and runs two 64-SM tenants at once, from disjoint SM groups and from the
# same groups (DESIGN.md: disjoint groups should not slow each other down).
# If the client library knows FLYT_SESSION_TOKEN, one run goes through a
# server that requires a session token (made here with python3).
#
# Environment (optional): OUT (results; default a new /tmp directory),
# SHARE_GRANULARITY (8), SHARE_QUOTA (4GiB), SHARE_ITERS (20000),
# SHARE_MPS (0), FLYT_TEST_CUDA_LIB (/usr/local/cuda/lib64).
# Exit status: 0 when every run passed its checks and the times fell with
# more SMs, 1 otherwise, 2 on a setup error.
set -u

die() { echo "share_check: $*" >&2; exit 2; }
[ $# -ge 1 ] || { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BUILD=$(cd "$1" 2>/dev/null && pwd) || die "no build directory $1"
SERVER="$BUILD/bin/flyt-server"
FLYT_LIB="$BUILD/lib"
PROG="$BUILD/gpu-tests/share_check"
CUDA_LIB="${FLYT_TEST_CUDA_LIB:-/usr/local/cuda/lib64}"
GRAN="${SHARE_GRANULARITY:-8}"
QUOTA="${SHARE_QUOTA:-4GiB}"
MPS="${SHARE_MPS:-0}"
export SHARE_ITERS="${SHARE_ITERS:-20000}"
[ -x "$SERVER" ] || die "no $SERVER"
[ -x "$PROG" ] || die "no $PROG (configure with -DFLYT_GPU_PROGRAMS=ON)"
[ -e "$FLYT_LIB/libcuda.so.1" ] || die "no Flyt client in $FLYT_LIB"
OUTDIR="${OUT:-$(mktemp -d /tmp/flyt-share.XXXXXX)}/share-check"
mkdir -p "$OUTDIR" || die "cannot create $OUTDIR"

case "$QUOTA" in
*GiB) QUOTA_BYTES=$(( ${QUOTA%GiB} * 1024 * 1024 * 1024 )) ;;
*MiB) QUOTA_BYTES=$(( ${QUOTA%MiB} * 1024 * 1024 )) ;;
*[!0-9]*) die "SHARE_QUOTA: use NGiB, NMiB or bytes" ;;
*) QUOTA_BYTES=$QUOTA ;;
esac

PIDS=()
MPS_ON=0
# shellcheck disable=SC2317 # invoked through the EXIT trap
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    if [ "$MPS_ON" = 1 ]; then echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; fi
}
trap cleanup EXIT

# shellcheck disable=SC2016 # $1 is expanded by the inner bash
probe() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" >/dev/null 2>&1; }
free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 30000))
        probe "$p" || { echo "$p"; return; }
    done
    echo 47700
}
groups_for() { # first-group sms -> "first,...,last" of sms/GRAN groups
    local first=$1 n=$(( $2 / GRAN )) i out=""
    for i in $(seq "$first" $((first + n - 1))); do out="$out${out:+,}$i"; done
    echo "$out"
}

# start_server NAME ARGS... -> sets SRV_PID SRV_ADDR
start_server() {
    local name=$1; shift
    local port; port=$(free_port)
    env -u FLYT_SERVER LD_LIBRARY_PATH="$CUDA_LIB" "$SERVER" --listen "tcp://127.0.0.1:$port" "$@" \
        >"$OUTDIR/server-$name.log" 2>&1 &
    SRV_PID=$!
    PIDS+=("$SRV_PID")
    SRV_ADDR="tcp://127.0.0.1:$port"
    for _ in $(seq 1 100); do
        probe "$port" && return 0
        kill -0 "$SRV_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "share_check: server $name did not start:" >&2
    tail -n 20 "$OUTDIR/server-$name.log" >&2
    return 1
}
stop_server() { kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# run NAME ENV... -> runs the program, stdout in NAME.txt; prints its ms
FAILED=0
run() {
    local name=$1; shift
    if ! env "$@" timeout 300 "$PROG" >"$OUTDIR/$name.txt" 2>&1; then
        FAILED=1
        echo "share_check: run $name FAILED:" >&2
        grep -E 'FAIL|error' "$OUTDIR/$name.txt" | head -5 >&2
    fi
    sed -n 's/^RESULT ms=\([0-9.]*\) sms=\([0-9]*\) distinct=\([0-9]*\).*/\1 \2 \3/p' "$OUTDIR/$name.txt"
}
flyt_env() { echo "FLYT_SERVER=$1" "LD_LIBRARY_PATH=$FLYT_LIB:$CUDA_LIB"; }

nvidia-smi -L 2>/dev/null | head -4
declare -A MS SMS DIST
read -r "MS[native]" "SMS[native]" "DIST[native]" < <(run native LD_LIBRARY_PATH="$CUDA_LIB")

for n in 16 32 64; do
    start_server "sm$n" --sm-groups "$(groups_for 0 "$n")" --sm-granularity "$GRAN" \
        --memory-quota "$QUOTA" || { FAILED=1; continue; }
    # shellcheck disable=SC2046
    read -r "MS[sm$n]" "SMS[sm$n]" "DIST[sm$n]" < <(run "sm$n" $(flyt_env "$SRV_ADDR") \
        SHARE_EXPECT_SMS="$n" SHARE_EXPECT_QUOTA="$QUOTA_BYTES")
    stop_server "$SRV_PID"
done

# 32 SMs on scattered groups (every other one): placement and resize take any free
# groups (docs/design.md, "SM groups need not be contiguous"), so it must run as fast
scattered=$(seq 0 2 $(( 2 * 32 / GRAN - 2 )) | paste -sd,)
if start_server sm32s --sm-groups "$scattered" --sm-granularity "$GRAN" --memory-quota "$QUOTA"; then
    # shellcheck disable=SC2046
    read -r "MS[sm32s]" "SMS[sm32s]" "DIST[sm32s]" < <(run sm32s $(flyt_env "$SRV_ADDR") \
        SHARE_EXPECT_SMS=32 SHARE_EXPECT_QUOTA="$QUOTA_BYTES")
    stop_server "$SRV_PID"
else
    FAILED=1
fi

# a server that requires a session token, if the client can send one
if grep -qa FLYT_SESSION_TOKEN "$FLYT_LIB/libcuda.so.1" && command -v python3 >/dev/null; then
    key="$OUTDIR/session.key"
    python3 -c 'import os; print(os.urandom(32).hex())' >"$key" && chmod 600 "$key"
    token=$(python3 - "$key" <<'EOF'
import hashlib, hmac, sys, time
key = bytes.fromhex(open(sys.argv[1]).read().strip())
sid, exp = "s-share-check", int(time.time()) + 3600
mac = hmac.new(key, f"{sid}\n{exp}".encode(), hashlib.sha256).hexdigest()
print(f"{mac}.{sid}.{exp}")
EOF
)
    if start_server token --session-id s-share-check --session-key-file "$key" \
        --sm-groups "$(groups_for 0 32)" --sm-granularity "$GRAN" --memory-quota "$QUOTA"; then
        # shellcheck disable=SC2046
        read -r "MS[token]" "SMS[token]" "DIST[token]" < <(run token $(flyt_env "$SRV_ADDR") \
            FLYT_SESSION_TOKEN="$token" SHARE_EXPECT_SMS=32 SHARE_EXPECT_QUOTA="$QUOTA_BYTES")
        # shellcheck disable=SC2046
        env $(flyt_env "$SRV_ADDR") timeout 60 "$PROG" >"$OUTDIR/notoken.txt" 2>&1 &&
            { echo "share_check: a client without the token got in" >&2; FAILED=1; }
        stop_server "$SRV_PID"
    else
        FAILED=1
    fi
else
    echo "share_check: the client library does not send session tokens yet: token run skipped"
fi

if [ "$MPS" = 1 ]; then
    export CUDA_MPS_PIPE_DIRECTORY="$OUTDIR/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$OUTDIR/mps-log"
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d && MPS_ON=1
    if [ "$MPS_ON" = 1 ]; then
        # 56 SMs (7 groups) each: an H100's 132 SMs split into only 15 groups of 8,
        # so two disjoint 64-SM tenants do not fit (measured 2026-11-21)
        A="" B="" C="" A_ADDR="" B_ADDR="" C_ADDR=""
        start_server mps56 --sm-groups "$(groups_for 0 56)" --sm-granularity "$GRAN" && A=$SRV_PID A_ADDR=$SRV_ADDR
        # shellcheck disable=SC2046
        read -r "MS[mps56]" "SMS[mps56]" "DIST[mps56]" < <(run mps56 $(flyt_env "$A_ADDR") SHARE_EXPECT_SMS=56)
        start_server mpsB --sm-groups "$(groups_for 7 56)" --sm-granularity "$GRAN" && B=$SRV_PID B_ADDR=$SRV_ADDR
        start_server mpsC --sm-groups "$(groups_for 0 56)" --sm-granularity "$GRAN" && C=$SRV_PID C_ADDR=$SRV_ADDR
        for pair in "disjoint:$B_ADDR" "same:$C_ADDR"; do
            kind=${pair%%:*} other=${pair#*:}
            if [ -z "$A_ADDR" ] || [ -z "$other" ]; then FAILED=1; continue; fi
            # shellcheck disable=SC2046
            env $(flyt_env "$A_ADDR") SHARE_REPEATS=20 timeout 300 "$PROG" >"$OUTDIR/mps-$kind-1.txt" 2>&1 &
            p1=$!
            # shellcheck disable=SC2046
            env $(flyt_env "$other") SHARE_REPEATS=20 timeout 300 "$PROG" >"$OUTDIR/mps-$kind-2.txt" 2>&1 &
            p2=$!
            wait $p1 || FAILED=1
            wait $p2 || FAILED=1
            MS["mps-$kind"]="$(sed -n 's/^RESULT ms=\([0-9.]*\).*/\1/p' "$OUTDIR/mps-$kind-1.txt") / $(sed -n 's/^RESULT ms=\([0-9.]*\).*/\1/p' "$OUTDIR/mps-$kind-2.txt")"
        done
        for p in $A $B $C; do stop_server "$p"; done
        echo quit | nvidia-cuda-mps-control && MPS_ON=0
    else
        echo "share_check: nvidia-cuda-mps-control -d failed: MPS runs skipped" >&2
        FAILED=1
    fi
fi

echo
echo "| run | SMs reported | distinct SMs used | kernel ms (median) |"
echo "| --- | --- | --- | --- |"
for k in native sm16 sm32 sm32s sm64 token mps56; do
    [ -n "${MS[$k]:-}" ] && echo "| $k | ${SMS[$k]} | ${DIST[$k]} | ${MS[$k]} |"
done
for k in mps-disjoint mps-same; do
    [ -n "${MS[$k]:-}" ] && echo "| $k (two 56-SM tenants at once) | 56 | | ${MS[$k]} |"
done
echo
# More SMs, less time: 16 -> 32 -> 64 should each be clearly faster.
if [ -n "${MS[sm16]:-}" ] && [ -n "${MS[sm32]:-}" ] && [ -n "${MS[sm64]:-}" ]; then
    if awk -v a="${MS[sm16]}" -v b="${MS[sm32]}" -v c="${MS[sm64]}" \
        'BEGIN { exit !(a > 1.5 * b && b > 1.5 * c) }'; then
        echo "share_check: kernel time scales with the share (16 > 32 > 64 SMs)"
    else
        echo "share_check: FAIL kernel time does not scale with the share" >&2
        FAILED=1
    fi
else
    FAILED=1
fi
if [ -n "${MS[sm32]:-}" ] && [ -n "${MS[sm32s]:-}" ]; then
    if awk -v a="${MS[sm32]}" -v b="${MS[sm32s]}" 'BEGIN { exit !(b < 1.05 * a) }'; then
        echo "share_check: ok   32 SMs on scattered groups ($scattered) as fast as contiguous (${MS[sm32s]} vs ${MS[sm32]} ms)"
    else
        echo "share_check: FAIL 32 SMs on scattered groups ($scattered): ${MS[sm32s]} ms vs ${MS[sm32]} contiguous" >&2
        FAILED=1
    fi
else
    FAILED=1
fi
echo "share_check: outputs and server logs in $OUTDIR"
if [ "$FAILED" = 0 ]; then echo "share_check: PASSED"; else echo "share_check: FAILED"; fi
exit "$FAILED"
