#!/usr/bin/env bash
# Copies the shared libraries the control-plane daemons need, except the C
# library itself, into BUILD_DIR/bundle, for a machine that lacks them (the
# GPU machine has no libmicrohttpd or libpq). Use it only for the daemons:
#   LD_LIBRARY_PATH=BUILD_DIR/bundle BUILD_DIR/bin/flyt-cluster-manager ...
# usage: scripts/bundle-libs.sh BUILD_DIR
set -euo pipefail
build=$1
mkdir -p "$build/bundle"
for bin in "$build"/bin/flyt-cluster-manager "$build"/bin/flyt-node-manager \
           "$build"/bin/flyt-client-manager "$build"/bin/flytctl; do
  [ -x "$bin" ] || continue
  ldd "$bin" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|ld-linux*) continue ;;
  esac
  cp -L "$lib" "$build/bundle/"
done
echo "bundled $(ls "$build/bundle" | wc -l) libraries ($(du -sh "$build/bundle" | cut -f1)) in $build/bundle"
