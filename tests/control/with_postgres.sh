#!/usr/bin/env bash
# Runs a command against a throwaway PostgreSQL server: initdb + pg_ctl from
# /usr/lib/postgresql/*/bin in a temporary directory, as an unprivileged user when run as
# root (PostgreSQL refuses root: "nobody", or a "flyt-test" user made with useradd).
# Arguments equal to @PG@ are replaced by the server's connection URL. Skips (exit 77)
# only when the server binaries are not installed.
set -euo pipefail
bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ] || [ ! -x "$bindir/pg_ctl" ]; then
  echo "SKIP: PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin" \
       "(install the postgresql package: scripts/install-deps.sh)"
  exit 77
fi
dir=$(mktemp -d /tmp/flyt-pg.XXXXXX)
chmod 755 "$dir"
run_as=()
if [ "$(id -u)" -eq 0 ]; then
  user=nobody
  if ! id -u "$user" >/dev/null 2>&1; then
    user=flyt-test
    id -u "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
  fi
  chown "$user" "$dir"
  run_as=(runuser -u "$user" --)
fi
pg() { "${run_as[@]}" "$@"; }
cleanup() {
  pg "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
pg "$bindir/initdb" -D "$dir/data" -U flyt --auth=trust -E UTF8 --no-sync >"$dir/initdb.log" 2>&1 \
  || { cat "$dir/initdb.log"; exit 1; }
started=
for attempt in 1 2 3 4 5; do
  port=$((20000 + RANDOM % 30000))
  if pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
       -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null 2>&1; then
    started=1
    break
  fi
done
[ -n "$started" ] || { echo "PostgreSQL did not start:"; cat "$dir/server.log"; exit 1; }
url="postgresql://flyt@127.0.0.1:$port/postgres"
echo "PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') at $url (as ${user:-$(id -un)})"
args=()
for a in "$@"; do
  if [ "$a" = "@PG@" ]; then args+=("$url"); else args+=("$a"); fi
done
"${args[@]}"
