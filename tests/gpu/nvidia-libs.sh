#!/usr/bin/env bash
# Prints the LD_LIBRARY_PATH under which NVIDIA's CUDA libraries are found on
# this machine: the toolkit's lib64 first, then the lib folders of NVIDIA's
# Python wheels (the GPU machine's PyTorch venv holds cuBLAS, cuDNN, cuFFT...
# there). Never Flyt's build: flyt-run puts BUILD/lib in front itself.
#
# usage: nvidia-libs.sh [TOOLKIT_LIB_DIR]   (default: /usr/local/cuda/lib64)
# Environment: FLYT_PYTHON (default python3) is asked for its site-packages.
set -u
toolkit=${1:-/usr/local/cuda/lib64}
py=${FLYT_PYTHON:-python3}

dirs=()
add() { # dir: once, and only if it exists
    local d=$1 e
    [ -d "$d" ] || return 0
    d=$(cd "$d" && pwd)
    for e in "${dirs[@]}"; do [ "$e" = "$d" ] && return 0; done
    dirs+=("$d")
}

add "$toolkit"
sites=()
if command -v "$py" >/dev/null 2>&1; then
    while IFS= read -r s; do sites+=("$s"); done < <(timeout 20 "$py" -c '
import site, sysconfig
for p in [sysconfig.get_paths()["purelib"], *site.getsitepackages()]:
    print(p)' 2>/dev/null)
fi
for s in /opt/torch/.venv/lib/python3*/site-packages; do sites+=("$s"); done
for s in "${sites[@]}"; do
    for d in "$s"/nvidia/*/lib "$s"/nvidia/*/lib64; do add "$d"; done
done
(IFS=:; echo "${dirs[*]}")
