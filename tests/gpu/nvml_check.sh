#!/usr/bin/env bash
# NVIDIA's own nvidia-smi on Flyt's libnvidia-ml.so.1: each view natively
# and through flyt-run (one server on a Unix socket), its exit status, and
# whether the virtual GPU's name, UUID and memory appear. With
# FLYT_NVML_TRACE set, every call nvidia-smi makes into the private table
# is logged (slot and arguments) beside each view's output.
# usage: tests/gpu/nvml_check.sh BUILD_DIR   (logs under $OUT/nvml)
set -u
build=$(cd "${1:?usage: nvml_check.sh BUILD_DIR}" && pwd)
out=${OUT:-$(mktemp -d)}/nvml
mkdir -p "$out"
sock=$out/s.sock
"$build/bin/flyt-server" --listen "unix:$sock" >"$out/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { echo "nvml_check: server did not start"; exit 2; }

name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
views=("-L" "--query-gpu=name,uuid,pci.bus_id,memory.total,compute_cap,count --format=csv"
       "" "-q")
fails=0
printf '%-72s | %-6s | %-6s | %s\n' view native flyt "name and UUID shown"
for i in "${!views[@]}"; do
    v=${views[$i]}
    # shellcheck disable=SC2086 # a view is several words
    nvidia-smi $v >"$out/native.$i.out" 2>&1
    nrc=$?
    # shellcheck disable=SC2086
    FLYT_NVML_TRACE=1 timeout 60 "$build/bin/flyt-run" --server "unix:$sock" -- nvidia-smi $v \
        >"$out/flyt.$i.out" 2>"$out/flyt.$i.err"
    frc=$?
    shown=no
    grep -q "$name" "$out/flyt.$i.out" && grep -q "${uuid#GPU-}" "$out/flyt.$i.out" && shown=yes
    [ -z "$v" ] && shown="name: $(grep -c "${name:0:12}" "$out/flyt.$i.out")"
    printf '%-72s | %-6s | %-6s | %s\n' "nvidia-smi ${v:-(default)}" "$nrc" "$frc" "$shown"
    [ "$frc" = "$nrc" ] || fails=$((fails + 1))
done
echo "slots nvidia-smi called: $(cat "$out"/flyt.*.err | grep -o 'internal slot [0-9]*' | sort -u |
    awk '{print $3}' | sort -n | tr '\n' ' ')"
exit $((fails > 0))
