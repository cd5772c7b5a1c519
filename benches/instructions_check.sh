#!/usr/bin/env bash
# Fails when a decision costs more instructions than its budget (benches/instructions/budget)
# allows, by more than 3%: callgrind counts (benches/instructions.sh) are repeatable on a shared,
# noisy machine, so this check runs in CI where a time could not. Prints each mode's count
# against its budget. Needs valgrind.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
budget="$here/benches/instructions/budget"
modes=$(awk '!/^#/ && NF == 2 {print $1}' "$budget" | tr '\n' ' ')
out=$(MODES="$modes" bash "$here/benches/instructions.sh" "$here")
echo "$out"
status=0
while read -r mode limit; do
    [[ -z "$mode" || "$mode" == \#* ]] && continue
    got=$(echo "$out" | sed -n "s/.* $mode: \([0-9]*\) instructions per admit/\1/p")
    [ -n "$got" ] || { echo "no count for $mode" >&2; status=1; continue; }
    allowed=$(( limit * 103 / 100 ))
    if [ "$got" -gt "$allowed" ]; then
        echo "FAIL $mode: $got instructions per admit, budget $limit (+3% = $allowed)" >&2
        status=1
    else
        echo "ok   $mode: $got instructions per admit, budget $limit (+3% = $allowed)"
    fi
done < "$budget"
exit $status
