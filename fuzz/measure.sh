#!/usr/bin/env bash
# Runs fuzz targets for a fixed time each and prints one table row per target, as the tables in
# fuzz/README.md show them: the checked-in seeds plus an empty scratch corpus (new inputs go to
# the scratch one, so corpus/ is left as it is), the binary `cargo fuzz build` makes (its
# default AddressSanitizer build), niced.
#
#   fuzz/measure.sh                        # every target, 600 s each, one at a time
#   SECONDS_EACH=60 JOBS=2 fuzz/measure.sh admit_sequence retry_after
#
# Needs nightly and cargo-fuzz (`cargo install cargo-fuzz`); redis_differential needs a
# `redis-server` on PATH. A crash leaves its input in $OUT/<target>/artifacts/ and the row says
# so; add the input to corpus/<target>/ as a regression once it is fixed.
set -euo pipefail
cd "$(dirname "$0")"
secs=${SECONDS_EACH:-600}
jobs=${JOBS:-1}
out=${OUT:-/tmp/tollgate-fuzz}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list)
for t in "${targets[@]}"; do cargo +nightly fuzz build "$t"; done
bin="target/$(rustc +nightly -vV | sed -n 's/^host: //p')/release"

run() {
  local t=$1 dir=$out/$1
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  local seeds
  seeds=$(find "corpus/$t" -type f | wc -l)
  nice -n 10 "$bin/$t" "$dir/corpus" "corpus/$t" -max_total_time="$secs" \
    -artifact_prefix="$dir/artifacts/" >"$dir/log" 2>&1 || true
  local runs cov ft init crashes status
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 in \2 s/p' "$dir/log" | tail -1)
  init=$(grep -m1 'INITED' "$dir/log" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  status=$(grep -E '^#[0-9]+.*(cov|ft):' "$dir/log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$status")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$status")
  crashes=$(find "$dir/artifacts" -type f | wc -l)
  printf '| `%s` | %s | %s (%s) | %s | %s seeds, %s after | %s |\n' "$t" "${runs:-did not finish: see $dir/log}" \
    "${cov:-?}" "${init:-?}" "${ft:-?}" "$seeds" "$(find "$dir/corpus" -type f | wc -l)" "$crashes"
}

echo "| target | executions | \`cov:\` (from the seeds) | \`ft:\` | corpus | crashes |"
echo "| --- | --- | --- | --- | --- | --- |"
running=0
for t in "${targets[@]}"; do
  run "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
