#!/usr/bin/env bash
# The driver's output reaches the application (docs/device-output.md): a
# host-backend server "prints" at its print points (FLYT_HOST_BACKEND_PRINTF,
# src/server/backend_host_print.c) and test_device_output's stdout and stderr
# must be exactly the program's own lines and the device's, in order, over a
# Unix socket and TCP, to a file and to a pipe; none of it in the server log.
# usage: run_device_output.sh SERVER_BIN LIB_DIR TEST_BIN
set -u
server=$1 libdir=$2 test=$3
. "$(dirname "$0")/run_lib.sh"

big_lines=16384 # 1 MiB
export FLYT_HOST_BACKEND_PRINTF="err:device opened;out:device one,out:device two;;err:device complains,out:device three;big:$big_lines;out:device before the host function;;out:device at exit"
{
  echo "host: start"; echo "device one"; echo "device two"
  echo "host: after sync 1"; echo "host: after sync 2"; echo "device three"
  echo "host: after sync 3"
  awk -v n=$big_lines 'BEGIN { for (i = 0; i < n; i++)
    printf "device line %07d xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", i }'
  echo "host: after the big one"; echo "device before the host function"; echo "host function"
  echo "host: after the host function"; echo "host: last line"; echo "device at exit"
} > "$tmp/want.out"
printf 'device opened\ndevice complains\n' > "$tmp/want.err"

"$server" --backend host --listen "unix:$tmp/s.sock" > "$tmp/server.log" 2>&1 & pids+=($!)
# a TCP port the kernel picks as the server binds: runs side by side cannot collide
"$server" --backend host --listen "tcp://127.0.0.1:0" > "$tmp/tcp.log" 2>&1 & pids+=($!)
port=$(tcp_port_of "$tmp/tcp.log") || { echo "FAIL: the server reported no TCP port"; cat "$tmp/tcp.log"; exit 1; }
for _ in $(seq 100); do
  [ -S "$tmp/s.sock" ] && (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
  sleep 0.1
done

rc=0
compare() { # what, got, want
  if cmp -s "$2" "$3"; then echo "ok: $1"
  else echo "FAIL: $1"; diff "$3" "$2" | head -20; rc=1; fi
}
for addr in "unix:$tmp/s.sock" "tcp://127.0.0.1:$port"; do
  FLYT_SERVER=$addr LD_LIBRARY_PATH=$libdir timeout 60 "$test" > "$tmp/got.out" 2> "$tmp/got.err"
  echo "exit status $?" > "$tmp/status"
  compare "exit status over $addr" "$tmp/status" <(echo "exit status 0")
  compare "stdout to a file over $addr" "$tmp/got.out" "$tmp/want.out"
  compare "stderr over $addr" "$tmp/got.err" "$tmp/want.err"
  FLYT_SERVER=$addr LD_LIBRARY_PATH=$libdir timeout 60 "$test" 2>/dev/null | cat > "$tmp/got.out"
  compare "stdout to a pipe over $addr" "$tmp/got.out" "$tmp/want.out"
done

# On the wire, a raw client: protocol 2.1 gets OUTPUT frames (op 101) just
# before the reply of the sync that printed, and none when nothing was
# printed; a 2.0 client gets only replies, and the output stays in the log.
"$server" --backend host --listen "unix:$tmp/raw.sock" > "$tmp/raw.log" 2>&1 & pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/raw.sock" ] && break; sleep 0.1; done
raw_client() { # minor -> one line per frame received for two DEVICE_SYNCs
  python3 - "$tmp/raw.sock" "$1" <<'PY'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); minor = int(sys.argv[2])
def recv(n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise SystemExit("server closed the connection")
        b += c
    return b
def call(op, payload, seq):
    s.sendall(struct.pack("<IHHII", len(payload), op, 0, seq, 0) + payload)
    while True:
        length, rop, flags, rseq, _ = struct.unpack("<IHHII", recv(16))
        body = recv(length)
        if rop == 101:
            fd, = struct.unpack("<I", body[:4])
            print("OUTPUT fd %d %r" % (fd, body[8:].decode()))
            continue
        print("reply op %d seq %d result %d" % (rop, rseq, struct.unpack("<i", body[:4])[0]))
        return
call(1, struct.pack("<IHHII64s", 0x54594c46, 2, minor, 0, 0, b"raw"), 1)
call(13, bytes(8), 2)
call(13, bytes(8), 3)
PY
}
raw_client 1 > "$tmp/raw1.out" 2>&1
printf '%s\n' "OUTPUT fd 2 'device opened\\n'" "reply op 1 seq 1 result 0" "OUTPUT fd 1 'device one\\ndevice two\\n'" \
  "reply op 13 seq 2 result 0" "reply op 13 seq 3 result 0" > "$tmp/raw1.want"
compare "protocol 2.1: OUTPUT frames before the reply, none when nothing was printed" \
  "$tmp/raw1.out" "$tmp/raw1.want"
raw_client 0 > "$tmp/raw0.out" 2>&1
printf '%s\n' "reply op 1 seq 1 result 0" "reply op 13 seq 2 result 0" \
  "reply op 13 seq 3 result 0" > "$tmp/raw0.want"
compare "protocol 2.0: no OUTPUT frames" "$tmp/raw0.out" "$tmp/raw0.want"
# (stdio flushes it when the session process ends)
for _ in $(seq 50); do grep -q "^device one$" "$tmp/raw.log" && break; sleep 0.1; done
grep -q "^device one$" "$tmp/raw.log" && echo "ok: for a 2.0 client the output stays in the log" ||
  { echo "FAIL: a 2.0 client's device output is not in the server log"; rc=1; }

cat "$tmp/tcp.log" >> "$tmp/server.log" # both servers' logs are checked
if grep -q "device" "$tmp/server.log"; then
  echo "FAIL: the device's output reached the server log:"; grep "device" "$tmp/server.log" | head; rc=1
fi
grep -q "session for" "$tmp/server.log" || { echo "FAIL: the server log lost its session lines"; rc=1; }
[ $rc -eq 0 ] && echo "PASS" || cat "$tmp/server.log"
exit $rc
