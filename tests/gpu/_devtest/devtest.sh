#!/bin/bash
# TEMPORARY (not to be committed): build the programs with tests/gpu/CMakeLists.txt
# and run run_gpu_tests.sh with a fake server and the real libcudart as "client".
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
GPU_DIR=$(cd "$HERE/.." && pwd)
W=/tmp/w
rm -rf $W; mkdir -p $W/proj
nvidia-smi -L
ls -la /usr/local/cuda/lib64/libcudart.so* 2>&1 | head -3
cat > $W/proj/CMakeLists.txt <<EOT
cmake_minimum_required(VERSION 3.25)
project(t C)
add_subdirectory($GPU_DIR \${CMAKE_BINARY_DIR}/tests-gpu)
EOT
(cmake -S $W/proj -B $W/build >/dev/null && cmake --build $W/build -j16 2>&1 | tail -3) || exit 1
BD=$W/bd; mkdir -p $BD/bin $BD/lib
ln -s $W/build/gpu-tests $BD/gpu-tests
cp "$HERE/fake-server.py" $BD/bin/flyt-server; chmod +x $BD/bin/flyt-server
cp -L /usr/local/cuda/lib64/libcudart.so.13 $BD/lib/
FLYT_TEST_PACK=1 bash "$GPU_DIR/run_gpu_tests.sh" $BD "$@"
echo "runner rc=$?"
