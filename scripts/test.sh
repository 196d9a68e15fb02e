#!/usr/bin/env bash
# Builds Flyt and runs every test that needs no GPU, in two configurations:
# a plain build and a build with AddressSanitizer and UBSan; then each
# libFuzzer target (tests/fuzz, built with clang) for a bounded time from its
# seed and regression corpora (FLYT_FUZZ_SECONDS, default 45 per target).
# usage: scripts/test.sh [--quick]   (--quick: plain build only)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
run_config() { # name, extra cmake args...
  local name=$1; shift
  local dir="$root/build-$name"
  echo "=== $name build"
  cmake -S "$root" -B "$dir" -DFLYT_GPU_PROGRAMS=OFF "$@" > "$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j "$jobs" 2>&1 | grep -vE '^\[ *[0-9]+%\]' || true
  cmake --build "$dir" -j "$jobs" > /dev/null
  (cd "$dir" && ctest --output-on-failure --timeout 600)
}
run_config plain -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${1:-}" != "--quick" ]; then
  ASAN_OPTIONS=detect_leaks=1 run_config sanitize -DCMAKE_BUILD_TYPE=Debug -DFLYT_SANITIZE=address,undefined
fi
if [ "${1:-}" != "--quick" ]; then
  fuzz_seconds=${FLYT_FUZZ_SECONDS:-45}
  targets="session config cluster_api node_api client_conn cmgr_proto"
  dir="$root/build-fuzz"
  echo "=== fuzz build (clang, libFuzzer) and ${fuzz_seconds}s per target"
  CC=clang cmake -S "$root" -B "$dir" -DFLYT_GPU_PROGRAMS=OFF -DFLYT_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
  cmake --build "$dir" -j "$jobs" --target fuzz_seeds $(printf 'fuzz_%s ' $targets) > "$dir.build.log" 2>&1 \
    || { cat "$dir.build.log"; exit 1; }
  rm -rf "$dir/artifacts" && mkdir -p "$dir/artifacts"
  for target in $targets; do
    work="$dir/corpus-$target"
    rm -rf "$work" && mkdir -p "$work"
    [ $target = session ] && "$dir/bin/fuzz_seeds" "$work"
    cp "$root"/tests/fuzz/corpus/$target/* "$work"/
    # a crash, leak, hang (10 s) or undefined behaviour fails CI; the input
    # is kept in build-fuzz/artifacts and belongs in tests/fuzz/corpus/TARGET
    echo "--- fuzz_$target"
    "$dir/bin/fuzz_$target" "$work" -max_total_time="$fuzz_seconds" -timeout=10 \
      -rss_limit_mb=4096 -artifact_prefix="$dir/artifacts/" -print_final_stats=1 2>&1 | tail -n 8
  done
fi
