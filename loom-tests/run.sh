#!/usr/bin/env bash
# The loom models, exactly as CI runs them. LOOM_MAX_PREEMPTIONS bounds the preemptions loom
# explores per execution (2 covers every race in these models between two threads; the
# three-thread model is bounded by it too). Release mode: loom is slow unoptimised.
# It takes about 6 minutes on 2 cores, most of it reload.rs and claim.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debug assertions on in release (sharded-slab's bin/loom.sh): the bucket math's and the state
# word's `debug_assert!`s are checked in every execution loom explores.
export RUSTFLAGS="--cfg tollgate_loom -C debug-assertions=on ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
# A separate target dir: the cfg changes every crate's build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
start=$(date +%s)
cargo test -p loom-tests --release -- --test-threads=1 "$@"
echo "loom models: $(( $(date +%s) - start ))s with LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS"
