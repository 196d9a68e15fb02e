#!/usr/bin/env bash
# A program linked against NVIDIA's libcudart.so.13 runs on Flyt's driver
# (libcuda.so.1) with only LD_LIBRARY_PATH or LD_PRELOAD changed, by hand and
# through flyt-run.
# usage: run_dropin.sh SERVER_BIN FLYT_RUN LIB_DIR TEST_BIN
set -u
server=$1 flytrun=$2 libdir=$3 test=$4
tmp=$(mktemp -d)
"$server" --backend host --listen "unix:$tmp/s.sock" > "$tmp/server.log" 2>&1 & spid=$!
trap 'kill $spid 2>/dev/null; wait $spid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done

# In the sanitizer build the preloaded library is instrumented too and would
# come before the ASan runtime the program itself loads: tell ASan that is fine.
if ldd "$libdir/libcuda.so.1" | grep -q libasan; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
fi

rc=0
check() { # name, command...
  local name=$1; shift
  if "$@" > "$tmp/out" 2>&1; then
    echo "ok: $name"
  else
    echo "FAIL: $name"; tail -20 "$tmp/out"; rc=1
  fi
}
# NVIDIA's library would need a GPU: only Flyt's can pass these
nv=/usr/local/cuda/lib64
check "LD_LIBRARY_PATH" env FLYT_SERVER="unix:$tmp/s.sock" LD_LIBRARY_PATH="$libdir:$nv" timeout 120 "$test"
check "LD_PRELOAD" env FLYT_SERVER="unix:$tmp/s.sock" LD_LIBRARY_PATH=$nv \
  LD_PRELOAD="$libdir/libcuda.so.1" timeout 120 "$test"
check "flyt-run" env LD_LIBRARY_PATH=$nv timeout 120 "$flytrun" --server "unix:$tmp/s.sock" --lib "$libdir" -- "$test"
check "flyt-run --preload" env LD_LIBRARY_PATH=$nv timeout 120 \
  "$flytrun" --server "unix:$tmp/s.sock" --lib "$libdir" --preload -- "$test"
# usage errors are reported, not run
if "$flytrun" --server bogus -- true 2>/dev/null; then echo "FAIL: bad address accepted"; rc=1
else echo "ok: flyt-run refuses a bad address"; fi
if env -u FLYT_SERVER "$flytrun" -- true 2>/dev/null; then echo "FAIL: missing server accepted"; rc=1
else echo "ok: flyt-run refuses to run without a server"; fi
exit $rc
