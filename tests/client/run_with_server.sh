#!/usr/bin/env bash
# Starts a flyt-server with the host-memory test backend on a private Unix
# socket and TCP port, runs the client test over both, stops the server.
# usage: run_with_server.sh SERVER_BIN LIB_DIR TEST_BIN NOSERVER_BIN
set -u
server=$1 libdir=$2 test=$3 noserver=$4
. "$(dirname "$0")/run_lib.sh"

wait_listening() { # $1 = unix path or tcp port
  for _ in $(seq 100); do
    if [[ $1 == /* ]]; then [ -S "$1" ] && return 0
    elif (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  echo "FAIL: server did not start"; cat "$tmp"/*.log; return 1
}

# one server on both: a Unix socket for this machine and a TCP port the
# kernel picks as the server binds (runs side by side cannot collide); its
# pageable copies on this machine split over helper threads whatever the
# CPU count (FLYT_PEER_THREADS), so the 20 MiB copies check the split
FLYT_PEER_THREADS=3 "$server" --backend host --listen "unix:$tmp/s.sock" --listen "tcp://127.0.0.1:0" \
  > "$tmp/unix.log" 2>&1 & pids+=($!)
wait_listening "$tmp/s.sock" || exit 1
port=$(tcp_port_of "$tmp/unix.log") || { echo "FAIL: the server reported no TCP port"; cat "$tmp/unix.log"; exit 1; }
wait_listening "$port" || exit 1

rc=0
# the last: a node's list of alternatives whose Unix socket is on another
# machine (absent here), so the client goes on to the TCP address
for addr in "unix:$tmp/s.sock" "tcp://127.0.0.1:$port" "unix:$tmp/elsewhere.sock,tcp://127.0.0.1:$port"; do
  echo "== client test over $addr"
  FLYT_SERVER=$addr LD_LIBRARY_PATH=$libdir timeout 120 "$test" || rc=1
done

echo "== client test over the Unix socket without shared memory (FLYT_SHM=0)"
FLYT_SHM=0 FLYT_SERVER="unix:$tmp/s.sock" LD_LIBRARY_PATH=$libdir timeout 120 "$test" > "$tmp/noshm.out" 2>&1 \
  && tail -1 "$tmp/noshm.out" || { cat "$tmp/noshm.out"; rc=1; }

echo "== FLYT_PROFILE=1: a table of the requests sent, at exit"
FLYT_PROFILE=1 FLYT_SERVER="unix:$tmp/s.sock" LD_LIBRARY_PATH=$libdir timeout 120 "$test" > "$tmp/profile.out" 2>&1 || {
  cat "$tmp/profile.out"; rc=1; }
# every program allocates: MEM_ALLOC went out and waited for its reply
grep -q "^flyt: profile of pid [0-9]*: [1-9][0-9]* requests" "$tmp/profile.out" &&
  grep -Eq "^flyt: MEM_ALLOC +[1-9][0-9]* +[1-9][0-9]* " "$tmp/profile.out" ||
  { echo "FAIL: FLYT_PROFILE=1 printed no profile naming MEM_ALLOC"; tail -20 "$tmp/profile.out"; rc=1; }

# a program that loads kernel images: over the Unix socket they go unhashed
# (protocol 2.4); over TCP to a server with an image cache the hash goes
# first, and a second session gets them from the cache
if grep -Eq "^flyt: MODULE_LOAD +[1-9]" "$tmp/profile.out"; then
  echo "== kernel images: unhashed on one machine, by hash to a server with a cache"
  grep -q "requests, .* waiting for replies; 0 kernel images hashed" "$tmp/profile.out" ||
    { echo "FAIL: the client hashed images over the Unix socket"; rc=1; }
  mkdir -p "$tmp/cache"
  "$server" --backend host --listen "tcp://127.0.0.1:0" --cache-dir "$tmp/cache" > "$tmp/cache.log" 2>&1 &
  cache_pid=$!; pids+=($cache_pid)
  cport=$(tcp_port_of "$tmp/cache.log") && wait_listening "$cport" || { echo "FAIL: cache server"; exit 1; }
  for run in 1 2; do
    FLYT_PROFILE=1 FLYT_SERVER="tcp://127.0.0.1:$cport" LD_LIBRARY_PATH=$libdir timeout 120 "$test" \
      > "$tmp/cache$run.out" 2>&1 || { tail -20 "$tmp/cache$run.out"; rc=1; }
  done
  grep -q "waiting for replies; [1-9][0-9]* kernel images hashed" "$tmp/cache1.out" ||
    { echo "FAIL: over TCP to a server with a cache the client sent no hashes"; rc=1; }
  kill "$cache_pid"; wait "$cache_pid" 2>/dev/null
  # (what the driver refused, a test's junk image, is never cached: shipped again)
  grep "kernel images received" "$tmp/cache.log" | tail -1 | grep -q ", [1-9][0-9]* from the cache dir" ||
    { echo "FAIL: the second session got no image from the cache:"; grep "kernel images" "$tmp/cache.log"; rc=1; }
fi

echo "== no server configured"
env -u FLYT_SERVER LD_LIBRARY_PATH=$libdir timeout 20 "$noserver" || rc=1
echo "== server address with nobody listening"
FLYT_SERVER=unix:$tmp/nobody.sock LD_LIBRARY_PATH=$libdir timeout 20 "$noserver" || rc=1
echo "== server dies mid-run"
"$server" --backend host --listen "unix:$tmp/dies.sock" > "$tmp/dies.log" 2>&1 & dies=$!
wait_listening "$tmp/dies.sock" || exit 1
# the session is a child of the server: kill the child, found after connect
( sleep 1; pkill -KILL -P $dies ) &
FLYT_SERVER=unix:$tmp/dies.sock LD_LIBRARY_PATH=$libdir timeout 20 "$noserver" --server-dies || rc=1
kill $dies 2>/dev/null; wait $dies 2>/dev/null
grep -q "session" "$tmp/unix.log" || { echo "FAIL: server log has no session lines"; rc=1; }
# a session ends however its client left (an open capture, a crash): never by a signal
if grep "killed by signal" "$tmp/unix.log"; then echo "FAIL: a session crashed"; rc=1; fi
exit $rc
