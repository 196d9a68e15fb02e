#!/usr/bin/env bash
# On the GPU machine: every GPU test program natively and through Flyt (TCP
# and Unix socket), then the benchmarks; full logs under $OUT, summary last.
# usage: scripts/gpu-run.sh BUILD_DIR [--quick]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd); shift
export OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,memory.used,memory.total --format=csv; } > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
FLYT_TEST_PACK=1 bash "$root/tests/gpu/run_gpu_tests.sh" "$build" > "$OUT/gpu-tests.txt" 2>&1; tests_rc=$?
export FLYT_COMMIT=${FLYT_COMMIT:-$(cat "$root/.commit" 2>/dev/null || echo unknown)}
bash "$root/bench/run_bench.sh" "$build" "$@" > "$OUT/bench.txt" 2>&1; bench_rc=$?
echo "===== GPU tests (native vs Flyt), rc=$tests_rc"
tail -n 30 "$OUT/gpu-tests.txt"
echo "===== benchmarks, rc=$bench_rc"
table=$(ls "$OUT"/bench/*.md 2>/dev/null | head -1)
if [ -n "$table" ]; then grep '^|' "$table" | grep -v '^| program'; else tail -n 40 "$OUT/bench.txt"; fi
exit $(( tests_rc != 0 ))
