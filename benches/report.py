#!/usr/bin/env python3
"""Prints a benchmark table (as in docs/benchmarks.md) from criterion's last run (target/criterion).

Usage:
    cargo bench --bench main && cargo bench --bench ffi \
        && cargo bench --bench http_layer && python3 benches/report.py
Medians in ns per operation. Each ratio divides two medians of the same run.
"""
import json
import os
import sys

ROOT = os.environ.get("CRITERION_DIR", os.path.join(os.path.dirname(__file__), "..", "target", "criterion"))


def median(path):
    try:
        with open(os.path.join(ROOT, path, "new", "estimates.json")) as f:
            return json.load(f)["median"]["point_estimate"]
    except FileNotFoundError:
        return None


HOT = "hot_key/tollgate_admit"
RND = "random_1m_keys/tollgate_admit/1000000"
# (label, bench, [(ratio label, numerator, denominator[, base])]); with a base, the ratio is
# (numerator - base) / (denominator - base).
ROWS = [
    ("hot key: tollgate admit (string key, hashing, clock, CAS)", HOT, [
        ("governor direct / tollgate", "hot_key/governor_direct", HOT),
        ("governor keyed / tollgate", "hot_key/governor_keyed", HOT)]),
    ("hot key: governor direct `check()` (no key)", "hot_key/governor_direct", []),
    ("hot key: governor keyed, 25-byte string", "hot_key/governor_keyed", []),
    ("floor: one CAS on a padded slot", "hot_key/floor_cas_padded_slot", []),
    ("floor: clock read + CAS", "hot_key/floor_cas_plus_now", [
        ("tollgate / floor", HOT, "hot_key/floor_cas_plus_now")]),
    ("part: quanta clock read", "hot_key/part_quanta_now", []),
    ("part: aHash of 25 bytes", "hot_key/part_ahash_25_bytes", []),
    ("admit, no shared capacity", "fairness/tollgate_admit/without_capacity", []),
    ("admit with shared capacity and fair share", "fairness/tollgate_admit/with_capacity", [
        ("with / without", "fairness/tollgate_admit/with_capacity", "fairness/tollgate_admit/without_capacity")]),
    ("1M random keys: tollgate admit", RND, [
        ("governor keyed / tollgate", "random_1m_keys/governor_keyed/1000000", RND),
        ("tollgate / 64 MiB CAS floor", RND, "random_1m_keys/floor_cas_random_line_64MiB/1000000"),
        ("tollgate / key-read + 128 MiB floor", RND, "random_1m_keys/floor_key_read_and_cas_128MiB/1000000")]),
    ("1M random keys: governor keyed", "random_1m_keys/governor_keyed/1000000", []),
    ("floor: CAS on a random line of 64 MiB", "random_1m_keys/floor_cas_random_line_64MiB/1000000", []),
    ("floor: random key read, then CAS on a random line of 128 MiB",
     "random_1m_keys/floor_key_read_and_cas_128MiB/1000000", []),
    ("2 threads, distinct keys: tollgate (wall time per op)", "two_threads/tollgate_admit/distinct_keys", [
        ("governor keyed / tollgate", "two_threads/governor_keyed/distinct_keys", "two_threads/tollgate_admit/distinct_keys")]),
    ("2 threads, distinct keys: governor keyed", "two_threads/governor_keyed/distinct_keys", []),
    ("2 threads, one key: tollgate", "two_threads/tollgate_admit/one_key", [
        ("governor keyed / tollgate", "two_threads/governor_keyed/one_key", "two_threads/tollgate_admit/one_key")]),
    ("2 threads, one key: governor keyed", "two_threads/governor_keyed/one_key", []),
    ("C ABI: Rust `admit`", "ffi_hot_key/rust_admit", []),
    ("C ABI: `tg_admit`", "ffi_hot_key/tg_admit", [
        ("tg_admit - admit (ns)", "ffi_hot_key/tg_admit", "ffi_hot_key/rust_admit")]),
    ("HTTP: axum router alone", "http_layer/axum", []),
    ("HTTP: with tower_governor's GovernorLayer (peer IP)", "http_layer/axum+tower_governor", [
        ("added (ns)", "http_layer/axum+tower_governor", "http_layer/axum")]),
    ("HTTP: with RateLimitLayer, anonymous", "http_layer/axum+tollgate_anonymous", [
        ("added (ns)", "http_layer/axum+tollgate_anonymous", "http_layer/axum"),
        ("added / tower_governor's added", "http_layer/axum+tollgate_anonymous",
         "http_layer/axum+tower_governor", "http_layer/axum")]),
    ("HTTP: with RateLimitLayer, authenticated", "http_layer/axum+tollgate_authenticated", [
        ("added (ns)", "http_layer/axum+tollgate_authenticated", "http_layer/axum")]),
]

if not os.path.isdir(ROOT):
    sys.exit(f"no criterion results under {ROOT}: run cargo bench first")
print("| case | median ns/op | ratios from the same run |")
print("| --- | ---: | --- |")
for label, bench, ratios in ROWS:
    ns = median(bench)
    if ns is None:
        continue
    cells = []
    for rlabel, num, den, *base in ratios:
        a, b = median(num), median(den)
        if a is None or b is None:
            continue
        if base:
            # A ratio of what two layers add to the same base.
            c = median(base[0])
            if c is not None:
                cells.append(f"{rlabel} = {(a - c) / (b - c):.2f}")
            continue
        cells.append(f"{rlabel} = {a - b:.1f}" if "(ns)" in rlabel else f"{rlabel} = {a / b:.2f}")
    print(f"| {label} | {ns:.1f} | {'; '.join(cells)} |")
