#!/usr/bin/env bash
# Runs tests/gpu/pytorch_check.py natively and through Flyt (Unix socket and
# TCP) and prints, per stage: native | flyt | identical | time ratio.
#
# usage: run_pytorch_check.sh BUILD_DIR
#
#   BUILD_DIR holds bin/flyt-server, bin/flyt-run and lib/libcuda.so.1.
#
# Environment (all optional):
#   OUT                 results go to $OUT/pytorch (default: a new /tmp dir)
#   FLYT_PYTHON         the interpreter with PyTorch (default: python3)
#   FLYT_TORCH_STAGES   --stage argument (default: all)
#   FLYT_TORCH_MODES    subset of "native unix tcp" (default: all three)
#   FLYT_TORCH_TIMEOUT  seconds per run (default: 420)
#   FLYT_TORCH_BUDGET   seconds for all runs: a run gets at most what is left,
#                       and is not started with under 30 s left (default: none)
#   FLYT_TEST_CUDA_LIB  the CUDA toolkit's lib64, for the servers
#                       (default: /usr/local/cuda/lib64)
#   FLYT_TORCH_PORT     TCP port (default: a free one from 39000)
#   FLYT_TORCH_SOCK     Unix socket (default: /tmp/flyt-torch.sock)
#
# PyTorch runs with the caller's environment (it finds NVIDIA's libraries in
# its own wheels); the Flyt runs only add `flyt-run --server ADDR --`.
# A stage is identical when its canonical text and pass/fail are the same as
# natively; the time ratio is flyt seconds / native seconds.
# Exit status: 0 when every stage passed natively and was identical through
# every transport, 1 otherwise, 2 on a setup error.

set -u

die() { echo "run_pytorch_check: $*" >&2; exit 2; }

if [ $# -ne 1 ] || [ "$1" = -h ] || [ "$1" = --help ]; then
    sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
BUILD_DIR=$(cd "$1" 2>/dev/null && pwd) || die "BUILD_DIR '$1' does not exist"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SCRIPT="$HERE/pytorch_check.py"
SERVER="$BUILD_DIR/bin/flyt-server"
FLYT_RUN="$BUILD_DIR/bin/flyt-run"
PY=${FLYT_PYTHON:-python3}
STAGES=${FLYT_TORCH_STAGES:-all}
MODES=${FLYT_TORCH_MODES:-native unix tcp}
TIMEOUT=${FLYT_TORCH_TIMEOUT:-420}
BUDGET=${FLYT_TORCH_BUDGET:-0}
case "$TIMEOUT$BUDGET" in *[!0-9]*) die "FLYT_TORCH_TIMEOUT and FLYT_TORCH_BUDGET are seconds" ;; esac
CUDA_LIB=${FLYT_TEST_CUDA_LIB:-/usr/local/cuda/lib64}
SOCK=${FLYT_TORCH_SOCK:-/tmp/flyt-torch.sock}
PORT=${FLYT_TORCH_PORT:-}

[ -x "$SERVER" ] || die "no executable $SERVER"
[ -x "$FLYT_RUN" ] || die "no executable $FLYT_RUN"
[ -e "$BUILD_DIR/lib/libcuda.so.1" ] || die "no Flyt client library $BUILD_DIR/lib/libcuda.so.1"
command -v "$PY" >/dev/null 2>&1 || die "no $PY"
command -v timeout >/dev/null 2>&1 || die "'timeout' (coreutils) is required"

if [ -n "${OUT:-}" ]; then
    RES="$OUT/pytorch"
else
    RES=$(mktemp -d /tmp/flyt-pytorch.XXXXXX) || die "mktemp failed"
fi
rm -rf "$RES"
mkdir -p "$RES" || die "cannot create $RES"

# The caller's library path, less Flyt's build (native runs must not see it).
LDLP=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | grep -v -x -F "$BUILD_DIR/lib" | paste -sd: -)

# ------------------------------------------------------------------ servers
declare -A SRV_PID=() ADDR=()
# shellcheck disable=SC2016 # $1 is expanded by the inner bash
tcp_up() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" >/dev/null 2>&1; }
unix_up() {
    [ -S "$1" ] && timeout 5 "$PY" -c '
import socket, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect(sys.argv[1])' "$1" >/dev/null 2>&1
}
if [ -z "$PORT" ]; then
    PORT=39000
    while tcp_up "$PORT" && [ "$PORT" -lt 39100 ]; do PORT=$((PORT + 1)); done
fi
ADDR[tcp]="tcp://127.0.0.1:$PORT"
ADDR[unix]="unix:$SOCK"

start_server() { # mode -> 0 once it accepts connections
    local mode=$1
    [ "$mode" = unix ] && rm -f "$SOCK"
    echo "=== $(date '+%F %T') flyt-server --listen ${ADDR[$mode]}" >>"$RES/server-$mode.log"
    env -u FLYT_SERVER LD_LIBRARY_PATH="$CUDA_LIB${LDLP:+:$LDLP}" \
        "$SERVER" --listen "${ADDR[$mode]}" </dev/null >>"$RES/server-$mode.log" 2>&1 &
    SRV_PID[$mode]=$!
    for _ in $(seq 100); do
        kill -0 "${SRV_PID[$mode]}" 2>/dev/null || { echo "=== exited during start-up" >>"$RES/server-$mode.log"; return 1; }
        if [ "$mode" = tcp ]; then tcp_up "$PORT" && return 0; else unix_up "$SOCK" && return 0; fi
        sleep 0.1
    done
    return 1
}

stop_server() { # mode
    local pid=${SRV_PID[$1]:-}
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    echo "=== $(date '+%F %T') stopped (status $?)" >>"$RES/server-$1.log"
    SRV_PID[$1]=""
}

RUN_PID=""
# shellcheck disable=SC2317 # invoked through the EXIT trap
cleanup() {
    [ -n "$RUN_PID" ] && kill -TERM "$RUN_PID" 2>/dev/null && wait "$RUN_PID" 2>/dev/null
    stop_server unix
    stop_server tcp
    rm -f "$SOCK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ runs
declare -A RC=() WALL=()
run_mode() { # mode
    local mode=$1 t0 t1 cmd=() limit=$TIMEOUT
    if [ "$BUDGET" -gt 0 ]; then
        [ $((BUDGET - SECONDS)) -lt "$limit" ] && limit=$((BUDGET - SECONDS))
        if [ "$limit" -lt 30 ]; then
            RC[$mode]="not run (time budget)"
            echo "--- pytorch_check ($mode): not run, time budget of ${BUDGET}s spent"
            return
        fi
    fi
    case "$mode" in
        native) cmd=(env -u FLYT_SERVER LD_LIBRARY_PATH="$LDLP") ;;
        unix | tcp)
            if ! start_server "$mode"; then
                RC[$mode]="server down"
                echo "run_pytorch_check: flyt-server ($mode) did not start; see $RES/server-$mode.log" >&2
                return
            fi
            cmd=(env LD_LIBRARY_PATH="$LDLP" "$FLYT_RUN" --server "${ADDR[$mode]}" --) ;;
    esac
    echo "--- pytorch_check ($mode) ..."
    t0=$(date +%s.%N)
    timeout -k 10 "$limit" "${cmd[@]}" "$PY" "$SCRIPT" --stage "$STAGES" --json "$RES/$mode.json" \
        </dev/null >"$RES/$mode.stdout" 2>"$RES/$mode.stderr" &
    RUN_PID=$!
    wait "$RUN_PID"
    RC[$mode]=$?
    RUN_PID=""
    t1=$(date +%s.%N)
    WALL[$mode]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    case "${RC[$mode]}" in 124 | 137) RC[$mode]="timeout ${limit}s" ;; esac
    echo "--- pytorch_check ($mode): rc ${RC[$mode]}, ${WALL[$mode]} s"
    [ "$mode" = native ] || stop_server "$mode"
}

echo "build dir: $BUILD_DIR"
echo "results:   $RES"
echo "python:    $(command -v "$PY")"
for mode in native unix tcp; do
    case " $MODES " in *" $mode "*) run_mode "$mode" ;; esac
done

# ------------------------------------------------------------------ table
SUMMARY="$RES/summary.txt"
"$PY" - "$RES" "${RC[native]:--}" "${WALL[native]:--}" "${RC[unix]:--}" "${WALL[unix]:--}" \
    "${RC[tcp]:--}" "${WALL[tcp]:--}" >"$SUMMARY" <<'EOF'
import difflib, json, os, sys

res = sys.argv[1]
rc = {"native": sys.argv[2], "unix": sys.argv[4], "tcp": sys.argv[6]}
wall = {"native": sys.argv[3], "unix": sys.argv[5], "tcp": sys.argv[7]}
modes = [m for m in ("native", "unix", "tcp") if rc[m] != "-"]
runs = {}
for m in modes:
    try:
        with open(os.path.join(res, m + ".json")) as f:
            runs[m] = {s["name"]: s for s in json.load(f)["stages"]}
    except (OSError, ValueError):
        runs[m] = {}
names = []
for m in modes:
    names += [n for n in runs[m] if n not in names]

def cell(m, n):
    s = runs[m].get(n)
    if s is None:
        return "missing"
    return f"{'ok' if s['ok'] else 'FAIL'} {s['seconds']:.2f}s"

def ratio(a, b):
    try:
        return f"{float(a) / float(b):.2f}" if float(b) > 0 else "-"
    except (TypeError, ValueError):
        return "-"

flyt = [m for m in modes if m != "native"]
good = True
rows = []
diffs = []
for n in names:
    nat = runs.get("native", {}).get(n)
    row = [n, cell("native", n) if "native" in modes else "-"]
    good = good and nat is not None and nat["ok"]
    for m in flyt:
        s = runs[m].get(n)
        same = nat is not None and s is not None and s["text"] == nat["text"] and s["ok"] == nat["ok"]
        good = good and same
        if nat is not None and s is not None and not same:
            diffs.append(f"--- {n}: native vs flyt-{m}\n" + "\n".join(difflib.unified_diff(
                nat["text"].splitlines(), s["text"].splitlines(), "native", "flyt-" + m, lineterm="")))
        row += [cell(m, n), "yes" if same else "no",
                ratio(s and s["seconds"], nat and nat["seconds"])]
    rows.append(row)
row = ["(whole run)", f"rc {rc['native']} {wall['native']}s" if "native" in modes else "-"]
for m in flyt:
    row += [f"rc {rc[m]} {wall[m]}s", "yes" if rc[m] == rc.get("native") else "no", ratio(wall[m], wall["native"])]
    good = good and rc[m] == rc.get("native")
rows.append(row)
good = good and rc.get("native") == "0"

head = ["stage", "native"]
for m in flyt:
    head += [f"flyt-{m}", "identical", "time ratio"]
width = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
fmt = lambda r: " | ".join(str(c).ljust(w) for c, w in zip(r, width)).rstrip()
if diffs:
    print("\n".join(diffs))
    print()
for m in modes:
    for n, s in runs[m].items():
        if s.get("error"):
            print(f"{m} {n}: {s['error']}")
init = runs.get("native", {}).get("init", {}).get("info", {})
if init:
    print("native device: " + ", ".join(f"{k}={v}" for k, v in init.items()))
for m in flyt:
    info = runs[m].get("init", {}).get("info", {})
    if info:
        print(f"flyt-{m} device: " + ", ".join(f"{k}={v}" for k, v in info.items()))
print()
print(fmt(head))
print("-+-".join("-" * w for w in width))
for r in rows:
    print(fmt(r))
print()
print(f"pytorch_check: {'PASS' if good else 'FAIL'} (native {'passed' if rc.get('native') == '0' else 'failed'},"
      f" every stage identical through {', '.join('flyt-' + m for m in flyt) or 'no transport'}: "
      f"{'yes' if all(r[3 + 3 * i] == 'yes' for r in rows for i in range(len(flyt))) else 'no'})")
sys.exit(0 if good else 1)
EOF
status=$?
cat "$SUMMARY"
[ "$status" -eq 0 ] && exit 0
exit 1
