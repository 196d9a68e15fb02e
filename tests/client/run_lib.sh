# Sourced by the run scripts: a private temp dir ($tmp), removed at exit
# with every process whose pid was added to pids (servers, fake peers), and
# tcp_port_of (tcp_port.sh).
. "$(dirname "${BASH_SOURCE[0]}")/tcp_port.sh"
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
