#!/usr/bin/env bash
# gen_calls.py refuses what it cannot carry, and the library exports every
# plain call it generates (with its per-thread twin).
# usage: check_gen_calls.sh GEN_CALLS API EXPORTS TYPEDEFS LIB
set -u
gen=$1 api=$2 exports=$3 typedefs=$4 lib=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
refuses() { # name, api text
  printf '%s\n' "$2" > "$tmp/bad.api"
  if python3 "$gen" --api "$tmp/bad.api" --exports "$exports" --typedefs "$typedefs" \
       --outdir "$tmp/out" > "$tmp/log" 2>&1; then
    echo "FAIL: accepted $1"; rc=1
  else
    echo "ok: refuses $1: $(tail -1 "$tmp/log")"
  fi
}
refuses "a pointer without a direction" "1 cuStreamGetAttribute sync"
refuses "an id used twice" "$(printf '1 cuCtxResetPersistingL2Cache async\n1 cuStreamCopyAttributes async')"
refuses "a symbol libcuda does not export" "1 cuNoSuchCall async"
refuses "an out pointer on an async call" "1 cuStreamGetAttribute async value:out"
refuses "a handle coming back as bytes" "1 cuStreamGetCtx sync pctx:out"
python3 "$gen" --api "$api" --exports "$exports" --typedefs "$typedefs" --outdir "$tmp/real" > /dev/null \
  || { echo "FAIL: calls.api itself"; rc=1; }
want=$(grep -o '^[[:space:]]*[0-9][0-9]*[[:space:]]\+cu[A-Za-z0-9_]*' "$api" | awk '{print $2}')
for sym in $want; do
  for s in "$sym" "${sym}_ptsz"; do
    grep -qx "$s" "$exports" || continue
    nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | grep -qx "$s" \
      || { echo "FAIL: $s is not carried out by the library"; rc=1; }
  done
done
[ $rc -eq 0 ] && echo "ok: every plain call of calls.api is exported for real"
exit $rc
