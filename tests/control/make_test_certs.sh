#!/usr/bin/env bash
# Throwaway certificates for the TLS tests, made with the openssl command at test time:
#   DIR/ca.pem           a CA (its key stays in DIR/ca.key)
#   DIR/server.pem/.key  a server certificate it signed, for 127.0.0.1 and localhost
#                        (and the extra IP addresses given), key 0600
#   DIR/other-ca.pem     an unrelated CA: a caller trusting only it must refuse the server
# usage: make_test_certs.sh DIR [IP...]; exit 77 (skip) without the openssl command.
set -euo pipefail
dir=$1; shift
command -v openssl > /dev/null || { echo "SKIP: no openssl command (scripts/install-deps.sh)"; exit 77; }
mkdir -p "$dir"
umask 077
san="IP:127.0.0.1,DNS:localhost"
for ip in "$@"; do san="$san,IP:$ip"; done
ca() { # NAME: a self-signed CA
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=Flyt test $1" -keyout "$dir/$1.key" -out "$dir/$1.pem" 2> /dev/null
}
ca ca
ca other-ca
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=flyt-test-server" \
  -keyout "$dir/server.key" -out "$dir/server.csr" 2> /dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" > "$dir/server.ext"
openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
  -days 2 -extfile "$dir/server.ext" -out "$dir/server.pem" 2> /dev/null
chmod 644 "$dir"/*.pem
chmod 600 "$dir/server.key"
