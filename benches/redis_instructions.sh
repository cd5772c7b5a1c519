#!/usr/bin/env bash
# Instructions the Redis server executes per decision (callgrind, counting only inside the
# command: fcallCommand, evalShaCommand, incrCommand, and module commands), for tollgate's code
# at a git revision beside INCR, tollgate's Redis module (redis-module/, built here unless
# TOLLGATE_REDIS_MODULE names its .so) and, if TOLLGATE_REDIS_CELL names its module, CL.THROTTLE.
# Unlike the microseconds of `INFO commandstats` (benches/redis_cost.rs), the count does not
# move with the machine's load. Steady state: 200 identities, each key already there.
#
#   bash benches/redis_instructions.sh [REV]      # REV: default the work tree
#
# Needs redis-server, redis-cli, redis-benchmark and valgrind. N (default 5000) calls each.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-}
N=${N:-5000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "$REV" ]; then git show "$REV:src/redis/admit.lua" >"$tmp/admit.lua"; else cp src/redis/admit.lua "$tmp/admit.lua"; fi
module=${TOLLGATE_REDIS_MODULE:-}
if [ -z "$module" ]; then
  nice cargo build --quiet --release --manifest-path redis-module/Cargo.toml
  module=$PWD/redis-module/target/release/libtollgate_redis.so
fi
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# count LABEL SETUP_KIND WORDS...: Ir per call of WORDS, replayed N times over 200 identities.
count() {
  local label=$1 kind=$2; shift 2
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" \
    --toggle-collect=fcallCommand --toggle-collect=evalShaCommand \
    --toggle-collect=incrCommand --toggle-collect=RedisModuleCommandDispatcher \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --loadmodule "$module" ${TOLLGATE_REDIS_CELL:+--loadmodule "$TOLLGATE_REDIS_CELL"} >/dev/null 2>"$tmp/vg.log" &
  local vg=$!
  for _ in $(seq 600); do redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break; sleep 0.2; done
  local words=("$@")
  case $kind in
    function) # the library as tollgate loads it (src/redis/script.rs)
      redis-cli -p "$port" FUNCTION LOAD "$(printf '#!lua name=tg\n%s\nredis.register_function("tg", admit)\n' "$(cat "$tmp/admit.lua")")" >/dev/null ;;
    script)
      local sha
      if grep -q '^local function admit' "$tmp/admit.lua"; then
        sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$tmp/admit.lua"; printf '\nreturn admit(KEYS, ARGV)\n')")
      else
        sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$tmp/admit.lua")")
      fi
      words[1]=$sha ;;
  esac
  redis-benchmark -p "$port" -P 16 -c 8 -n "$N" -r 200 -q "${words[@]}" >/dev/null
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$vg" || true
  local total
  total=$(callgrind_annotate "$tmp/cg.out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !seen {gsub(",","",$1); print $1; seen = 1}')
  printf '| %s | %d |\n' "$label" $((total / N))
}

# The class of benches/redis_cost.rs: burst 100/1s (t = 10 ms), sustained 100000/1h (t = 36 ms).
C="10000 1000000 36000 3600000000 100"
# The reload instant (ARGV[4]) the current code takes after the deadline; none before it.
RA=""
if grep -q 'args\[5\]' "$tmp/admit.lua"; then RA="0"; fi
echo "| command (${REV:-work tree}) | instructions per call |"
echo "| --- | ---: |"
if grep -q 'register_function\|^local function admit' "$tmp/admit.lua" && grep -q 'args\[4\]' "$tmp/admit.lua"; then
  count "tollgate FCALL, both buckets" function FCALL tg 1 'tollgate:{5}:i:__rand_int__' "$C 0 0 0" 1 0 $RA
  count "tollgate FCALL, with shared capacity" function FCALL tg 2 'tollgate:{5}:i:__rand_int__' 'tollgate:{5}:c' "$C 1000000 10000000 5000000" 1 0 $RA 't:__rand_int__'
  count "tollgate EVALSHA (fallback), both buckets" script EVALSHA sha 1 'tollgate:{5}:i:__rand_int__' "$C 0 0 0" 1 0 $RA
else # the previous script's arguments
  count "tollgate EVALSHA, both buckets" script EVALSHA sha 1 'tollgate:{5}:i:__rand_int__' 1 10000 1000000 36000 3600000000 0 0 0 100 0
  count "tollgate EVALSHA, with shared capacity" script EVALSHA sha 3 'tollgate:{5}:i:__rand_int__' 'tollgate:{5}:t:__rand_int__' 'tollgate:{5}:s' 1 10000 1000000 36000 3600000000 1000000 10000000 5000000 100 0
fi
count "tollgate.admit (module), both buckets" none tollgate.admit 'tollgate:{5}:i:__rand_int__' "$C 0 0 0" 1 0 $RA
count "tollgate.admit (module), with shared capacity" none tollgate.admit 'tollgate:{5}:i:__rand_int__' 'tollgate:{5}:c' "$C 1000000 10000000 5000000" 1 0 $RA 't:__rand_int__'
count "INCR" none INCR 'bench:__rand_int__'
if [ -n "${TOLLGATE_REDIS_CELL:-}" ]; then
  count "redis-cell CL.THROTTLE" none CL.THROTTLE 'cell:__rand_int__' 99 100 1 1
else
  echo "redis-cell: skipped (set TOLLGATE_REDIS_CELL to its libredis_cell.so)"
fi
