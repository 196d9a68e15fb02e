#!/usr/bin/env bash
# A whole Flyt cluster on this machine, with the built-in defaults: the
# cluster manager (SQLite), a node manager for this machine's GPU (or, with
# no GPU, its test mode with a fake GPU and the host-memory backend) and a
# client manager for a VM that is this machine. Each PROGRAM (an ordinary
# CUDA program on NVIDIA's runtime) then runs with nothing but the client
# manager's socket configured and Flyt's libcuda.so.1 first on its library
# path; on a GPU machine it also runs natively (NVIDIA's driver) and the
# outputs are compared. Everything stops at exit.
#
# usage: scripts/flyt-local.sh BUILD_DIR [--sms N] [--memory SIZE] [PROGRAM...]
#   --sms N        the VM's share of SMs (default: the whole GPU as the node reports it)
#   --memory SIZE  the VM's memory quota (default: 16GiB on a GPU, 1GiB in test mode)
#   PROGRAM        default: vector_add on a GPU, the client test program without one
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: flyt-local.sh BUILD_DIR [--sms N] [--memory SIZE] [PROGRAM...]}" && pwd)
shift
sms="" memory=""
programs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sms) sms=$2; shift 2 ;;
    --memory) memory=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) programs+=("$1"); shift ;;
  esac
done
for b in flyt-cluster-manager flyt-node-manager flyt-client-manager flytctl flyt-server; do
  [ -x "$build/bin/$b" ] || { echo "flyt-local: $build/bin/$b is missing (control plane not built?)"; exit 2; }
done
[ -e "$build/lib/libcuda.so.1" ] || { echo "flyt-local: $build/lib/libcuda.so.1 (Flyt's client library) is missing"; exit 2; }
# NVIDIA's runtime and libraries, which the programs link without an RPATH: the toolkit
# the build was configured with
cuda_home=$(sed -n 's/^FLYT_CUDA_HOME:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)
# FLYT_CUDA_LIBS: where NVIDIA's runtime and libraries are, when not (only)
# in the toolkit the build used (the GPU machine's wheels hold cuBLAS, cuDNN)
cuda_lib=${FLYT_CUDA_LIBS:-${cuda_home:-/usr/local/cuda}/lib64}
found=""
for d in ${cuda_lib//:/ }; do [ -e "$d/libcudart.so.13" ] && found=$d; done
[ -n "$found" ] || { echo "flyt-local: NVIDIA's runtime libcudart.so.13 is not in $cuda_lib"; exit 2; }

tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${OUT:-}" ] && mkdir -p "$OUT/cluster" && cp "$tmp"/*.log "$OUT/cluster/" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
say() { printf '==> %s\n' "$*"; }
die() { echo "flyt-local: $*"; for f in "$tmp"/*.log; do echo "--- $f"; tail -15 "$f"; done; exit 1; }
wait_until() { local t=$(( $1 * 10 )); shift; while (( t-- > 0 )); do "$@" > /dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
json_field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^\",]*\)\"\{0,1\}.*/\1/p" | head -1; }

# daemons may need libraries this machine lacks (scripts/bundle-libs.sh); programs never do
daemon_env=()
[ -d "$build/bundle" ] && daemon_env=(env "LD_LIBRARY_PATH=$build/bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
ctl() { "${daemon_env[@]}" "$build/bin/flytctl" "$@"; }

if nvidia-smi -L > "$tmp/gpus" 2>/dev/null && ldconfig -p | grep -q 'libcuda.so.1 '; then
  backend=cuda
  say "GPU: $(head -1 "$tmp/gpus")"
else
  backend=host
  say "no GPU here (no NVIDIA driver): the node manager runs in test mode with a fake GPU and"
  say "the host-memory backend, which keeps 'device' memory on the host and runs no kernels"
fi
[ -n "$memory" ] || { [ $backend = cuda ] && memory=16GiB || memory=1GiB; }

# The managers listen on ports the kernel picks (--port-file says which), so two
# runs never collide; servers take free ports of a range derived from our pid
# (a port another process holds is skipped).
server_base=$(( 20000 + ($$ % 300) * 100 ))
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$tmp/operator.token"; echo >> "$tmp/operator.token"
chmod 600 "$tmp/operator.token"
cat > "$tmp/cluster.conf" <<EOF
listen = 127.0.0.1:0
store = sqlite:$tmp/cluster.db
operator_token_file = operator.token
heartbeat_interval = 2s
log_level = info
EOF
"${daemon_env[@]}" "$build/bin/flyt-cluster-manager" --config "$tmp/cluster.conf" \
  --port-file "$tmp/cluster-manager.port" > "$tmp/cluster-manager.log" 2>&1 &
pids+=($!)
wait_until 15 test -s "$tmp/cluster-manager.port" || die "the cluster manager did not start"
cm_port=$(cat "$tmp/cluster-manager.port")
export FLYT_CM_URL=http://127.0.0.1:$cm_port FLYT_OPERATOR_TOKEN_FILE=$tmp/operator.token
wait_until 15 ctl status || die "the cluster manager did not start"
say "cluster manager on 127.0.0.1:$cm_port, store $tmp/cluster.db"

ctl --json node add local-node --host-ip 127.0.0.1 > "$tmp/node.json" || die "node add failed"
json_field token < "$tmp/node.json" > "$tmp/node.token"; chmod 600 "$tmp/node.token"
cat > "$tmp/node.conf" <<EOF
node_id = local-node
node_token_file = node.token
cluster_manager = http://127.0.0.1:$cm_port
listen = 127.0.0.1:0
advertise_host = 127.0.0.1
server_path = $build/bin/flyt-server
server_listen_host = 127.0.0.1
server_port_min = $server_base
server_port_max = $(( server_base + 99 ))
state_dir = $tmp/node-state
backend = $backend
log_level = info
EOF
"${daemon_env[@]}" "$build/bin/flyt-node-manager" --config "$tmp/node.conf" \
  --port-file "$tmp/node-manager.port" > "$tmp/node-manager.log" 2>&1 &
pids+=($!)
wait_until 30 sh -c "'$build/bin/flytctl' --json node show local-node | grep -q '\"state\": \"ready\"'" \
  || die "the node did not become ready"
ctl node list | sed 's/^/    /'
if [ -z "$sms" ]; then
  sms=$(ctl --json node show local-node | json_field sm_count)
  [ -n "$sms" ] || die "cannot read the node's SM count"
fi

ctl --json vm add --id local-vm --vm-ip 127.0.0.1 --host-ip 127.0.0.1 --compute-units "$sms" \
  --memory "$memory" > "$tmp/vm.json" || die "vm add failed: $(cat "$tmp/vm.json")"
json_field token < "$tmp/vm.json" > "$tmp/vm.token"; chmod 600 "$tmp/vm.token"
cat > "$tmp/client.conf" <<EOF
cluster_manager = http://127.0.0.1:$cm_port
vm_id = local-vm
vm_token_file = vm.token
socket = $tmp/client.sock
log_level = info
EOF
"${daemon_env[@]}" "$build/bin/flyt-client-manager" --config "$tmp/client.conf" > "$tmp/client-manager.log" 2>&1 &
pids+=($!)
wait_until 15 test -S "$tmp/client.sock" || die "the client manager did not start"
say "VM local-vm: $sms SMs, $memory; its client manager listens on $tmp/client.sock"

if [ ${#programs[@]} -eq 0 ]; then
  [ $backend = cuda ] && programs=("$build/gpu-tests/vector_add") || programs=("$build/bin/test_client_host")
fi
# Flyt's libcuda.so.1 (and libnvidia-ml.so.1) first, then NVIDIA's runtime and libraries
cluster_run=(env -u FLYT_SERVER -u FLYT_SESSION_TOKEN FLYT_CLIENT_MANAGER="$tmp/client.sock"
             LD_LIBRARY_PATH="$build/lib:$cuda_lib" FLYT_EXPECT_SMS="$sms")
say "programs run on NVIDIA's runtime with Flyt's $build/lib/libcuda.so.1 as their driver"
now() { date +%s.%N; }
rc=0
rows=()
for prog in "${programs[@]}"; do
  name=$(basename "$prog")
  [ -x "$prog" ] || { rows+=("$name|missing|-|-"); rc=1; continue; }
  t0=$(now); timeout 120 "${cluster_run[@]}" "$prog" > "$tmp/$name.flyt" 2> "$tmp/$name.flyt.err"; frc=$?; t1=$(now)
  if [ $backend = cuda ]; then
    timeout 120 env LD_LIBRARY_PATH="$cuda_lib" "$prog" > "$tmp/$name.native" 2>/dev/null; nrc=$?; t2=$(now)
    same=no; cmp -s "$tmp/$name.native" "$tmp/$name.flyt" && [ $nrc = $frc ] && same=yes
    ratio=$(awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { n = c - b; printf "%.2f", n > 0 ? (b - a) / n : 0 }')
    rows+=("$name|$nrc|$frc|$same|$ratio")
    if [ $same = no ]; then
      rc=1
      [ -n "${OUT:-}" ] && mkdir -p "$OUT/cluster" && diff "$tmp/$name.native" "$tmp/$name.flyt" > "$OUT/cluster/$name.diff"
    fi
  else
    rows+=("$name|-|$frc|-|-")
    [ $frc = 0 ] || rc=1
    say "$name through the cluster: exit $frc, $(grep -cE '^ +ok ' "$tmp/$name.flyt") checks passed"
  fi
done
ctl session list | sed 's/^/    /'

say "program | native rc | cluster rc | identical | time ratio"
for r in "${rows[@]}"; do echo "    $r" | tr '|' '\t'; done
if [ $backend = host ]; then
  cat <<MSG

To use a real GPU: run flyt-node-manager (configs/node-manager.conf, backend = cuda) on a GPU
machine registered with 'flytctl node add', or, without the control plane, on the GPU node:
    $build/bin/flyt-server --listen tcp://0.0.0.0:7000
and here (flyt-run puts Flyt's libcuda.so.1 in front of NVIDIA's driver):
    $build/bin/flyt-run --server tcp://GPU-NODE:7000 -- ./your_cuda_app
MSG
fi
exit $rc
