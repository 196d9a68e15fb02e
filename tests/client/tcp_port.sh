# Sourced by the run scripts. tcp_port_of LOG: the TCP port a flyt-server
# started with --listen tcp://127.0.0.1:0 bound, read from its log line
# "listening on tcp://127.0.0.1:PORT" (tls:// with --tls-cert), so that runs side by side never
# collide (the kernel picks the port as the server binds). Waits up to 10 s;
# prints nothing and fails if the line never comes.
tcp_port_of() {
  local port
  for _ in $(seq 100); do
    port=$(sed -n 's|.*listening on t[cl][ps]://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$1" | head -1)
    [ -n "$port" ] && { echo "$port"; return 0; }
    sleep 0.1
  done
  return 1
}
