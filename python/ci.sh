#!/usr/bin/env bash
# The Python binding's CI: rustfmt and clippy on its crate, the wheel built by maturin into a
# fresh virtualenv, then the pytest suite against servers on loopback (the demo gateway is
# taken from the repository's target/ or built). Run from anywhere: `bash python/ci.sh`.
set -euo pipefail
cd "$(dirname "$0")"
# The caller's own target directory (of the root workspace) is where the tests find the gateway.
repo_target="${CARGO_TARGET_DIR:-}"
export CARGO_TARGET_DIR="${PY_TARGET_DIR:-$PWD/target}"

cargo fmt --manifest-path Cargo.toml --check
cargo clippy --manifest-path Cargo.toml --all-targets -- -D warnings

if ! python3 -m venv --help >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
fi
venv="$CARGO_TARGET_DIR/venv"
rm -rf "$venv"
python3 -m venv "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet maturin pytest httpx uvicorn fastapi flask waitress

rm -rf "$CARGO_TARGET_DIR/wheels"
maturin build --release --quiet -o "$CARGO_TARGET_DIR/wheels"
python -m pip install --quiet "$CARGO_TARGET_DIR"/wheels/tollgate_engine-*.whl

# The gateway is the root workspace's build (as `cargo test --workspace` leaves it), not a
# second build in the binding's target directory.
if [ -n "$repo_target" ]; then export CARGO_TARGET_DIR="$repo_target"; else unset CARGO_TARGET_DIR; fi
# From outside the source tree, so that the installed wheel is what is imported.
cd tests
python -m pytest -q -p no:cacheprovider .
