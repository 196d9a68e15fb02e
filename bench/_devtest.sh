#!/bin/bash
# TEMPORARY device test helper - deleted after use.
set -x
R=$(pwd); B=/tmp/b
mkdir -p /tmp/top
printf 'cmake_minimum_required(VERSION 3.16)\nproject(t C)\nadd_subdirectory(%s/bench ${CMAKE_BINARY_DIR}/bench)\n' "$R" > /tmp/top/CMakeLists.txt
cmake -S /tmp/top -B $B >/dev/null && cmake --build $B -j8 || exit 1
mkdir -p $B/bin $B/lib
ls -la /usr/local/cuda/lib64/libcudart.so*
cp -L /usr/local/cuda/lib64/libcudart.so.13 $B/lib/
cat > $B/bin/flyt-server <<'PY'
#!/usr/bin/env python3
import socket, sys
a = sys.argv[sys.argv.index('--listen') + 1]
if a.startswith('tcp://'):
    h, p = a[6:].rsplit(':', 1); s = socket.socket(); s.bind((h, int(p)))
else:
    s = socket.socket(socket.AF_UNIX); s.bind(a[5:])
s.listen(5)
while True: s.accept()[0].close()
PY
chmod +x $B/bin/flyt-server
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
set +x
FLYT_COMMIT=devtest-full bench/run_bench.sh $B 2>&1
echo "rc=$?"
mkdir -p $OUT/quick; OUT=$OUT/quick FLYT_COMMIT=devtest-quick bench/run_bench.sh $B --quick >/dev/null 2>&1; echo "quick rc=$?"
grep '^| bench_' $OUT/quick/bench/*.md
