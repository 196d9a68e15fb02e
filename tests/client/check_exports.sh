#!/usr/bin/env bash
# The client library must export every symbol NVIDIA's libcudart.so.13
# exports, each under the version libcudart.so.13, and nothing else.
# usage: check_exports.sh OUR_LIB EXPORTS_LIST [NVIDIA_LIB]
set -euo pipefail
ours=$1 list=$2 nvidia=${3:-}
fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

objdump -T "$ours" | grep -v '\*UND\*' | awk '$0 ~ / DF | DO / {print $(NF-1), $NF}' \
  | grep -v '^Base' | awk '$2 != $1' | sort -u > "$tmp/ours.versioned"
awk '{print $2}' "$tmp/ours.versioned" | sort -u > "$tmp/ours"
sort -u "$list" > "$tmp/list"

soname=$(objdump -p "$ours" | awk '/SONAME/ {print $2}')
if [ "$soname" != "libcudart.so.13" ]; then
  echo "FAIL: soname is '$soname', want libcudart.so.13"; fail=1
else
  echo "ok: soname libcudart.so.13"
fi
bad_version=$(awk '$1 != "libcudart.so.13" {print}' "$tmp/ours.versioned" | head -5)
if [ -n "$bad_version" ]; then
  echo "FAIL: symbols without version libcudart.so.13:"; echo "$bad_version"; fail=1
else
  echo "ok: every exported symbol has version libcudart.so.13"
fi
missing=$(comm -23 "$tmp/list" "$tmp/ours")
extra=$(comm -13 "$tmp/list" "$tmp/ours")
if [ -n "$missing" ]; then echo "FAIL: missing exports:"; echo "$missing" | head -20; fail=1; fi
if [ -n "$extra" ]; then echo "FAIL: exports NVIDIA's library does not have:"; echo "$extra" | head -20; fail=1; fi
[ -z "$missing$extra" ] && echo "ok: $(wc -l < "$tmp/ours") exports match the list"

if [ -n "$nvidia" ] && [ -f "$nvidia" ]; then
  objdump -T "$nvidia" | grep -v '\*UND\*' | awk '$0 ~ / DF | DO / && $NF != $(NF-1) {print $NF}' | sort -u > "$tmp/nvidia"
  if ! diff -q "$tmp/nvidia" "$tmp/list" > /dev/null; then
    echo "FAIL: the committed list differs from $nvidia:"; diff "$tmp/nvidia" "$tmp/list" | head -20; fail=1
  else
    echo "ok: the list matches $nvidia ($(wc -l < "$tmp/nvidia") symbols)"
  fi
else
  echo "note: NVIDIA's libcudart.so.13 not found; compared against the committed list only"
fi
weak=$(nm -D --defined-only "$ours" | awk '$2 == "W"' | wc -l)
echo "info: $(( $(wc -l < "$tmp/ours") - weak )) functions carried out, $weak answer cudaErrorNotSupported"
exit $fail
