#!/usr/bin/env bash
# Run the CUDA test programs natively and through Flyt (TCP and Unix socket),
# compare their stdout and exit codes, and print a summary table.
#
# usage: run_gpu_tests.sh BUILD_DIR [PROGRAM...]
#
#   BUILD_DIR must hold bin/flyt-server, bin/flyt-run, lib/libcuda.so.1 (the
#   Flyt client) and gpu-tests/<program> (built by tests/gpu/CMakeLists.txt).
#   PROGRAM...  optional subset of programs to run (default: all).
#
# Environment (all optional):
#   OUT                  results go to $OUT/gpu-tests, server logs to $OUT
#                        (default: a new directory under /tmp)
#   FLYT_TEST_PORT       TCP port for the TCP server (default: a free one)
#   FLYT_TEST_SOCK       Unix socket path (default: /tmp/flyt-test.sock)
#   FLYT_TEST_REPEATS    runs per program and variant (default: 3)
#   FLYT_TEST_TIMEOUT    seconds allowed per run (default: 60)
#   FLYT_TEST_CUDA_LIB   the CUDA toolkit's library directory, first on the
#                        library path (default: /usr/local/cuda/lib64)
#   FLYT_TEST_NVIDIA_LIBS  the whole library path for NVIDIA's libraries
#                        (default: what tests/gpu/nvidia-libs.sh prints: the
#                        toolkit, then NVIDIA's Python wheels)
#   FLYT_TEST_PACK=1     pack the per-run files into gpu-tests.tar.gz (next
#                        to the gpu-tests directory, which is then removed)
#   FLYT_TEST_BUDGET     seconds: programs not started by then are reported
#                        as "not run (time budget)" (default: no limit)
#
# Native runs and the servers get LD_LIBRARY_PATH=<NVIDIA's libraries>, so
# they load the system's libcuda.so.1; Flyt runs go through
# `flyt-run --server ADDR -- PROGRAM`, which puts BUILD_DIR/lib first.
# A program whose libraries the loader cannot find is skipped (its row says
# which library).
#
# Exit status: 0 if every program passed or was skipped, 1 if any failed,
# 2 on a setup error. A program passes when every Flyt run (TCP and Unix) has
# the same stdout and exit code as the first native run.

set -u

# -cudart shared, the same with -cudart static, then NVIDIA's libraries and
# the driver API
DEFAULT_PROGRAMS=(vector_add matmul_tiled kernel_params streams_events
                  memcpy_variants symbols host_callbacks multithread
                  device_props rdc errors device_printf device_assert
                  managed_memory mapped_memory textures_surfaces graphs_capture graphs_explicit
                  graphs_params graphs_conditional host_func_order streams_attributes
                  thrust_cub coop_groups stream_ordered_alloc clusters_dsmem
                  dynamic_parallelism device_heap_limits tma_tensor_map pitched_3d
                  events_timing_flags
                  vector_add_static matmul_tiled_static kernel_params_static
                  streams_events_static memcpy_variants_static symbols_static
                  host_callbacks_static multithread_static device_props_static
                  rdc_static errors_static device_printf_static device_assert_static
                  managed_memory_static mapped_memory_static textures_surfaces_static
                  graphs_capture_static graphs_explicit_static graphs_params_static graphs_conditional_static
                  host_func_order_static streams_attributes_static
                  thrust_cub_static coop_groups_static stream_ordered_alloc_static
                  clusters_dsmem_static dynamic_parallelism_static
                  device_heap_limits_static tma_tensor_map_static pitched_3d_static
                  events_timing_flags_static
                  static_runtime driver_api nvrtc_kernel cublas_gemm cufft_1d2d
                  curand_host_device cusparse_spmv cusolver_lu cudnn_conv vmm
                  driver_runtime_mix nvjitlink_lto graph_mem_nodes graph_mem_nodes_static
                  host_alloc_flags host_alloc_flags_static host_alloc_mapped host_alloc_mapped_static
                  cublas_ext cusparse_cusolver_ext compressible_memory managed_patterns
                  no_current_context no_current_context_static ipc_memory ipc_memory_static
                  pool_ipc pool_ipc_static batch_ops batch_ops_static nvml_fork nvml_fork_static
                  launch_pdl launch_pdl_static managed_vars managed_vars_static)

die() {
    echo "run_gpu_tests: $*" >&2
    exit 2
}

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi

BUILD_DIR=$(cd "$1" 2>/dev/null && pwd) || die "BUILD_DIR '$1' does not exist"
shift
if [ $# -gt 0 ]; then
    PROGRAMS=("$@")
else
    PROGRAMS=("${DEFAULT_PROGRAMS[@]}")
fi

SERVER="$BUILD_DIR/bin/flyt-server"
FLYT_RUN="$BUILD_DIR/bin/flyt-run"
FLYT_LIB="$BUILD_DIR/lib"
PROG_DIR="$BUILD_DIR/gpu-tests"
CUDA_LIB="${FLYT_TEST_CUDA_LIB:-/usr/local/cuda/lib64}"
NV_LIBS="${FLYT_TEST_NVIDIA_LIBS:-$(bash "$(dirname "$0")/nvidia-libs.sh" "$CUDA_LIB")}"
[ -n "$NV_LIBS" ] || NV_LIBS="$CUDA_LIB"
SOCK="${FLYT_TEST_SOCK:-/tmp/flyt-test.sock}"
REPEATS="${FLYT_TEST_REPEATS:-3}"
TIMEOUT="${FLYT_TEST_TIMEOUT:-60}"
PACK="${FLYT_TEST_PACK:-0}"
BUDGET="${FLYT_TEST_BUDGET:-0}"
READY_WAIT=10   # seconds to wait for a server to accept connections

case "$REPEATS" in '' | *[!0-9]* | 0) die "FLYT_TEST_REPEATS must be a positive integer" ;; esac
case "$TIMEOUT" in '' | *[!0-9]* | 0) die "FLYT_TEST_TIMEOUT must be a positive integer" ;; esac
case "$BUDGET" in '' | *[!0-9]*) die "FLYT_TEST_BUDGET must be a number of seconds" ;; esac

command -v timeout >/dev/null 2>&1 || die "'timeout' (coreutils) is required"
[ -x "$SERVER" ] || die "server not found or not executable: $SERVER"
[ -x "$FLYT_RUN" ] || die "flyt-run not found or not executable: $FLYT_RUN"
[ -e "$FLYT_LIB/libcuda.so.1" ] || die "Flyt client library not found: $FLYT_LIB/libcuda.so.1"
case ":$NV_LIBS:" in *":$FLYT_LIB:"*) die "NVIDIA's library path must not hold $FLYT_LIB" ;; esac
[ -d "$PROG_DIR" ] || echo "run_gpu_tests: warning: no program directory $PROG_DIR" >&2

if [ -n "${OUT:-}" ]; then
    LOG_DIR="$OUT"
else
    LOG_DIR=$(mktemp -d /tmp/flyt-gpu-tests.XXXXXX) || die "mktemp failed"
fi
RESULTS="$LOG_DIR/gpu-tests"
rm -rf "$RESULTS"
mkdir -p "$RESULTS" || die "cannot create $RESULTS"
TIMES="$RESULTS/times.tsv"
printf 'program\tvariant\trun\trc\tseconds\n' >"$TIMES"

# ------------------------------------------------------------------ probes
probe_tcp() { # port -> 0 if something accepts connections on 127.0.0.1:port
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" >/dev/null 2>&1
}

probe_unix() { # path -> 0 if something accepts connections on the socket
    [ -S "$1" ] || return 1
    if command -v python3 >/dev/null 2>&1; then
        timeout 5 python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(2)
s.connect(sys.argv[1])
s.close()' "$1" >/dev/null 2>&1
    elif command -v socat >/dev/null 2>&1; then
        timeout 3 socat -u OPEN:/dev/null "UNIX-CONNECT:$1" >/dev/null 2>&1
    else
        return 0 # the socket file exists: best we can tell
    fi
}

pick_port() {
    local i p
    for i in $(seq 1 50); do
        p=$((20000 + RANDOM % 30000))
        probe_tcp "$p" || { echo "$p"; return 0; }
    done
    echo 47655
}

PORT="${FLYT_TEST_PORT:-$(pick_port)}"
TCP_ADDR="tcp://127.0.0.1:$PORT"
UNIX_ADDR="unix:$SOCK"

# ------------------------------------------------------------------ servers
declare -A SRV_PID=() SRV_ADDR=() SRV_LOG=() SRV_STARTS=()
MAX_STARTS=4    # start attempts per server (first start + restarts)
SRV_ADDR[tcp]="$TCP_ADDR"
SRV_ADDR[unix]="$UNIX_ADDR"
SRV_LOG[tcp]="$LOG_DIR/server-tcp.log"
SRV_LOG[unix]="$LOG_DIR/server-unix.log"
: >"${SRV_LOG[tcp]}"
: >"${SRV_LOG[unix]}"
NOTES=()

stop_server() { # kind
    local pid="${SRV_PID[$1]:-}" i
    [ -n "$pid" ] || return 0
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for i in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
    SRV_PID[$1]=""
}

# shellcheck disable=SC2317 # invoked through the EXIT trap
cleanup() {
    stop_server tcp
    stop_server unix
    [ -S "$SOCK" ] && rm -f "$SOCK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

server_ready() { # kind
    if [ "$1" = tcp ]; then probe_tcp "$PORT"; else probe_unix "$SOCK"; fi
}

start_server() { # kind -> 0 when accepting connections
    local kind="$1" pid start
    SRV_STARTS[$kind]=$((${SRV_STARTS[$kind]:-0} + 1))
    if [ "${SRV_STARTS[$kind]}" -gt "$MAX_STARTS" ]; then
        return 1 # given up on this server
    fi
    [ "$kind" = unix ] && [ -S "$SOCK" ] && rm -f "$SOCK"
    echo "=== $(date '+%F %T') starting flyt-server --listen ${SRV_ADDR[$kind]}" >>"${SRV_LOG[$kind]}"
    # The server uses NVIDIA's driver, never the Flyt client library.
    env -u FLYT_SERVER LD_LIBRARY_PATH="$NV_LIBS" \
        "$SERVER" --listen "${SRV_ADDR[$kind]}" </dev/null >>"${SRV_LOG[$kind]}" 2>&1 &
    pid=$!
    SRV_PID[$kind]=$pid
    start=$SECONDS
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            wait "$pid" 2>/dev/null
            echo "run_gpu_tests: flyt-server ($kind) exited during start-up (status $?)" >&2
            tail -n 20 "${SRV_LOG[$kind]}" | sed 's/^/    /' >&2
            SRV_PID[$kind]=""
            return 1
        fi
        if server_ready "$kind"; then
            return 0
        fi
        if [ $((SECONDS - start)) -ge "$READY_WAIT" ]; then
            echo "run_gpu_tests: flyt-server ($kind) not accepting connections after ${READY_WAIT}s" >&2
            tail -n 20 "${SRV_LOG[$kind]}" | sed 's/^/    /' >&2
            stop_server "$kind"
            return 1
        fi
        sleep 0.1
    done
}

# Before each Flyt run: restart a server that died (and note it).
ensure_server() { # kind prog
    local kind="$1" prog="$2" pid="${SRV_PID[$1]:-}"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        return 0
    fi
    if [ -n "$pid" ]; then
        wait "$pid" 2>/dev/null
        server_died "$kind" "$?"
        SRV_PID[$kind]=""
    fi
    start_server "$kind"
}

# A server that exits while programs use it is a failure of the program that
# ran on it last (the one during or after whose run it died).
declare -A LAST_PROG=() SRV_DIED=()
server_died() { # kind status
    local last="${LAST_PROG[$1]:-}"
    NOTES+=("flyt-server ($1) exited with status $2 during or after a run of ${last:-?}")
    [ -n "$last" ] && SRV_DIED[$last.$1]=1
}

# ------------------------------------------------------------------ library check
# Make sure the Flyt runs really load the Flyt client library (through
# flyt-run) and the native runs NVIDIA's driver; otherwise the "Flyt" runs
# would silently run natively.
resolved() { # lib prog [flyt] -> the file the loader picks for lib
    local got
    if [ "${3:-}" = flyt ]; then
        got=$(env LD_LIBRARY_PATH="$NV_LIBS" "$FLYT_RUN" --server "$UNIX_ADDR" -- ldd "$2" 2>/dev/null)
    else
        got=$(env -u FLYT_SERVER LD_LIBRARY_PATH="$NV_LIBS" ldd "$2" 2>/dev/null)
    fi
    awk -v l="$1" '$1 == l { print ($3 ~ /^\// ? $3 : "not found") }' <<<"$got" | head -n 1
}

check_resolution() {
    local p prog="" shared="" got want
    echo "nvidia libs: $NV_LIBS"
    command -v ldd >/dev/null 2>&1 || { echo "ldd not available: library resolution not checked"; return 0; }
    for p in driver_api nvrtc_kernel; do
        [ -x "$PROG_DIR/$p" ] && { prog="$PROG_DIR/$p"; break; }
    done
    if [ -z "$prog" ]; then
        echo "no program linked to libcuda.so.1 (driver_api, nvrtc_kernel): resolution not checked"
    else
        want=$(readlink -f "$FLYT_LIB/libcuda.so.1")
        got=$(resolved libcuda.so.1 "$prog" flyt)
        echo "flyt runs:   libcuda.so.1 => ${got:-?}"
        if [ -z "$got" ] || [ "$(readlink -f "$got")" != "$want" ]; then
            die "through flyt-run, $prog loads libcuda.so.1 from '${got:-?}' instead of $want"
        fi
        got=$(resolved libcuda.so.1 "$prog")
        echo "native runs: libcuda.so.1 => ${got:-?}"
        [ -n "$got" ] && [ "$(readlink -f "$got")" = "$want" ] &&
            die "native runs would load the Flyt client library ($want)"
    fi
    # For the record: which runtime the -cudart shared programs load.
    for p in "${PROGRAMS[@]}"; do
        [ -x "$PROG_DIR/$p" ] && [ "$p" = "${p%_static}" ] && { shared="$PROG_DIR/$p"; break; }
    done
    if [ -n "$shared" ]; then
        got=$(resolved libcudart.so.13 "$shared" flyt)
        echo "flyt runs:   libcudart.so.13 => ${got:-?}"
        case "$got" in "$FLYT_LIB"/*) NOTES+=("flyt runs load libcudart.so.13 from $FLYT_LIB, not NVIDIA's") ;; esac
    fi
    return 0
}

# Names of the libraries the loader cannot find for prog with NVIDIA's path
# (comma-separated; empty when all are there or ldd is missing).
missing_libs() { # prog
    command -v ldd >/dev/null 2>&1 || return 0
    env LD_LIBRARY_PATH="$NV_LIBS" ldd "$1" 2>/dev/null |
        awk '$2 == "=>" && $3 == "not" { print $1 }' | paste -sd, -
}

# ------------------------------------------------------------------ running
# run_one PROG VARIANT IDX: sets RUN_RC and RUN_SECS
run_one() {
    local prog="$1" variant="$2" idx="$3" bin="$PROG_DIR/$1"
    local base="$RESULTS/$prog.$variant.$idx" t0 t1
    t0=$(date +%s.%N)
    case "$variant" in
    native)
        env -u FLYT_SERVER LD_LIBRARY_PATH="$NV_LIBS" \
            timeout -k 5 "$TIMEOUT" "$bin" </dev/null >"$base.stdout" 2>"$base.stderr"
        RUN_RC=$?
        ;;
    tcp | unix)
        LAST_PROG[$variant]=$prog
        env LD_LIBRARY_PATH="$NV_LIBS" timeout -k 5 "$TIMEOUT" \
            "$FLYT_RUN" --server "${SRV_ADDR[$variant]}" -- "$bin" \
            </dev/null >"$base.stdout" 2>"$base.stderr"
        RUN_RC=$?
        ;;
    esac
    t1=$(date +%s.%N)
    RUN_SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    if [ "$RUN_RC" -eq 124 ] || [ "$RUN_RC" -eq 137 ]; then
        echo "[run_gpu_tests: timed out after ${TIMEOUT}s (rc $RUN_RC)]" >>"$base.stderr"
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$prog" "$variant" "$idx" "$RUN_RC" "$RUN_SECS" >>"$TIMES"
}

median() { # numbers... -> lower median
    printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'
}

ratio() { # num den
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b <= 0) print "-"; else printf "%.2f", a / b }'
}

join_unique() { # values... -> "a/b" of distinct values in order
    local out="" v
    for v in "$@"; do
        case "/$out/" in *"/$v/"*) ;; *) out="${out:+$out/}$v" ;; esac
    done
    echo "${out:--}"
}

# Programs whose TCP run must print native's stdout changed by this sed
# script: between machines managed memory has no concurrent access, and
# registered memory is mapped at another device address, not read-only
# (docs/host-memory.md).
declare -A TCP_STDOUT_SED=(
    [managed_memory]='s/concurrentManagedAccess: 1/concurrentManagedAccess: 0/'
    [managed_memory_static]='s/concurrentManagedAccess: 1/concurrentManagedAccess: 0/'
    [mapped_memory]='s/canUseHostPointerForRegisteredMem: 1/canUseHostPointerForRegisteredMem: 0/; s/registered device pointer == host pointer: 1/registered device pointer == host pointer: 0/'
    [mapped_memory_static]='s/canUseHostPointerForRegisteredMem: 1/canUseHostPointerForRegisteredMem: 0/; s/registered device pointer == host pointer: 1/registered device pointer == host pointer: 0/'
    [host_alloc_mapped]='s/read-only registration supported: 1/read-only registration supported: 0/; /registered Mapped|ReadOnly malloc/d; /kernel reads read-only registered memory/d'
    [host_alloc_mapped_static]='s/read-only registration supported: 1/read-only registration supported: 0/; /registered Mapped|ReadOnly malloc/d; /kernel reads read-only registered memory/d'
)

declare -A R_NATIVE_RC=() R_RC=() R_SAME=() R_RATIO=() R_PASS=() R_SKIP=()

run_program() {
    local prog="$1" i variant
    local ref="$RESULTS/$prog.native.1.stdout"
    local -a rcs times
    local native_med native_rc0 same med first_bad

    if [ ! -x "$PROG_DIR/$prog" ]; then
        echo "--- $prog: MISSING ($PROG_DIR/$prog)"
        NOTES+=("$prog: program missing ($PROG_DIR/$prog)")
        R_NATIVE_RC[$prog]="missing"
        for variant in tcp unix; do
            R_RC[$prog.$variant]="-"
            R_SAME[$prog.$variant]="no"
            R_RATIO[$prog.$variant]="-"
        done
        R_PASS[$prog]=0
        return
    fi
    local missing
    missing=$(missing_libs "$PROG_DIR/$prog")
    if [ -n "$missing" ]; then
        echo "--- $prog: skipped (library not found: $missing)"
        R_SKIP[$prog]="skipped (library not found: $missing)"
        return
    fi

    # native
    rcs=()
    times=()
    for i in $(seq 1 "$REPEATS"); do
        run_one "$prog" native "$i"
        rcs+=("$RUN_RC")
        times+=("$RUN_SECS")
        if [ "$i" -gt 1 ] && ! cmp -s "$ref" "$RESULTS/$prog.native.$i.stdout"; then
            diff -u "$ref" "$RESULTS/$prog.native.$i.stdout" >"$RESULTS/$prog.native.$i.diff"
            NOTES+=("$prog: native run $i stdout differs from native run 1 (non-deterministic output?)")
        fi
    done
    native_rc0="${rcs[0]}"
    native_med=$(median "${times[@]}")
    R_NATIVE_RC[$prog]=$(join_unique "${rcs[@]}")
    [ "$native_rc0" -eq 0 ] || NOTES+=("$prog: native run exits $native_rc0")
    echo "--- $prog: native rc=${R_NATIVE_RC[$prog]} median ${native_med}s"

    R_PASS[$prog]=1
    for variant in tcp unix; do
        local want="$ref"
        if [ "$variant" = tcp ] && [ -n "${TCP_STDOUT_SED[$prog]:-}" ]; then
            sed "${TCP_STDOUT_SED[$prog]}" "$ref" >"$RESULTS/$prog.tcp-want.stdout"
            want="$RESULTS/$prog.tcp-want.stdout"
        fi
        rcs=()
        times=()
        same=yes
        first_bad=""
        for i in $(seq 1 "$REPEATS"); do
            if ! ensure_server "$variant" "$prog"; then
                rcs+=("down")
                same=no
                NOTES+=("$prog: flyt-server ($variant) is down; $variant run $i skipped")
                continue
            fi
            run_one "$prog" "$variant" "$i"
            rcs+=("$RUN_RC")
            times+=("$RUN_SECS")
            if [ "$RUN_RC" != "$native_rc0" ] || ! cmp -s "$want" "$RESULTS/$prog.$variant.$i.stdout"; then
                same=no
                [ -n "$first_bad" ] || first_bad=$i
            fi
        done
        if [ -n "$first_bad" ]; then
            {
                echo "exit code: native $native_rc0, $variant run $first_bad: ${rcs[$((first_bad - 1))]}"
                diff -u --label "expected stdout" --label "$variant.$first_bad.stdout" \
                    "$want" "$RESULTS/$prog.$variant.$first_bad.stdout"
            } >"$RESULTS/$prog.$variant.diff"
        fi
        med=""
        [ "${#times[@]}" -gt 0 ] && med=$(median "${times[@]}")
        R_RC[$prog.$variant]=$(join_unique "${rcs[@]}")
        R_SAME[$prog.$variant]=$same
        R_RATIO[$prog.$variant]=$(ratio "$med" "$native_med")
        [ "$same" = yes ] || R_PASS[$prog]=0
        echo "--- $prog: flyt-$variant rc=${R_RC[$prog.$variant]} identical=$same median ${med:--}s"
    done
}

# ------------------------------------------------------------------ main
echo "build dir:   $BUILD_DIR"
echo "results:     $RESULTS"
echo "servers:     $TCP_ADDR, $UNIX_ADDR"
echo "repeats:     $REPEATS, timeout ${TIMEOUT}s per run"
check_resolution

start_server tcp || NOTES+=("flyt-server (tcp) failed to start; see ${SRV_LOG[tcp]}")
start_server unix || NOTES+=("flyt-server (unix) failed to start; see ${SRV_LOG[unix]}")

for prog in "${PROGRAMS[@]}"; do
    if [ "$BUDGET" -gt 0 ] && [ "$SECONDS" -ge "$BUDGET" ]; then
        R_SKIP[$prog]="not run (time budget of ${BUDGET}s spent)"
        continue
    fi
    run_program "$prog"
done

for kind in tcp unix; do
    pid="${SRV_PID[$kind]:-}"
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" 2>/dev/null
        server_died "$kind" "$?"
        SRV_PID[$kind]=""
    fi
done
stop_server tcp
stop_server unix

# ------------------------------------------------------------------ summary
SUMMARY="$RESULTS/summary.txt"
passed=0
failed=0
skipped=0
{
    if [ "${#NOTES[@]}" -gt 0 ]; then
        echo
        echo "notes:"
        printf '  - %s\n' "${NOTES[@]}"
    fi
    echo
    fmt='%-22s | %-9s | %-11s | %-13s | %-14s | %-12s | %-14s | %s\n'
    # shellcheck disable=SC2059
    printf "$fmt" program "native rc" "flyt-tcp rc" "tcp identical" "tcp time ratio" \
        "flyt-unix rc" "unix identical" "unix time ratio"
    printf '%s\n' "-----------------------+-----------+-------------+---------------+----------------+--------------+----------------+----------------"
    for prog in "${PROGRAMS[@]}"; do
        if [ -n "${R_SKIP[$prog]:-}" ]; then
            printf '%-22s | %s\n' "$prog" "${R_SKIP[$prog]}"
            skipped=$((skipped + 1))
            continue
        fi
        for kind in tcp unix; do
            if [ -n "${SRV_DIED[$prog.$kind]:-}" ]; then
                R_SAME[$prog.$kind]="server died"
                R_PASS[$prog]=0
            fi
        done
        # shellcheck disable=SC2059
        printf "$fmt" "$prog" "${R_NATIVE_RC[$prog]}" \
            "${R_RC[$prog.tcp]}" "${R_SAME[$prog.tcp]}" "${R_RATIO[$prog.tcp]}" \
            "${R_RC[$prog.unix]}" "${R_SAME[$prog.unix]}" "${R_RATIO[$prog.unix]}"
        if [ "${R_PASS[$prog]}" = 1 ]; then
            passed=$((passed + 1))
        else
            failed=$((failed + 1))
        fi
    done
    echo
    # a session ends however its program left: never by a signal
    for kind in tcp unix; do
        crashed=$(grep -c "killed by signal" "${SRV_LOG[$kind]}" 2>/dev/null)
        if [ "${crashed:-0}" -gt 0 ]; then
            echo "server ($kind): $crashed session(s) killed by a signal (see $(basename "${SRV_LOG[$kind]}"))"
            failed=$((failed + 1))
        fi
    done
    if [ "$skipped" -gt 0 ]; then
        echo "$passed passed, $failed failed, $skipped skipped"
    else
        echo "$passed passed, $failed failed"
    fi
} >"$SUMMARY"

cp "$SUMMARY" "$LOG_DIR/gpu-tests-summary.txt" 2>/dev/null
if [ "$PACK" = 1 ]; then
    if tar -czf "$LOG_DIR/gpu-tests.tar.gz" -C "$LOG_DIR" gpu-tests; then
        rm -rf "$RESULTS"
        echo "per-run outputs packed into $LOG_DIR/gpu-tests.tar.gz"
    fi
else
    echo "per-run outputs and diffs in $RESULTS"
fi

cat "$SUMMARY" 2>/dev/null || cat "$LOG_DIR/gpu-tests-summary.txt"
if [ "$failed" -eq 0 ]; then
    exit 0
fi
exit 1
