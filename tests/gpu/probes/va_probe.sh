#!/usr/bin/env bash
# Runs va_probe (natively) to learn which addresses a fresh process can reserve
# again: a cuMemAlloc address, an earlier process's reservation, a large range.
# usage: tests/gpu/probes/va_probe.sh PROBE_BINARY
set -u
p=$1
two=$((2 << 20)) big=$((64 << 30))
a=$("$p" alloc $two | sed -n 's/^alloc //p')
echo "cuMemAlloc 2 MiB gave $a"
"$p" reserve "$a" $two
"$p" early "$a" $two
v=$("$p" vmm $two | sed -n 's/^vmm //p')
echo "cuMemAddressReserve 2 MiB (no hint) gave $v"
"$p" reserve "$v" $two
"$p" early "$v" $two
b=$("$p" vmm $big | sed -n 's/^vmm //p')
echo "cuMemAddressReserve 64 GiB (no hint) gave $b"
"$p" reserve "$b" $big
"$p" vmm $big
"$p" reserve "$b" $two
"$p" reserve $((b + (1 << 30))) $two
