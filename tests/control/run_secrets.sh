#!/usr/bin/env bash
# Secrets on disk (issue 8, item 7): the cluster manager's SQLite store holds
# node session keys and manager tokens. A started daemon leaves its store (and
# WAL files) 0600; a store, token or state dir open to other users is refused
# at start with the file named and the fix (chmod 600 / 700).
# usage: run_secrets.sh flyt-cluster-manager flyt-node-manager flyt-server
set -uo pipefail
clm=$1 nm=$2 server=$3
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
fails=0
pass() { echo "  ok    $*"; }
fail() { echo "  FAIL  $*"; fails=$((fails + 1)); }
mode() { stat -c %a "$1"; }

umask 022 # what a daemon started by hand usually gets
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/operator.token"
chmod 600 "$dir/operator.token"
cat > "$dir/clm.conf" <<CONF
listen = 127.0.0.1:0
store = "sqlite:$dir/cluster.db"
operator_token_file = $dir/operator.token
CONF

start_clm() { # waits for the port file; 0 when it listens
  rm -f "$dir/port"
  "$clm" --config "$dir/clm.conf" --port-file "$dir/port" > "$dir/clm.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do
    [ -s "$dir/port" ] && return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; pid=; return 1; }
    sleep 0.05
  done
  return 1
}
stop_cm() { kill "$pid"; wait "$pid"; pid=; }
refused_with() { # file-named text: the daemon exits at start, saying it
  "$clm" --config "$dir/clm.conf" --port-file "$dir/port" > "$dir/clm.log" 2>&1 &
  local p=$! rc
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$p" 2>/dev/null; then kill "$p"; wait "$p"; return 1; fi
  wait "$p"; rc=$?
  [ "$rc" != 0 ] && grep -q -- "$1" "$dir/clm.log" && grep -q "chmod 600" "$dir/clm.log"
}

echo "== the cluster manager's store is private"
start_clm && pass "flyt-cluster-manager started on a new SQLite store" || fail "start: $(cat "$dir/clm.log")"
for f in "$dir"/cluster.db*; do
  [ "$(mode "$f")" = 600 ] && pass "$(basename "$f") is 0600" || fail "$(basename "$f") is $(mode "$f")"
done
stop_cm

echo "== a store others can read is refused"
chmod 644 "$dir/cluster.db"
refused_with "cluster.db is open to other users" && pass "refused: $(grep -m1 'open to other' "$dir/clm.log")" \
  || fail "a world-readable store was not refused: $(cat "$dir/clm.log")"
chmod 600 "$dir/cluster.db"
[ -e "$dir/cluster.db-wal" ] && chmod 640 "$dir/cluster.db-wal" && {
  refused_with "cluster.db-wal is open to other users" && pass "a group-readable WAL file refused" \
    || fail "the WAL file: $(cat "$dir/clm.log")"
  chmod 600 "$dir/cluster.db-wal"; }
chmod 644 "$dir/operator.token"
refused_with "operator.token is open to other users" && pass "a world-readable operator token refused" \
  || fail "operator token: $(cat "$dir/clm.log")"
chmod 600 "$dir/operator.token"
start_clm && pass "all private again: it starts" || fail "restart: $(cat "$dir/clm.log")"
stop_cm

echo "== the node manager's token and state dir"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$dir/node.token"
chmod 644 "$dir/node.token"
cat > "$dir/nm.conf" <<CONF
node_id = n1
node_token_file = $dir/node.token
cluster_manager = http://127.0.0.1:1
advertise_host = 127.0.0.1
listen = 127.0.0.1:0
server_path = $server
state_dir = $dir/state
backend = host
CONF
out=$("$nm" --check-config "$dir/nm.conf" 2>&1)
[ $? != 0 ] && grep -q "node.token is open to other users.*chmod 600" <<<"$out" \
  && pass "a world-readable node token refused: $out" || fail "node token: $out"
chmod 600 "$dir/node.token"
mkdir -m 755 "$dir/state"
timeout 10 "$nm" --config "$dir/nm.conf" > "$dir/nm.log" 2>&1
rc=$?
[ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -q "state is open to other users.*chmod 700" "$dir/nm.log" \
  && pass "a state dir others can enter refused: $(grep -m1 'open to other' "$dir/nm.log")" \
  || fail "state dir (rc $rc): $(cat "$dir/nm.log")"

[ "$fails" = 0 ] && echo "all secret-file checks passed" || exit 1
