#!/usr/bin/env bash
# ShouldRateLimit decisions per second over loopback gRPC, driven by the same closed-loop client
# (server/examples/rls_load.rs) in the same run: the floor (server/examples/rls_floor.rs, the same
# tonic stack answering OK without deciding), tollgate-server and (if LIMITADOR names its binary)
# Kuadrant's limitador-server. Each line also gives the server's CPU time per decision. Limits are large enough that every call is a
# full decision that admits; the descriptor is `tenant=acme, user=u<k>`, one counter per user on
# both servers.
#
#   nice bash server/benches/rls_servers.sh [SECONDS=10] [CONNECTIONS=2] [IN_FLIGHT=64]
#   LIMITADOR=/path/to/limitador-server nice bash server/benches/rls_servers.sh
#   PIN=1 ...   # the server on CPU 0 and the client on CPU 1 (taskset), else both float
#
# limitador is not part of tollgate: build github.com/Kuadrant/limitador with
# `cargo build --release -p limitador-server` (needs protoc) yourself.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_=${1:-10}
CONNS=${2:-2}
INFLIGHT=${3:-64}
cargo build --release -q -p tollgate-server --bin tollgate-server --example rls_load --example rls_floor
BIN=${TOLLGATE_SERVER:-target/release/tollgate-server}
LOAD=target/release/examples/rls_load

dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
server_cpu=(); client_cpu=()
if [ "${PIN:-}" = 1 ]; then server_cpu=(taskset -c 0); client_cpu=(taskset -c 1); fi

wait_port() {
  for _ in $(seq 300); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "server on port $1 did not start" >&2; exit 1
}

# load LABEL PORT KEYS SERVER_PID
load() {
  printf '%-10s keys=%-8s ' "$1" "$3"
  "${client_cpu[@]}" "$LOAD" "http://127.0.0.1:$2" edge "$SECONDS_" "$CONNS" "$INFLIGHT" "$3" "$4"
}

fport=$(free_port)
"${server_cpu[@]}" target/release/examples/rls_floor "127.0.0.1:$fport" &
pids+=($!)
fpid=$!
wait_port "$fport"
load floor "$fport" 1 "$fpid"

cat > "$dir/profile.yaml" <<YAML
name: rls-bench
identities: { capacity: 2097152, tenant_share: 1 }
route_classes:
  read: { burst: { tokens: 4000000000, per: 1s }, sustained: { tokens: 4000000000, per: 1s } }
descriptors:
  domain: edge
  rules:
    - { tenant: tenant, principal: user, class: read }
YAML
port=$(free_port)
"${server_cpu[@]}" "$BIN" --profile "$dir/profile.yaml" --grpc "127.0.0.1:$port" --http off \
  2>"$dir/tollgate.log" &
pids+=($!)
wait_port "$port"
tpid=$!
for keys in 1 1048576; do load tollgate "$port" "$keys" "$tpid"; done

if [ -n "${LIMITADOR:-}" ]; then
  cat > "$dir/limits.yaml" <<YAML
- namespace: edge
  max_value: 4000000000
  seconds: 1
  conditions: []
  variables:
    - descriptors[0]['user']
YAML
  lport=$(free_port); lhttp=$(free_port)
  "${server_cpu[@]}" "$LIMITADOR" "$dir/limits.yaml" -b 127.0.0.1 -p "$lport" -B 127.0.0.1 \
    -P "$lhttp" memory 2>"$dir/limitador.log" >&2 &
  pids+=($!)
  lpid=$!
  wait_port "$lport"
  for keys in 1 1048576; do load limitador "$lport" "$keys" "$lpid"; done
fi
