#!/usr/bin/env bash
# Instructions per request that a rate-limit layer adds to axum, counted by callgrind (exact on
# a shared, noisy machine, where criterion's nanoseconds move by 20% or more). For each tollgate
# source tree given (default: this one), builds benches/instructions/layer_loop.rs against it in
# a scratch crate and counts N and 3N requests through `oneshot` under callgrind, for axum
# bare, behind a layer that does nothing (what axum's `Router::layer` costs whatever the layer),
# behind tollgate's RateLimitLayer (counted, and after `RateLimitLayer::leak`) and behind
# tower_governor's GovernorLayer (as configured by default, and with `use_headers`, which puts
# two headers on each admitted response where tollgate puts one), counting only
# inside the request loop (`--toggle-collect`: start-up, such as the clock's calibration, whose
# length varies from run to run, stays out); the difference over 2N is the per-request cost (the
# first request's one-time work cancels out). Prints each layer's
# instructions over bare, and tollgate's as a ratio of each tower_governor's.
#
#   git worktree add /tmp/old <commit> && bash benches/layer_instructions.sh /tmp/old .
#
# Needs valgrind. N defaults to 20000.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 0 ] && set -- "$here"
command -v valgrind >/dev/null || { echo "layer_instructions.sh: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
N=${N:-20000}
scratch="${TMPDIR:-/tmp}/tollgate-layer-instructions"
export CARGO_TARGET_DIR="$scratch/target"   # one build of axum and the peers for every tree
for tree in "$@"; do
    tree="$(cd "$tree" && pwd)"
    name="l$(printf '%s' "$tree" | cksum | cut -d' ' -f1)"
    dir="$scratch/$name"
    mkdir -p "$dir/src"
    cat > "$dir/Cargo.toml" <<TOML
[package]
name = "$name"
version = "0.0.0"
edition = "2021"
publish = false
[dependencies]
tollgate = { path = "$tree" }
axum = { version = "0.8", default-features = false, features = ["http1", "tokio", "json"] }
tower_governor = "0.8"
tower = { version = "0.5", default-features = false, features = ["util"] }
tokio = { version = "1", features = ["rt"] }
http = "1"
serde_json = "1"
[profile.release]
debug = 1
[workspace]
TOML
    cp "$here/benches/instructions/layer_loop.rs" "$dir/src/main.rs"
    # The tree's own lock: the versions it ships with (a newer hasher or clock in the registry
    # would change the count without a change to tollgate).
    cp "$tree/Cargo.lock" "$dir/Cargo.lock"
    (cd "$dir" && cargo build -q --release)
    count() {
        valgrind --tool=callgrind --toggle-collect="*send_requests" --callgrind-out-file=/dev/null "$CARGO_TARGET_DIR/release/$name" "$1" "$2" 2>&1 |
            sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
    }
    per() { local a b; a=$(count "$1" "$N"); b=$(count "$1" $((3 * N))); echo $(( (b - a) / (2 * N) )); }
    bare=$(per bare)
    noop=$(per noop)
    tollgate=$(per tollgate)
    leaked=$(per tollgate-leaked)
    governor=$(per governor)
    headers=$(per governor-headers)
    ratio() { awk -v a=$((tollgate - bare)) -v b=$(($1 - bare)) 'BEGIN { printf "%.2f", a / b }'; }
    own() { awk -v a=$((tollgate - noop)) -v b=$(($1 - noop)) 'BEGIN { printf "%.2f", a / b }'; }
    echo "$tree: bare $bare instructions per request; any layer (one that does nothing) +$((noop - bare)); tollgate +$((tollgate - bare)) (leaked +$((leaked - bare))); tower_governor +$((governor - bare)), with headers +$((headers - bare)); tollgate/tower_governor $(ratio "$governor"), with headers $(ratio "$headers"); over the layer that does nothing, tollgate +$((tollgate - noop)), tower_governor +$((governor - noop)) ($(own "$governor")), with headers +$((headers - noop)) ($(own "$headers"))"
done
