#!/usr/bin/env bash
# Runs the Flyt benchmark programs natively and through Flyt (TCP and Unix
# socket) on a GPU machine and merges their RESULT lines into one markdown
# table. See bench/README.md.
#
# usage: bench/run_bench.sh BUILD_DIR [--quick]
#
# BUILD_DIR holds bin/flyt-server, bin/flyt-run, lib/libcuda.so.1 (Flyt's
# client library) and bench/bench_* (the programs); bench_torch is
# bench/src/bench_torch.py, run with $FLYT_PYTHON (PyTorch). Flyt runs are
# `flyt-run --server ADDR -- PROGRAM`. Results go to $OUT/bench/ when
# OUT is set, else to a new temporary directory:
#   <date>-<commit>.md   the report (also printed last on stdout)
#   results.tsv          merged values, tab-separated
#   raw.log              every run's command, status, stdout and stderr, and
#                        the servers' logs
#
# Environment (all optional):
#   FLYT_BENCH_PROGRAMS  programs to run (default: bench_latency bench_launch
#                        bench_memcpy bench_torch)
#   FLYT_BENCH_MODES     subset of "native tcp unix tls" (default: native tcp unix);
#                        tls: TCP with TLS (docs/tls.md), a throwaway CA and
#                        certificate made with the openssl command
#   FLYT_BENCH_TLS_DIR   ca.pem, srv.pem and srv.key to use instead
#   FLYT_BENCH_ARGS      extra arguments for every program (e.g. "--no-1gib")
#   FLYT_BENCH_TIMEOUT   seconds per program run (default 240, 120 with --quick)
#   FLYT_BENCH_PORT      TCP port for the server (default 47311, next free one)
#   FLYT_BENCH_SOCK      Unix socket path (default /tmp/flyt-bench.sock)
#   FLYT_BENCH_SERVER_ARGS  extra arguments for flyt-server
#   FLYT_CUDA_LIB        real CUDA runtime directory (default /usr/local/cuda/lib64),
#                        put first for the CUDA programs and the servers
#   FLYT_PYTHON          interpreter with PyTorch for bench_torch (default python3);
#                        it gets the caller's LD_LIBRARY_PATH (its own wheels)
#   FLYT_COMMIT          commit to name in the report when git cannot tell
#
# Exit status: 0 when the report was written and every native run succeeded
# (Flyt failures show as FAIL in the report), 3 when a native run failed,
# 2 on bad usage.

set -u -o pipefail

usage() {
    echo "usage: $0 BUILD_DIR [--quick]" >&2
    exit 2
}

BUILD_DIR=""
QUICK=0
for arg in "$@"; do
    case "$arg" in
        --quick) QUICK=1 ;;
        -h | --help) usage ;;
        -*) echo "unknown option: $arg" >&2; usage ;;
        *) [ -z "$BUILD_DIR" ] || usage; BUILD_DIR=$arg ;;
    esac
done
[ -n "$BUILD_DIR" ] || usage
[ -d "$BUILD_DIR" ] || { echo "no such directory: $BUILD_DIR" >&2; exit 2; }
BUILD_DIR=$(cd "$BUILD_DIR" && pwd)
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

PROGRAMS=${FLYT_BENCH_PROGRAMS:-bench_latency bench_launch bench_memcpy bench_torch}
MODES=${FLYT_BENCH_MODES:-native tcp unix}
ALL_MODES="native tcp unix tls"
if [ "$QUICK" = 1 ]; then
    TIMEOUT=${FLYT_BENCH_TIMEOUT:-120}
else
    TIMEOUT=${FLYT_BENCH_TIMEOUT:-240}
fi
PORT=${FLYT_BENCH_PORT:-47311}
TLS_PORT=$((PORT + 100))
SOCK=${FLYT_BENCH_SOCK:-/tmp/flyt-bench.sock}
CUDA_LIB=${FLYT_CUDA_LIB:-/usr/local/cuda/lib64}
# The caller's library path, less Flyt's build (native runs must not see it).
ORIG_LDLP=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | grep -v -x -F "$BUILD_DIR/lib" | paste -sd: -)
PY=${FLYT_PYTHON:-python3}
FLYT_RUN=$BUILD_DIR/bin/flyt-run
SERVER=$BUILD_DIR/bin/flyt-server
CLIENT_LIB_DIR=$BUILD_DIR/lib
read -r -a PROG_ARGS <<<"${FLYT_BENCH_ARGS:-}"
[ "$QUICK" = 1 ] && PROG_ARGS=(--quick "${PROG_ARGS[@]}")
read -r -a SERVER_ARGS <<<"${FLYT_BENCH_SERVER_ARGS:-}"

if [ -n "${OUT:-}" ]; then
    DEST=$OUT/bench
    mkdir -p "$DEST" || exit 2
else
    DEST=$(mktemp -d /tmp/flyt-bench-results.XXXXXX) || exit 2
fi
WORK=$(mktemp -d /tmp/flyt-bench-work.XXXXXX) || exit 2

log() { echo "run_bench: $*" >&2; }

has_mode() { case " $MODES " in *" $1 "*) return 0 ;; esac; return 1; }

# ---------------------------------------------------------------- servers

declare -A SERVER_PID=()   # mode -> pid (its own process group when setsid exists)
declare -A SERVER_ADDR=()  # mode -> address given to --listen and FLYT_SERVER
RUN_PID=""                  # the benchmark run in progress, if any
declare -A FIRST_ADDR=()   # mode -> the first such address (for the report)

tcp_listening() { # port
    local hex
    hex=$(printf ':%04X' "$1")
    if [ -r /proc/net/tcp ]; then
        awk -v p="$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 }
                         END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}

unix_listening() { # path
    if [ -r /proc/net/unix ]; then
        awk -v p="$1" '$4 == "00010000" && $8 == p { f = 1 } END { exit !f }' /proc/net/unix
    else
        [ -S "$1" ]
    fi
}

server_listening() { # mode
    case "$1" in
        tcp) tcp_listening "$PORT" ;;
        tls) tcp_listening "$TLS_PORT" ;;
        unix) unix_listening "$SOCK" ;;
    esac
}

# True while pid runs (an exited child that is not yet reaped does not count).
pid_running() { # pid
    local state
    kill -0 "$1" 2>/dev/null || return 1
    [ -r "/proc/$1/stat" ] || return 0
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)
    [ "$state" != Z ]
}

server_alive() { # mode
    local pid=${SERVER_PID[$1]:-}
    [ -n "$pid" ] && pid_running "$pid"
}

stop_server() { # mode
    local pid=${SERVER_PID[$1]:-} rc
    [ -n "$pid" ] || return 0
    if pid_running "$pid"; then
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 50); do
            pid_running "$pid" || break
            sleep 0.1
        done
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
    rc=$?
    echo "=== $(date -u +%FT%TZ) server stopped (exit status $rc)" >>"$WORK/server.$1.log"
    unset "SERVER_PID[$1]"
    [ "$1" = unix ] && rm -f "$SOCK"
    return 0
}

# The port to listen on: a restart (the mode had an address) takes the next
# one (the old one may linger in TIME_WAIT); ports someone else listens on
# are skipped.
free_port() { # port, the mode's address so far
    local port=$1
    [ -n "$2" ] && port=$((port + 1))
    for _ in $(seq 20); do
        tcp_listening "$port" || break
        port=$((port + 1))
    done
    echo "$port"
}

# A CA and a server certificate for 127.0.0.1 it signed, once, for the tls mode
# (FLYT_BENCH_TLS_DIR: ca.pem, srv.pem, srv.key made beforehand, for a machine
# without the openssl command).
make_certs() {
    [ -f "$WORK/tls/srv.pem" ] && return 0
    if [ -n "${FLYT_BENCH_TLS_DIR:-}" ]; then
        mkdir -p "$WORK/tls" && cp "$FLYT_BENCH_TLS_DIR"/{ca.pem,srv.pem,srv.key} "$WORK/tls/" &&
            chmod 600 "$WORK/tls/srv.key"
        return
    fi
    mkdir -p "$WORK/tls" && (
        cd "$WORK/tls" &&
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
            -subj "/CN=flyt bench CA" &&
        openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj "/CN=flyt-server" &&
        printf 'subjectAltName=IP:127.0.0.1\n' >san.cnf &&
        openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem \
            -days 2 -extfile san.cnf && chmod 600 srv.key ca.key
    ) >/dev/null 2>&1
}

start_server() { # mode; returns non-zero when it does not come up
    local mode=$1 addr slog=$WORK/server.$1.log extra=()
    stop_server "$mode"
    case "$mode" in
        tcp)
            PORT=$(free_port "$PORT" "${SERVER_ADDR[tcp]:-}")
            addr=tcp://127.0.0.1:$PORT ;;
        tls)
            TLS_PORT=$(free_port "$TLS_PORT" "${SERVER_ADDR[tls]:-}")
            make_certs || { echo "run_bench: openssl cannot make a certificate" >>"$slog"; return 1; }
            extra=(--tls-cert "$WORK/tls/srv.pem" --tls-key "$WORK/tls/srv.key")
            addr=tls://127.0.0.1:$TLS_PORT ;;
        unix)
            rm -f "$SOCK"
            addr=unix:$SOCK ;;
    esac
    SERVER_ADDR[$mode]=$addr
    FIRST_ADDR[$mode]=${FIRST_ADDR[$mode]:-$addr}
    if [ ! -x "$SERVER" ]; then
        echo "run_bench: no executable $SERVER" >>"$slog"
        return 1
    fi
    echo "=== $(date -u +%FT%TZ) starting: $SERVER --listen $addr ${extra[*]} ${SERVER_ARGS[*]}" >>"$slog"
    local launcher=()
    command -v setsid >/dev/null && launcher=(setsid)
    # The server must load the real CUDA runtime, never the client library.
    LD_LIBRARY_PATH=$CUDA_LIB${ORIG_LDLP:+:$ORIG_LDLP} \
        "${launcher[@]}" "$SERVER" --listen "$addr" "${extra[@]}" "${SERVER_ARGS[@]}" \
        </dev/null >>"$slog" 2>&1 &
    SERVER_PID[$mode]=$!
    for _ in $(seq 300); do # up to 30 s
        if ! server_alive "$mode"; then
            wait "${SERVER_PID[$mode]}" 2>/dev/null
            echo "=== server exited with status $? before listening" >>"$slog"
            unset "SERVER_PID[$mode]"
            return 1
        fi
        server_listening "$mode" && return 0
        sleep 0.1
    done
    echo "=== server did not listen on $addr within 30 s" >>"$slog"
    stop_server "$mode"
    return 1
}

# shellcheck disable=SC2317 # invoked through the EXIT trap
cleanup() {
    local m
    if [ -n "$RUN_PID" ]; then # timeout passes the signal on to the program
        kill -TERM "$RUN_PID" 2>/dev/null
        wait "$RUN_PID" 2>/dev/null
    fi
    for m in "${!SERVER_PID[@]}"; do
        stop_server "$m"
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- runs

declare -A STATUS=() # "prog mode" -> ok | FAIL(...) | TIMEOUT | skipped
declare -A WALL=()   # "prog mode" -> seconds
NATIVE_FAILED=0

run_one() { # prog mode
    local prog=$1 mode=$2 key="$1 $2" out=$WORK/$1.$2.out err=$WORK/$1.$2.err
    local exe=$BUILD_DIR/bench/$prog ldlp rc t0 t1
    local envs=() cmd=() launcher=()
    : >"$out"
    : >"$err"
    if [ "$prog" = bench_torch ]; then
        # PyTorch finds NVIDIA's libraries in its own wheels: no toolkit dir.
        exe=$SCRIPT_DIR/src/bench_torch.py
        cmd=("$PY" "$exe")
        ldlp=$ORIG_LDLP
        if ! command -v "$PY" >/dev/null 2>&1 || [ ! -f "$exe" ]; then
            STATUS[$key]="FAIL(no python or script)"
            echo "run_bench: need $PY and $exe" >"$err"
            return
        fi
    else
        cmd=("$exe")
        ldlp=$CUDA_LIB${ORIG_LDLP:+:$ORIG_LDLP}
        if [ ! -x "$exe" ]; then
            STATUS[$key]="FAIL(no program)"
            echo "run_bench: no executable $exe" >"$err"
            return
        fi
    fi
    case "$mode" in
        native)
            envs=(-u FLYT_SERVER) ;;
        tcp | unix | tls)
            if [ ! -e "$CLIENT_LIB_DIR/libcuda.so.1" ] || [ ! -x "$FLYT_RUN" ]; then
                # Without them the program would silently run natively.
                STATUS[$key]="FAIL(no client library)"
                echo "run_bench: no $CLIENT_LIB_DIR/libcuda.so.1 or $FLYT_RUN" >"$err"
                return
            fi
            if ! { server_alive "$mode" && server_listening "$mode"; }; then
                log "($mode server not running, starting it)"
                if ! start_server "$mode"; then
                    STATUS[$key]="FAIL(server)"
                    echo "run_bench: flyt-server for $mode did not start (see server log)" >"$err"
                    return
                fi
            fi
            envs=(-u FLYT_SERVER)
            [ "$mode" = tls ] && envs+=(FLYT_TLS_CA="$WORK/tls/ca.pem")
            launcher=("$FLYT_RUN" --server "${SERVER_ADDR[$mode]}" --) ;;
    esac
    {
        echo "command: env ${envs[*]} LD_LIBRARY_PATH=$ldlp timeout $TIMEOUT ${launcher[*]} ${cmd[*]} ${PROG_ARGS[*]}"
        echo "library path seen: $(env "${envs[@]}" LD_LIBRARY_PATH="$ldlp" "${launcher[@]}" printenv LD_LIBRARY_PATH 2>&1)"
    } >"$WORK/$prog.$mode.cmd"
    log "$prog ($mode) ..."
    t0=$(date +%s.%N)
    # In the background so that a signal to this script is handled at once.
    env "${envs[@]}" LD_LIBRARY_PATH="$ldlp" \
        timeout -k 10 "$TIMEOUT" "${launcher[@]}" "${cmd[@]}" "${PROG_ARGS[@]}" </dev/null >"$out" 2>"$err" &
    RUN_PID=$!
    wait "$RUN_PID"
    rc=$?
    RUN_PID=
    t1=$(date +%s.%N)
    WALL[$key]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    case $rc in
        0) STATUS[$key]=ok ;;
        124 | 137) STATUS[$key]="TIMEOUT(${TIMEOUT}s)" ;;
        *) STATUS[$key]="FAIL(rc=$rc)" ;;
    esac
    log "$prog ($mode): ${STATUS[$key]} in ${WALL[$key]} s"
    if [ "$rc" != 0 ]; then
        [ "$mode" = native ] && NATIVE_FAILED=1
        if [ "$mode" != native ] && ! server_alive "$mode"; then
            echo "=== $(date -u +%FT%TZ) server gone after $prog failed" >>"$WORK/server.$mode.log"
        fi
        # A failed client may leave the server in a bad state: start afresh.
        if [ "$mode" != native ] && server_alive "$mode"; then
            start_server "$mode" || log "($mode server failed to restart)"
        fi
    fi
}

for mode in tcp unix tls; do
    if has_mode "$mode"; then
        if start_server "$mode"; then
            log "flyt-server ($mode) listening on ${SERVER_ADDR[$mode]}"
        else
            log "flyt-server ($mode) did not start; its runs will show FAIL"
        fi
    fi
done

for prog in $PROGRAMS; do
    for mode in $ALL_MODES; do
        if has_mode "$mode"; then
            run_one "$prog" "$mode"
        else
            STATUS["$prog $mode"]=skipped
        fi
    done
done

for m in "${!SERVER_PID[@]}"; do
    stop_server "$m"
done

# ---------------------------------------------------------------- report

COMMIT=$(git -C "$SCRIPT_DIR" rev-parse HEAD 2>/dev/null) || COMMIT=""
if [ -n "$COMMIT" ]; then
    git -C "$SCRIPT_DIR" diff --quiet HEAD 2>/dev/null || COMMIT_NOTE=" (working tree has changes)"
else
    COMMIT=${FLYT_COMMIT:-unknown}
fi
COMMIT_NOTE=${COMMIT_NOTE:-}
GPU="unknown (nvidia-smi unavailable)"
if command -v nvidia-smi >/dev/null 2>&1; then
    GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
          head -n 1 | awk -F', *' '{ print $1 " (driver " $2 ")" }')
    [ -n "$GPU" ] || GPU="unknown (nvidia-smi failed)"
fi
DATE=$(date -u +%F)
SHORT=${COMMIT:0:12}
REPORT=$DEST/$DATE-$SHORT.md
TSV=$DEST/results.tsv

# Lines "status<TAB>prog<TAB>mode<TAB>status" then "result<TAB>prog<TAB>mode<TAB>name<TAB>value<TAB>unit".
{
    for prog in $PROGRAMS; do
        for mode in $ALL_MODES; do
            printf 'status\t%s\t%s\t%s\n' "$prog" "$mode" "${STATUS["$prog $mode"]:-skipped}"
        done
    done
    for prog in $PROGRAMS; do
        for mode in $ALL_MODES; do
            f=$WORK/$prog.$mode.out
            [ -f "$f" ] || continue
            awk -v p="$prog" -v m="$mode" '$1 == "RESULT" && NF >= 4 {
                printf "result\t%s\t%s\t%s\t%s\t%s\n", p, m, $2, $3, $4 }' "$f"
        done
    done
} >"$WORK/merged.in"

# Writes results.tsv to $TSV and the markdown table on stdout.
merge() {
    awk -F'\t' -v tsv="$TSV" '
    function isnum(v) { return v ~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ }
    function cell(prog, mode, name,    k, st) {
        k = name SUBSEP mode
        if (k in val) return val[k]
        st = status[prog, mode]
        if (st == "skipped") return "-"
        if (st == "ok") return "-"     # not measured (filtered out)
        return "FAIL"
    }
    # How many times slower Flyt is: time flyt/native, bandwidth native/flyt.
    function ratio(nat, fly, unit) {
        if (fly == "FAIL") return "FAIL"
        if (!isnum(nat) || !isnum(fly) || nat + 0 <= 0 || fly + 0 <= 0) return "-"
        if (unit ~ /\/s$/) return sprintf("%.2f", nat / fly)
        return sprintf("%.2f", fly / nat)
    }
    # Values from a run that failed after printing them get a dagger.
    function mark(prog, mode, v) {
        if (status[prog, mode] == "ok" || v == "FAIL" || v == "-") return v
        partial = 1
        return v " †"
    }
    $1 == "status" { status[$2, $3] = $4; if (!($2 in seenprog)) { seenprog[$2] = 1; progs[++np] = $2 } }
    $1 == "result" {
        k = $4 SUBSEP $3
        if (!($4 in owner)) { owner[$4] = $2; unit[$4] = $6; names[++nn] = $4; count[$2]++ }
        if (!(k in val)) val[k] = $5
    }
    END {
        print "| measurement | unit | native | flyt-tcp | ratio | flyt-unix | ratio | flyt-tls | ratio |"
        print "|---|---|---:|---:|---:|---:|---:|---:|---:|"
        print "name\tunit\tnative\tflyt_tcp\tratio_tcp\tflyt_unix\tratio_unix\tflyt_tls\tratio_tls" > tsv
        for (i = 1; i <= np; i++) {
            p = progs[i]
            if (!count[p]) {
                # Nothing from any run: one row so that failures still show.
                n = "(" p ": no results)"
                a = status[p, "native"]; b = status[p, "tcp"]; c = status[p, "unix"]
                d = status[p, "tls"]
                printf "| %s | | %s | %s | | %s | | %s | |\n", n, a, b, c, d
                printf "%s\t\t%s\t%s\t\t%s\t\t%s\t\n", n, a, b, c, d > tsv
                continue
            }
            for (j = 1; j <= nn; j++) {
                n = names[j]
                if (owner[n] != p) continue
                nat = cell(p, "native", n); t = cell(p, "tcp", n); u = cell(p, "unix", n)
                e = cell(p, "tls", n)
                rt = ratio(nat, t, unit[n]); ru = ratio(nat, u, unit[n]); re = ratio(nat, e, unit[n])
                printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n, unit[n], nat, t, rt, u, ru,
                       e, re > tsv
                printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, unit[n],
                       mark(p, "native", nat), mark(p, "tcp", t), rt, mark(p, "unix", u), ru,
                       mark(p, "tls", e), re
            }
        }
        if (partial)
            print "\n† measured by a run that failed later (see the run table above)"
    }' "$WORK/merged.in"
}
{
    echo "# Flyt benchmarks: native vs. Flyt"
    echo
    echo "- date: $(date -u '+%F %T UTC')"
    echo "- commit: \`$COMMIT\`$COMMIT_NOTE"
    echo "- GPU: $GPU"
    echo "- host: $(uname -n), $(nproc 2>/dev/null || echo '?') CPUs, kernel $(uname -r)"
    echo "- mode: $([ "$QUICK" = 1 ] && echo quick || echo full)${PROG_ARGS[*]:+, program arguments: ${PROG_ARGS[*]}}"
    echo "- flyt-tcp: \`${FIRST_ADDR[tcp]:-not run}\`, flyt-unix: \`${FIRST_ADDR[unix]:-not run}\`, flyt-tls: \`${FIRST_ADDR[tls]:-not run}\` (raw.log has each run's)"
    echo "- values: median over repeated timed batches after a warm-up; ratio = how many times"
    echo "  slower Flyt is than native (times: flyt/native, bandwidths: native/flyt)"
    echo
    echo "| program | native | flyt-tcp | flyt-unix | flyt-tls |"
    echo "|---|---|---|---|---|"
    for prog in $PROGRAMS; do
        row="| $prog |"
        for mode in $ALL_MODES; do
            st=${STATUS["$prog $mode"]:-skipped}
            [ -n "${WALL["$prog $mode"]:-}" ] && st="$st, ${WALL["$prog $mode"]} s"
            row="$row $st |"
        done
        echo "$row"
    done
    echo
    merge
} >"$REPORT"

{
    for prog in $PROGRAMS; do
        for mode in $ALL_MODES; do
            [ -f "$WORK/$prog.$mode.out" ] || continue
            echo "===== $prog ($mode): ${STATUS["$prog $mode"]}, ${WALL["$prog $mode"]:-?} s"
            [ -f "$WORK/$prog.$mode.cmd" ] && cat "$WORK/$prog.$mode.cmd"
            echo "----- stdout"
            cat "$WORK/$prog.$mode.out"
            echo "----- stderr"
            cat "$WORK/$prog.$mode.err"
        done
    done
    for mode in tcp unix tls; do
        [ -f "$WORK/server.$mode.log" ] || continue
        echo "===== flyt-server ($mode) log"
        cat "$WORK/server.$mode.log"
    done
} >"$DEST/raw.log"

log "report: $REPORT"
log "raw outputs: $DEST/raw.log, merged values: $TSV"
cat "$REPORT"
[ "$NATIVE_FAILED" = 0 ] || exit 3
exit 0
