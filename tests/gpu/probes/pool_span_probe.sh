#!/bin/bash
# Runs pool_span_probe: a "source" process, then "receiver" processes that
# reserve a span of several sizes over the source's pool allocations.
# Usage: pool_span_probe.sh PROBE_BINARY   (natively, on a GPU machine)
set -u
probe=${1:?usage: pool_span_probe.sh PROBE_BINARY}
src=$("$probe" source) || { echo "source failed"; exit 1; }
echo "$src"
base=$(echo "$src" | sed -n 's/^arena: .* got \(0x[0-9a-f]*\).*/\1/p')
lo=$(echo "$src" | sed -n 's/^default [0-9]*: 0 at \(0x[0-9a-f]*\)$/\1/p' | sort | head -1)
[ -n "$base" ] && [ -n "$lo" ] || { echo "no arena or pool address seen"; exit 1; }
for span in $((32 << 20)) $((1 << 30)) $((8 << 30)) $((64 << 30)); do
    echo "== receiver span $((span >> 20)) MiB at $lo"
    "$probe" receiver "$base" "$lo" "$span"
done
echo "== receiver span 65536 MiB, a pool used first"
"$probe" receiver "$base" "$lo" $((64 << 30)) pool-first
echo "== side-by-side and gapped hinted spans (no arena)"
"$probe" adjacent
echo "== a fresh process's default pool, no arena"
"$probe" nopool
