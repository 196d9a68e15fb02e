#!/usr/bin/env bash
# The example config configs/cluster-manager.conf is valid: flyt-cluster-manager
# --check-config accepts it (with its paths pointed at a temporary directory).
set -euo pipefail
binary=$1 example=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
openssl rand -hex 32 > "$dir/operator.token" 2>/dev/null || head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/operator.token"
chmod 600 "$dir/operator.token"
sed -e "s|^operator_token_file = .*|operator_token_file = $dir/operator.token|" \
    -e "s|^store = .*|store = sqlite:$dir/cluster.db|" "$example" > "$dir/clm.conf"
"$binary" --check-config "$dir/clm.conf"
# and every key the daemon accepts is in the example
for key in $("$binary" --help | awk '/^  [a-z_]+ +(string|int|bool|size|duration) /{print $1}'); do
  grep -q "^$key = " "$example" || { echo "configs/cluster-manager.conf lacks $key"; exit 1; }
done
echo "example config OK"
