#!/usr/bin/env bash
# The example config configs/node-manager.conf is valid: flyt-node-manager --check-config
# accepts it (paths pointed at a temporary directory), with and without its [test]
# section uncommented (then with backend = host); every key the daemon accepts is in it;
# bad files are refused with FILE:LINE: reason and exit status 2.
set -euo pipefail
binary=$1 example=$2 server=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/node.token"
chmod 600 "$dir/node.token"
sed -e "s|^node_token_file = .*|node_token_file = $dir/node.token|" \
    -e "s|^server_path = .*|server_path = $server|" \
    -e "s|^state_dir = .*|state_dir = $dir/state|" "$example" > "$dir/nm.conf"
"$binary" --check-config "$dir/nm.conf"
sed -e 's|^#\[test\]|[test]|' -e 's|^#\([a-z_]* = \)|\1|' -e 's|^backend = cuda|backend = host|' \
    "$dir/nm.conf" > "$dir/nm-host.conf"
grep -q '^\[test\]' "$dir/nm-host.conf"
"$binary" --check-config "$dir/nm-host.conf"
for key in $("$binary" --help | awk '/^  [a-z_.]+ +(string|int|bool|size|duration) /{print $1}'); do
  k=${key#test.}
  grep -Eq "^#?$k = " "$example" || { echo "configs/node-manager.conf lacks $key"; exit 1; }
done
# refusals: exit status 2, FILE:LINE: reason
refused() { # expected-text config-text
  printf '%s\n' "$2" > "$dir/bad.conf"
  set +e
  out=$("$binary" --check-config "$dir/bad.conf" 2>&1)
  rc=$?
  set -e
  if [ "$rc" != 2 ] || ! grep -q -- "$1" <<<"$out"; then
    echo "not refused as expected ($1): rc=$rc: $out"; exit 1
  fi
  echo "refused: $out"
}
base="node_id = n1
node_token_file = $dir/node.token
cluster_manager = http://127.0.0.1:8600
advertise_host = 127.0.0.1
server_path = $server
state_dir = $dir/state"
refused "bad.conf:7: unknown key" "$base
colour = blue"
refused "bad.conf:7: backend: expected cuda or host" "$base
backend = gpu"
refused "bad.conf:8: test.gpus: fake GPUs are for backend = host only" "$base
[test]
gpus = 2"
refused "bad.conf:8: server_port_max: 9000 is below server_port_min 9100" "$base
server_port_min = 9100
server_port_max = 9000"
refused "bad.conf:4: advertise_host: expected an IPv4 or IPv6 address" "node_id = n1
node_token_file = $dir/node.token
cluster_manager = http://127.0.0.1:8600
advertise_host = gpu-node.example
server_path = $server"
refused "bad.conf: listen (not set: default): listening on 0.0.0.0: set advertise_host" "node_id = n1
node_token_file = $dir/node.token
cluster_manager = http://127.0.0.1:8600
server_path = $server"
refused "node_id" "node_token_file = $dir/node.token
cluster_manager = http://127.0.0.1:8600
advertise_host = 127.0.0.1
server_path = $server"
refused "bad.conf:3: cluster_manager: expected a URL" "node_id = n1
node_token_file = $dir/node.token
cluster_manager = 10.0.0.1:8600
advertise_host = 127.0.0.1
server_path = $server"
refused "bad.conf:9: test.gpu_memory" "$base
backend = host
[test]
gpu_memory = lots"
refused "test.gpu_compute_capability: expected a compute capability MAJOR.MINOR" "$base
backend = host
[test]
gpu_compute_capability = sm_80"
refused "test.gpu_compute_capability: expected a compute capability MAJOR.MINOR" "$base
backend = host
[test]
gpu_compute_capability = -1.0"
refused "server_tls_cert_file $dir/server.pem is set without server_tls_key_file" "$base
server_tls_cert_file = $dir/server.pem"
if command -v openssl > /dev/null; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$dir/server.key" \
    -out "$dir/server.pem" -days 1 -subj "/CN=flyt-server" -addext "subjectAltName=IP:127.0.0.1" \
    > /dev/null 2>&1
  chmod 644 "$dir/server.key"
  refused "chmod 600" "$base
server_tls_cert_file = $dir/server.pem
server_tls_key_file = $dir/server.key"
  chmod 600 "$dir/server.key"
  printf '%s\nserver_tls_cert_file = %s\nserver_tls_key_file = %s\n' "$base" "$dir/server.pem" \
    "$dir/server.key" > "$dir/tls.conf"
  "$binary" --check-config "$dir/tls.conf"
  echo "servers' TLS pair accepted"
else
  echo "skip: the servers' TLS pair checks (no openssl command)"
fi
echo "example config and refusals OK"
