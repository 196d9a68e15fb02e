#!/usr/bin/env bash
# TLS on the data plane (docs/tls.md), with the host-memory test backend on
# loopback: a program gives the same results over TLS as over plain TCP; a
# wrong CA, a plain client on a TLS port, a missing OpenSSL and a readable
# key are refused with a clear line; a 64 MiB copy each way comes back
# intact; and the copy bandwidth, plain TCP against TLS, is printed.
# usage: run_tls.sh SERVER_BIN LIB_DIR CLIENT_HOST_BIN NOSERVER_BIN COPY_BW_BIN
set -u
server=$1 libdir=$2 program=$3 noserver=$4 copybw=$5
. "$(dirname "$0")/run_lib.sh"
rc=0
fail() { echo "FAIL: $*"; rc=1; }

# a CA, a server certificate it signed for 127.0.0.1, and a CA that signed nothing
cd "$tmp" || exit 1
make_ca() { openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" -days 2 \
              -subj "/CN=$1" 2>/dev/null; }
make_ca ca && make_ca other_ca || { echo "FAIL: openssl cannot make certificates"; exit 1; }
openssl req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj "/CN=flyt-server" \
  2>/dev/null &&
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > san.cnf &&
  openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 \
    -extfile san.cnf 2>/dev/null || { echo "FAIL: cannot sign the server certificate"; exit 1; }
chmod 600 srv.key

echo "== a key that others may read is refused at start"
chmod 644 srv.key
"$server" --backend host --listen tcp://127.0.0.1:0 --tls-cert srv.pem --tls-key srv.key \
  > open_key.log 2>&1 && fail "the server started with a world-readable key"
grep -q "tls-key.*srv.key.*chmod 600" open_key.log && cat open_key.log ||
  fail "no line naming the key and the fix: $(cat open_key.log)"
chmod 600 srv.key
"$server" --backend host --listen tls://127.0.0.1:0 > no_cert.log 2>&1 &&
  fail "a tls:// listener started without a certificate"
grep -q "needs --tls-cert" no_cert.log || fail "tls:// without --tls-cert: $(cat no_cert.log)"

start() { # $1: log name, then flyt-server options (in this shell: cleanup stops it)
  "$server" --backend host --listen tcp://127.0.0.1:0 "${@:2}" > "$1.log" 2>&1 & pids+=($!)
}
port() { tcp_port_of "$1.log" || { cat "$1.log" >&2; return 1; }; }
start plain
start tls --tls-cert srv.pem --tls-key srv.key
plain=$(port plain) || { echo "FAIL: plain server did not start"; exit 1; }
tls=$(port tls) || { echo "FAIL: TLS server did not start"; exit 1; }
run() { LD_LIBRARY_PATH=$libdir timeout 120 "$@"; }

echo "== the same program over plain TCP and over TLS"
FLYT_SERVER=tcp://127.0.0.1:$plain run "$program" > plain.out 2> plain.err || fail "over plain TCP: $(tail -3 plain.out plain.err)"
FLYT_TLS_CA=ca.pem FLYT_SERVER=tls://127.0.0.1:$tls FLYT_TRACE=1 run "$program" > tls.out 2> tls.err ||
  fail "over TLS: $(tail -3 tls.out tls.err)"
same() { sed -E 's/[0-9]+(\.[0-9]+)? ms/N ms/' "$1"; } # timings aside
cmp -s <(same plain.out) <(same tls.out) && echo "ok    same output ($(grep -c '^  ok' tls.out) checks)" ||
  { fail "outputs differ"; diff plain.out tls.out | head; }
grep -q "TLS (TLSv1" tls.log || fail "the server log does not name TLS: $(tail -3 tls.log)"
echo "== a tcp:// address with FLYT_TLS_CA set uses TLS too"
FLYT_TLS_CA=ca.pem FLYT_SERVER=tcp://127.0.0.1:$tls run "$copybw" 4 1 > ca_only.out 2>&1 ||
  fail "tcp:// with FLYT_TLS_CA: $(tail -3 ca_only.out)"

refused() { # $1: what, $2: the line expected on stderr, then environment for the client
  local what=$1 line=$2
  shift 2
  env "$@" LD_LIBRARY_PATH="$libdir" timeout 30 "$noserver" > refused.out 2>&1 ||
    fail "$what: $(cat refused.out)"
  grep -q "$line" refused.out && echo "ok    $what: $(grep '^flyt:' refused.out)" ||
    fail "$what: no line '$line': $(cat refused.out)"
}
echo "== refusals"
refused "a client with the wrong CA" "certificate was not accepted" \
  FLYT_TLS_CA=other_ca.pem FLYT_SERVER=tls://127.0.0.1:$tls
refused "a plain client on the TLS port" "connect with tls://" FLYT_SERVER=tcp://127.0.0.1:$tls
grep -q "plain (not TLS) client on a TLS listener" tls.log || fail "the server did not say why"
refused "a TLS client on a plain port" "TLS handshake" \
  FLYT_TLS_CA=ca.pem FLYT_SERVER=tls://127.0.0.1:$plain
refused "no OpenSSL to be loaded" "TLS needs OpenSSL 3" \
  FLYT_TLS_LIBSSL=/nonexistent/libssl.so.3 FLYT_TLS_CA=ca.pem FLYT_SERVER=tls://127.0.0.1:$tls

echo "== 64 MiB each way, and the copy bandwidth (median of 5), plain TCP and TLS"
FLYT_SERVER=tcp://127.0.0.1:$plain run "$copybw" 64 5 > bw_plain.out 2>&1 || fail "plain copies: $(tail -3 bw_plain.out)"
FLYT_TLS_CA=ca.pem FLYT_SERVER=tls://127.0.0.1:$tls run "$copybw" 64 5 > bw_tls.out 2>&1 || fail "TLS copies: $(tail -3 bw_tls.out)"
grep -q "ok    64 MiB H2D then D2H round trip" bw_tls.out || fail "no intact 64 MiB round trip over TLS"
echo "plain TCP: $(grep RESULT bw_plain.out)"
echo "TLS:       $(grep RESULT bw_tls.out)"
exit $rc
