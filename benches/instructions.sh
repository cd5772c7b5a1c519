#!/usr/bin/env bash
# Instructions per admit, counted by callgrind: exact and repeatable on a shared, noisy machine,
# where criterion's nanoseconds are not. For each tollgate source tree given (default: this
# one), builds benches/instructions/admit_loop.rs against it in a scratch crate and counts
# instructions at 1M and 3M admits; the difference over 2M is the per-admit cost (start-up and
# quanta's calibration cancel out). Compare two commits side by side:
#
#   git worktree add /tmp/old <commit> && bash benches/instructions.sh /tmp/old .
#
# Needs valgrind. Modes: `hot` (one key), `capacity` (one key, shared capacity and tenant fair
# share on), `keys` (64k keys round robin), `pinned` (one pinned key), `ffi` and `ffi-pinned`
# (the same through `tg_admit` and `tg_admit_pinned`: minus `hot` and `pinned`, the C ABI's
# own cost). `MODES="hot capacity"` counts only those.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 0 ] && set -- "$here"
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
scratch="${TMPDIR:-/tmp}/tollgate-instructions"
for tree in "$@"; do
    tree="$(cd "$tree" && pwd)"
    name="t$(printf '%s' "$tree" | cksum | cut -d' ' -f1)"
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
tollgate-ffi = { path = "$tree/ffi" }
[profile.release]
debug = 1
[workspace]
TOML
    cp "$here/benches/instructions/admit_loop.rs" "$dir/src/main.rs"
    # The tree's own lock: the versions it ships with (a newer hasher or clock in the registry
    # would change the count without a change to tollgate).
    cp "$tree/Cargo.lock" "$dir/Cargo.lock"
    (cd "$dir" && cargo build -q --release)
    for mode in ${MODES:-hot capacity keys pinned ffi ffi-pinned}; do
        count() {
            valgrind --tool=callgrind --callgrind-out-file=/dev/null "$dir/target/release/$name" "$mode" "$1" 2>&1 |
                sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
        }
        a=$(count 1000000)
        b=$(count 3000000)
        echo "$tree $mode: $(( (b - a) / 2000000 )) instructions per admit"
    done
done
