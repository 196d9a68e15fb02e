#!/usr/bin/env bash
# The driver library must look like NVIDIA's libcuda.so.1 to the dynamic
# linker: soname libcuda.so.1, no symbol versions (NVIDIA's has none), and
# exactly the symbols of the committed list, which must equal the CUDA
# toolkit's driver stub (lib64/stubs/libcuda.so) when that is at hand. The
# page listing the refused exports names exactly the weak stubs, so it cannot
# go stale.
# usage: check_driver_exports.sh OUR_LIB EXPORTS_LIST [NVIDIA_STUB [REFUSED_DOC]]
set -euo pipefail
ours=$1 list=$2 stub=${3:-} doc=${4:-}
fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

defined() { nm -D --defined-only "$1" | awk 'NF == 3 {sub(/@.*/, "", $3); print $3}' | LC_ALL=C sort -u; }
has_versions() { readelf -V "$1" | grep -q 'Version definition section'; }

soname=$(objdump -p "$ours" | awk '/SONAME/ {print $2}')
if [ "$soname" != "libcuda.so.1" ]; then
  echo "FAIL: soname is '$soname', want libcuda.so.1"; fail=1
else
  echo "ok: soname libcuda.so.1"
fi

if has_versions "$ours"; then
  echo "FAIL: $ours defines symbol versions; NVIDIA's libcuda.so.1 has none"; fail=1
else
  echo "ok: no symbol versions"
fi

defined "$ours" > "$tmp/ours"
LC_ALL=C sort -u "$list" | grep -v '^$' > "$tmp/list"
missing=$(LC_ALL=C comm -23 "$tmp/list" "$tmp/ours")
extra=$(LC_ALL=C comm -13 "$tmp/list" "$tmp/ours")
if [ -n "$missing" ]; then echo "FAIL: missing exports:"; echo "$missing" | head -20; fail=1; fi
if [ -n "$extra" ]; then echo "FAIL: exports not in the list:"; echo "$extra" | head -20; fail=1; fi
[ -z "$missing$extra" ] && echo "ok: $(wc -l < "$tmp/ours") exports match the list"

if [ -n "$stub" ] && [ -f "$stub" ]; then
  defined "$stub" > "$tmp/stub"
  if ! diff -q "$tmp/stub" "$tmp/list" > /dev/null; then
    echo "FAIL: the committed list differs from $stub:"; diff "$tmp/stub" "$tmp/list" | head -20; fail=1
  else
    echo "ok: the list matches $stub ($(wc -l < "$tmp/stub") symbols)"
  fi
  if has_versions "$stub"; then
    echo "FAIL: $stub now defines symbol versions: the map must follow"; fail=1
  fi
  stub_soname=$(objdump -p "$stub" | awk '/SONAME/ {print $2}')
  if [ "$stub_soname" != "libcuda.so.1" ]; then
    echo "FAIL: $stub has soname '$stub_soname'"; fail=1
  fi
else
  echo "skip: NVIDIA's driver stub not found; compared against the committed list only"
  skipped=1
fi

nm -D --defined-only "$ours" | awk '$2 == "W" {print $3}' | LC_ALL=C sort -u > "$tmp/weak"
weak=$(wc -l < "$tmp/weak")
if [ -n "$doc" ]; then
  # the lists are the lines that start with a name; prose may name anything
  grep '^`cu' "$doc" | grep -o '`cu[A-Za-z0-9_]*`' | tr -d '`' | LC_ALL=C sort -u > "$tmp/doc"
  unlisted=$(LC_ALL=C comm -23 "$tmp/weak" "$tmp/doc")
  carried=$(LC_ALL=C comm -12 "$tmp/doc" <(LC_ALL=C comm -23 "$tmp/ours" "$tmp/weak"))
  if [ -n "$unlisted" ]; then echo "FAIL: refused but not in $doc:"; echo "$unlisted" | head -20; fail=1; fi
  if [ -n "$carried" ]; then echo "FAIL: carried out but listed as refused in $doc:"; echo "$carried" | head -20; fail=1; fi
  [ -z "$unlisted$carried" ] && echo "ok: $doc lists exactly the $weak refused exports"
fi
echo "info: $(( $(wc -l < "$tmp/ours") - weak )) functions carried out, $weak answer CUDA_ERROR_NOT_SUPPORTED"
# a part not run reports the test skipped (ctest's SKIP_RETURN_CODE), not passed
[ $fail = 0 ] && [ -n "${skipped:-}" ] && exit 77
exit $fail
