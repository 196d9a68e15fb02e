#!/usr/bin/env bash
# On the GPU machine: every GPU test program natively and through Flyt (TCP
# and Unix socket), the PyTorch check, then the benchmarks. Each part's full
# logs are packed into $OUT/logs-<part>.tar.gz as soon as it ends (few files
# come back); the short summary tables are printed last and kept in
# $OUT/summary.txt.
#
# usage: scripts/gpu-run.sh BUILD_DIR [--quick] [--only PART[,PART...]]
#   PART: tests, pytorch, pytorch-es, nvml, bench (default: tests, pytorch,
#         bench in that order; pytorch-es: the PyTorch check again with
#         expandable_segments:True, natively and over a Unix socket; nvml:
#         nvidia-smi on Flyt's NVML)
#   --quick: one run per test program and variant (unless FLYT_TEST_REPEATS
#            is set) and bench/run_bench.sh --quick
#   FLYT_TEST_PROGRAMS="a b_static ...": only these test programs (default: all)
#
# Each part runs under a time limit, so that the summary is always written:
#   FLYT_GPU_TESTS_LIMIT (default 420 s; programs not started 30 s before it
#   are reported as not run), FLYT_GPU_TORCH_LIMIT (400 s), FLYT_GPU_BENCH_LIMIT
#   (420 s). A device command may run 10 minutes at most: with all three parts
#   split the run, e.g. `--only tests` then `--only pytorch,bench --quick`.
#   Parts: tests, pytorch, pytorch-es, nvml, elastic (checkpoint/restore and
#   sessions moved mid-run, tests/gpu/migrate_check.sh), hangup (sessions
#   blocked on a never-ending kernel whose client is killed,
#   tests/gpu/hangup_check.sh), bench.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
build=$(cd "$1" && pwd) || exit 2
shift
quick=0
parts="tests,pytorch,bench"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1 ;;
        --only) parts=${2:?--only needs a list}; shift ;;
        --only=*) parts=${1#--only=} ;;
        *) echo "gpu-run: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export FLYT_COMMIT=${FLYT_COMMIT:-$(cat "$root/.commit" 2>/dev/null || echo unknown)}
summary=$OUT/summary.txt
: >"$summary"
has_part() { case ",$parts," in *",$1,"*) return 0 ;; esac; return 1; }

{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.used,memory.total --format=csv; } > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

# pack NAME FILES...: the part's logs into logs-NAME.tar.gz, then removed
pack() {
    local name=$1 f
    shift
    local present=()
    for f in "$@"; do [ -e "$OUT/$f" ] && present+=("$f"); done
    [ "${#present[@]}" -gt 0 ] || return 0
    if tar -czf "$OUT/logs-$name.tar.gz" -C "$OUT" "${present[@]}"; then
        (cd "$OUT" && rm -rf "${present[@]}")
    fi
}

tests_rc=-
torch_rc=-
bench_rc=-

if has_part tests; then
    limit=${FLYT_GPU_TESTS_LIMIT:-420}
    read -r -a programs <<< "${FLYT_TEST_PROGRAMS:-}" # the programs to run, all if none
    repeats=${FLYT_TEST_REPEATS:-$([ "$quick" = 1 ] && echo 1 || echo 3)}
    echo "gpu-run: tests (limit ${limit}s, $repeats runs per program and variant) ..."
    FLYT_TEST_REPEATS=$repeats FLYT_TEST_BUDGET=${FLYT_TEST_BUDGET:-$((limit - 30))} \
        timeout -k 10 "$limit" bash "$root/tests/gpu/run_gpu_tests.sh" "$build" "${programs[@]}" \
        > "$OUT/gpu-tests.txt" 2>&1
    tests_rc=$?
    {
        echo "===== GPU test programs (native vs Flyt), rc=$tests_rc"
        if [ -f "$OUT/gpu-tests/summary.txt" ]; then
            sed -n '/^program /,$p' "$OUT/gpu-tests/summary.txt"
        else
            tail -n 40 "$OUT/gpu-tests.txt"
        fi
    } >> "$summary"
    cp "$OUT/gpu-tests/summary.txt" "$OUT/gpu-tests-summary.txt" 2>/dev/null
    pack tests gpu-tests gpu-tests.txt gpu-tests-summary.txt server-tcp.log server-unix.log
fi

# torch_part NAME OUTDIR HEADING: run_pytorch_check.sh with its results under
# OUTDIR (and the environment the caller set), its table into the summary.
torch_part() {
    local name=$1 dir=$2 heading=$3 limit=${FLYT_GPU_TORCH_LIMIT:-400} rc
    echo "gpu-run: $name (limit ${limit}s) ..."
    mkdir -p "$dir"
    OUT=$dir FLYT_TORCH_BUDGET=${FLYT_TORCH_BUDGET:-$((limit - 20))} \
        timeout -k 10 "$limit" bash "$root/tests/gpu/run_pytorch_check.sh" "$build" \
        > "$OUT/$name.txt" 2>&1
    rc=$?
    {
        echo "===== $heading, rc=$rc"
        if [ -f "$dir/pytorch/summary.txt" ]; then
            sed -n '/^stage /,$p' "$dir/pytorch/summary.txt"
        else
            tail -n 30 "$OUT/$name.txt"
        fi
    } >> "$summary"
    return $rc
}

if has_part pytorch; then
    torch_part pytorch "$OUT" "PyTorch check (native vs Flyt)"
    torch_rc=$?
    pack pytorch pytorch pytorch.txt
fi

if has_part pytorch-es; then
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True FLYT_TORCH_MODES=${FLYT_TORCH_MODES:-native unix} \
        torch_part pytorch-es "$OUT/es" "PyTorch check, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    es_rc=$?
    [ "$torch_rc" = - ] || [ "$torch_rc" = 0 ] && torch_rc=$es_rc
    pack pytorch-es es pytorch-es.txt
fi

if has_part nvml; then
    echo "gpu-run: nvidia-smi on Flyt's NVML ..."
    timeout -k 10 120 bash "$root/tests/gpu/nvml_check.sh" "$build" > "$OUT/nvml.txt" 2>&1
    nvml_rc=$?
    { echo "===== nvidia-smi natively and on Flyt's NVML, rc=$nvml_rc"; cat "$OUT/nvml.txt"; } >> "$summary"
    pack nvml nvml nvml.txt
fi

if has_part elastic; then
    # checkpoint/restore and sessions moved mid-run (issue 10), each against native
    echo "gpu-run: elastic (checkpoint, restore, moves mid-run) ..."
    cuda_lib=${FLYT_TEST_CUDA_LIB:-/usr/local/cuda/lib64}
    {
        echo "===== elastic: checkpoint, restore, sessions moved mid-run"
        OUT=$OUT timeout -k 10 180 bash "$root/tests/gpu/state_check.sh" "$build" cuda 2>&1 | tail -n 12
        echo "-- a client carrying on across moves (tests/client/run_reconnect.sh, cuda)"
        (tmpdir=$(mktemp -d) && cd "$tmpdir" && timeout -k 10 240 bash "$root/tests/client/run_reconnect.sh" \
            "$build/bin/flyt-server" "$build/lib:$cuda_lib" "$build/bin/test_reconnect" cuda 2>&1 | tail -n 15)
        OUT=$OUT timeout -k 10 240 bash "$root/tests/gpu/migrate_check.sh" "$build" loop "step 50:" -- \
            "$build/gpu-tests/migrate_loop" 200 20 2>&1 | tail -n 12
        OUT=$OUT timeout -k 10 240 bash "$root/tests/gpu/migrate_check.sh" "$build" global "step 50:" -- \
            "$build/gpu-tests/migrate_loop" 200 20 global 2>&1 | tail -n 12
        OUT=$OUT timeout -k 10 240 bash "$root/tests/gpu/migrate_check.sh" "$build" pinned "step 50:" -- \
            "$build/gpu-tests/migrate_loop" 200 20 pinned 2>&1 | tail -n 12
        OUT=$OUT timeout -k 10 240 bash "$root/tests/gpu/migrate_check.sh" "$build" vmm "step 50:" -- \
            "$build/gpu-tests/migrate_loop" 200 20 vmm 2>&1 | tail -n 12
        OUT=$OUT timeout -k 10 240 bash "$root/tests/gpu/migrate_check.sh" "$build" graph "step 50:" -- \
            "$build/gpu-tests/migrate_loop" 200 20 graph 2>&1 | tail -n 12
        # stream-ordered memory (cudaMallocAsync: the default pool and a created one) across the
        # move, through a file and streamed
        OUT=$OUT timeout -k 10 240 bash "$root/tests/gpu/migrate_check.sh" "$build" async "step 50:" -- \
            "$build/gpu-tests/migrate_loop" 200 20 async 2>&1 | tail -n 12
        OUT=$OUT MIGRATE_VIA=stream timeout -k 10 240 bash "$root/tests/gpu/migrate_check.sh" "$build" \
            async-stream "step 50:" -- "$build/gpu-tests/migrate_loop" 200 20 async 2>&1 | tail -n 12
        OUT=$OUT timeout -k 10 300 bash "$root/tests/gpu/migrate_check.sh" "$build" torch "step 50:" -- \
            "${FLYT_PYTHON:-python3}" "$root/tests/gpu/migrate_train.py" 200 0.02 2>&1 | tail -n 12
        # PyTorch's allocator on the driver's VMM (expandable segments)
        OUT=$OUT PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout -k 10 300 \
            bash "$root/tests/gpu/migrate_check.sh" "$build" torch-expandable "step 50:" -- \
            "${FLYT_PYTHON:-python3}" "$root/tests/gpu/migrate_train.py" 200 0.02 2>&1 | tail -n 12
        # PyTorch's allocator on stream-ordered memory (cudaMallocAsync), streamed (refused
        # by the receiver at 434ddac: its pre-copy's images took the pool's addresses)
        OUT=$OUT PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync MIGRATE_VIA=stream timeout -k 10 300 \
            bash "$root/tests/gpu/migrate_check.sh" "$build" torch-async "step 50:" -- \
            "${FLYT_PYTHON:-python3}" "$root/tests/gpu/migrate_train.py" 200 0.02 2>&1 | tail -n 12
        # PyTorch replaying its training step as a CUDA graph, streamed
        OUT=$OUT MIGRATE_TRAIN_GRAPH=1 MIGRATE_VIA=stream timeout -k 10 300 \
            bash "$root/tests/gpu/migrate_check.sh" "$build" torch-graph "step 50:" -- \
            "${FLYT_PYTHON:-python3}" "$root/tests/gpu/migrate_train.py" 200 0.02 2>&1 | tail -n 12
        # the same moves streamed to a receiving server whose device was open first
        OUT=$OUT MIGRATE_VIA=stream timeout -k 10 240 bash "$root/tests/gpu/migrate_check.sh" "$build" \
            loop-stream "step 50:" -- "$build/gpu-tests/migrate_loop" 200 20 2>&1 | tail -n 12
        OUT=$OUT MIGRATE_VIA=stream timeout -k 10 300 bash "$root/tests/gpu/migrate_check.sh" "$build" \
            torch-stream "step 50:" -- "${FLYT_PYTHON:-python3}" "$root/tests/gpu/migrate_train.py" \
            200 0.02 2>&1 | tail -n 12
        # streamed to a receiver whose module cache already holds the images (a node that
        # ran the program before): it loads those and is sent none (failed until 7a4a585)
        OUT=$OUT MIGRATE_CACHE=1 MIGRATE_VIA=stream timeout -k 10 300 bash \
            "$root/tests/gpu/migrate_check.sh" "$build" torch-stream-cached "step 50:" -- \
            "${FLYT_PYTHON:-python3}" "$root/tests/gpu/migrate_train.py" 200 0.02 2>&1 | tail -n 12
        # the same without the kernel images' pre-copy: the restore loads them in the stop
        OUT=$OUT FLYT_PRECOPY=0 MIGRATE_VIA=stream timeout -k 10 300 bash \
            "$root/tests/gpu/migrate_check.sh" "$build" torch-stream-noprecopy "step 50:" -- \
            "${FLYT_PYTHON:-python3}" "$root/tests/gpu/migrate_train.py" 200 0.02 2>&1 | tail -n 12
    } > "$OUT/elastic.txt" 2>&1
    cat "$OUT/elastic.txt" >> "$summary"
    find "$OUT" -name "*.state" -delete # tens of MB each: the logs say what they held
    pack elastic state-check migrate-loop migrate-global migrate-pinned migrate-vmm migrate-graph \
        migrate-async migrate-async-stream migrate-torch migrate-torch-expandable migrate-torch-async \
        migrate-torch-graph \
        migrate-loop-stream migrate-torch-stream migrate-torch-stream-cached \
        migrate-torch-stream-noprecopy
fi

if has_part hangup; then
    echo "gpu-run: hangup (clients killed while blocked on a never-ending kernel) ..."
    OUT=$OUT timeout -k 10 180 bash "$root/tests/gpu/hangup_check.sh" "$build" > "$OUT/hangup.txt" 2>&1
    hangup_rc=$?
    { echo "===== hangup: sessions whose client died while blocked on the GPU, rc=$hangup_rc"
      cat "$OUT/hangup.txt"; } >> "$summary"
    pack hangup hangup-check hangup.txt
fi

if has_part bench; then
    limit=${FLYT_GPU_BENCH_LIMIT:-420}
    bench_args=()
    [ "$quick" = 1 ] && bench_args=(--quick)
    echo "gpu-run: benchmarks (limit ${limit}s) ..."
    timeout -k 10 "$limit" bash "$root/bench/run_bench.sh" "$build" "${bench_args[@]}" \
        > "$OUT/bench.txt" 2>&1
    bench_rc=$?
    {
        echo "===== benchmarks, rc=$bench_rc"
        table=""
        for f in "$OUT"/bench/*.md; do [ -f "$f" ] && table=$f && break; done
        if [ -n "$table" ]; then
            grep '^|' "$table" | grep -v '^| program'
        else
            tail -n 40 "$OUT/bench.txt"
        fi
        # the transport's floor, beside Flyt's round trips above
        if [ -x "$build/bench/socket_rtt" ]; then
            echo "socket round trip, 64-byte messages, no CUDA (bench/src/socket_rtt.c):"
            "$build/bench/socket_rtt" "${bench_args[@]}" 2>&1
        fi
    } >> "$summary"
    # the report itself stays unpacked: it is what bench/results keeps
    for f in "$OUT"/bench/*.md; do [ -f "$f" ] && cp "$f" "$OUT/"; done
    pack bench bench bench.txt
fi

echo "===== parts: tests rc=$tests_rc, pytorch rc=$torch_rc, bench rc=$bench_rc" >> "$summary"
cat "$summary"
[ "$tests_rc" = - ] || [ "$tests_rc" = 0 ] || exit 1
[ "$torch_rc" = - ] || [ "$torch_rc" = 0 ] || exit 1
exit 0
