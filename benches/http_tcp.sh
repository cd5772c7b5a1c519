#!/usr/bin/env bash
# The tower layer over TCP: axum bare, behind tollgate's RateLimitLayer and behind
# tower_governor's GovernorLayer (examples/tcp_bench_server.rs, quotas that never refuse), each on
# a one-thread runtime pinned to CPU 0, driven by `wrk -t1 -c32 -d10s` pinned to CPU 1; the three
# interleaved, ROUNDS times (default 2). Prints requests per second and each one's ratio to bare
# in the same round. Target: tollgate at least 0.97x of bare.
#
#   bash benches/http_tcp.sh            # needs wrk (apt-get install wrk) and 2 CPUs
#   ROUNDS=3 DURATION=10s bash benches/http_tcp.sh
set -euo pipefail

cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-10s}
PORT=${PORT:-8099}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 1; }
command -v taskset >/dev/null || { echo "taskset not found: apt-get install util-linux" >&2; exit 1; }

cargo build --release --example tcp_bench_server >&2
BIN=target/release/examples/tcp_bench_server

server=""
stop() { if [[ -n "$server" ]]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; server=""; fi; }
trap stop EXIT

run() { # variant -> requests/s
    taskset -c "$SERVER_CPU" "$BIN" "$1" "127.0.0.1:$PORT" 2>/dev/null &
    server=$!
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$PORT/v1/items" >/dev/null 2>&1 && break
        sleep 0.05
    done
    curl -sf "http://127.0.0.1:$PORT/v1/items" >/dev/null || { echo "$1 did not start" >&2; exit 1; }
    taskset -c "$CLIENT_CPU" wrk -t1 -c32 -d"$DURATION" "http://127.0.0.1:$PORT/v1/items" \
        | awk '/^Requests\/sec:/ { print $2 }'
    stop
}

echo "# $(date -u +%FT%TZ) $(git rev-parse --short HEAD) wrk -t1 -c32 -d$DURATION, server on CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU"
printf '%-6s %-10s %12s %8s\n' round variant req/s of_bare
for round in $(seq "$ROUNDS"); do
    bare=""
    for variant in bare tollgate governor; do
        rps=$(run "$variant")
        [[ -z "$bare" ]] && bare=$rps
        printf '%-6s %-10s %12.0f %8.3f\n' "$round" "$variant" "$rps" "$(awk -v a="$rps" -v b="$bare" 'BEGIN { print a / b }')"
    done
done
