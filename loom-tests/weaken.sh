#!/usr/bin/env bash
# The weakening experiment of loom-tests/README.md, re-runnable: for each ordering a model pins
# (the "(a)" rows), weaken it in a copy of the tree (to Relaxed, or remove the fence or re-check),
# run the model that pins it as run.sh runs the models, and expect that model to fail. The tree
# itself is never edited. Prints one row per ordering and exits non-zero if any weakened
# ordering passed its model (no longer pinned: the README's table is then out of date).
#
#   bash loom-tests/weaken.sh            # every row
#   bash loom-tests/weaken.sh E4 S2      # some rows
#   bash loom-tests/weaken.sh --check    # only that every edit still applies (seconds)
#
# Each row rebuilds tollgate under loom and runs one model, which fails fast when the ordering
# is needed: about 15 s a row, 5 min in all, and a minute more the first time to build the
# loom dependencies. .ci/run runs it after run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=${WEAKEN_DIR:-/tmp/tollgate-weaken}
rm -rf "$work"
mkdir -p "$work"
git ls-files -z | xargs -0 cp --parents -t "$work"
export RUSTFLAGS="--cfg tollgate_loom -C debug-assertions=on ${RUSTFLAGS:-}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
# A target dir of its own, not run.sh's: cargo names a workspace crate's build by its path in
# the workspace, so the copy's tollgate and the tree's would share one artifact, and after a
# row the tree's loom build would count as fresh and run the weakened code.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}/loom-weaken"

# id | file | exact text (must occur once) | its replacement | test file | model
rows=(
  "E1|src/table/mod.rs|let s = slot.state.load(Ordering::Acquire);|let s = slot.state.load(Ordering::Relaxed);|claim|an_admit_never_matches_an_occupant_that_was_reclaimed_meanwhile"
  "E2|src/table/claim.rs|let seq = self.slots[home].claims.load(Ordering::Acquire);|let seq = self.slots[home].claims.load(Ordering::Relaxed);|admit|same_key_two_threads_claim_and_admit"
  "E3|src/table/claim.rs|let seen = slot.state.load(Ordering::Acquire);|let seen = slot.state.load(Ordering::Relaxed);|claim|an_admit_never_matches_an_occupant_that_was_reclaimed_meanwhile"
  "E4|src/table/claim.rs|.compare_exchange(c.seen, busy, Ordering::SeqCst, Ordering::Relaxed)|.compare_exchange(c.seen, busy, Ordering::Relaxed, Ordering::Relaxed)|aba|claim_whose_cas_meets_a_later_occupants_identical_word"
  "F1|src/table/claim.rs|fence(Ordering::Release);||reads|remaining_never_reads_another_occupants_state"
  "E6|src/table/claim.rs|seq.wrapping_add(1),
                Ordering::Release,|seq.wrapping_add(1),
                Ordering::Relaxed,|admit|same_key_two_threads_claim_and_admit"
  "E7|src/table/claim.rs|.store(busy.published(busy.tats()), Ordering::Release);|.store(busy.published(busy.tats()), Ordering::Relaxed);|admit|a_slot_left_by_a_lost_commit_never_matches_the_identity_it_was_claimed_for"
  "C1|src/capacity/slot_counts.rs|let in_b = b.fetch_add(1, Ordering::AcqRel);|let in_b = b.fetch_add(1, Ordering::Relaxed);|claim|two_claims_of_one_tenant_at_once_never_pass_its_cap"
  "E8|src/table/claim.rs|slot.state.store(busy.published(tats), Ordering::Release);|slot.state.store(busy.published(tats), Ordering::Relaxed);|admit|reclaim_races_an_admit_of_the_old_identity"
  "E9|src/table/mod.rs|.compare_exchange(seen, next, Ordering::Release, Ordering::Acquire)|.compare_exchange(seen, next, Ordering::Relaxed, Ordering::Acquire)|reload|a_word_of_a_newer_profile_is_never_read_as_an_older_ones"
  "E9f|src/table/mod.rs|.compare_exchange(seen, next, Ordering::Release, Ordering::Acquire)|.compare_exchange(seen, next, Ordering::Release, Ordering::Relaxed)|reload|a_word_of_a_newer_profile_is_never_read_as_an_older_ones"
  "G1|src/limiter/charge.rs|self.engine.config.publish(cfg.epoch);||reload|reload_racing_two_admits_never_mixes_profiles"
  "R1|src/table/mod.rs|if again.same_occupant(s) {|if true {|reads|remaining_never_reads_another_occupants_state"
  "F2|src/table/mod.rs|fence(Ordering::Acquire);||reads|remaining_never_reads_another_occupants_state"
  "S2|src/table/persist.rs|let first = slot.state.load(Ordering::Acquire);|let first = slot.state.load(Ordering::Relaxed);|reads|a_snapshot_racing_both_claims_never_pairs_an_occupant_with_another_ones_state"
  "S1|src/table/persist.rs|fence(Ordering::Acquire);||reads|a_snapshot_never_pairs_an_occupant_with_another_ones_state"
  "T2|src/table/retag.rs|.compare_exchange(seen, next, Ordering::Release, Ordering::Relaxed)|.compare_exchange(seen, next, Ordering::Relaxed, Ordering::Relaxed)|reload|a_word_the_walk_retagged_is_never_read_as_an_older_epochs"
)

# replace FILE OLD NEW: OLD must occur exactly once.
replace() {
  python3 - "$1" "$2" "$3" <<'EOF'
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
n = text.count(old)
if n != 1:
    sys.exit(f"{path}: the text to weaken occurs {n} times, not once: {old!r}")
open(path, "w").write(text.replace(old, new))
EOF
}

check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
wanted=" $* "
failed=0
echo "| # | weakened (file) | model | result | time |"
echo "| --- | --- | --- | --- | --- |"
for row in "${rows[@]}"; do
  # -d '': a row's texts may span lines.
  IFS='|' read -r -d '' id file old new test model < <(printf '%s' "$row") || true
  [ $# -eq 0 ] || [[ $wanted == *" $id "* ]] || continue
  cp "$root/$file" "$work/$file"
  replace "$work/$file" "$old" "$new"
  if [ "$check" = 1 ]; then
    cp "$root/$file" "$work/$file"
    echo "| $id | \`$file\` | \`$test.rs\` \`$model\` | the edit applies | |"
    continue
  fi
  start=$(date +%s)
  log="$work/$id.log"
  if (cd "$work" && cargo test -p loom-tests --release --test "$test" -- --test-threads=1 --exact "$model") >"$log" 2>&1; then
    result="**passes: not pinned**"
    failed=1
  elif grep -q "^test $model \.\.\. FAILED" "$log"; then
    why=$(grep -m1 -A1 "panicked at" "$log" | tail -n 1 | cut -c1-120)
    result="fails: ${why:-see $log}"
  else
    result="**did not build or run: see $log**"
    failed=1
  fi
  cp "$root/$file" "$work/$file"
  echo "| $id | \`$file\` | \`$test.rs\` \`$model\` | $result | $(( $(date +%s) - start )) s |"
done
exit "$failed"
