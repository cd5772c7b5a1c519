#!/usr/bin/env python3
"""Prints the README's benchmark table from criterion's last run (target/criterion).

Usage: cargo bench --bench main && python3 benches/report.py
Medians in ns per operation; ratios are read off the same run.
"""
import json
import os
import sys

ROOT = os.environ.get("CRITERION_DIR", os.path.join(os.path.dirname(__file__), "..", "target", "criterion"))


def median(path):
    with open(os.path.join(ROOT, path, "new", "estimates.json")) as f:
        return json.load(f)["median"]["point_estimate"]


def row(label, path, *peers):
    try:
        ns = median(path)
    except FileNotFoundError:
        return None
    cells = [label, f"{ns:.1f}"]
    for peer_label, peer in peers:
        try:
            cells.append(f"{median(peer) / ns:.2f}x {peer_label}")
        except FileNotFoundError:
            cells.append("-")
    return cells


ROWS = [
    ("hot key: tollgate admit (hash + clock + CAS)", "hot_key/tollgate_admit",
     ("vs governor direct", "hot_key/governor_direct"), ("vs governor keyed", "hot_key/governor_keyed")),
    ("hot key: governor direct `check()`", "hot_key/governor_direct"),
    ("hot key: governor keyed, 25-byte string", "hot_key/governor_keyed"),
    ("floor: one CAS on a padded slot", "hot_key/floor_cas_padded_slot"),
    ("floor: CAS + clock read", "hot_key/floor_cas_plus_now"),
    ("part: quanta `now()`", "hot_key/part_quanta_now"),
    ("part: aHash of 25 bytes", "hot_key/part_ahash_25_bytes"),
    ("fairness: admit without shared capacity", "fairness/tollgate_admit/without_capacity"),
    ("fairness: admit with shared capacity", "fairness/tollgate_admit/with_capacity",
     ("of the admit without", "fairness/tollgate_admit/without_capacity")),
    ("1M random keys: tollgate admit", "random_1m_keys/tollgate_admit/1000000",
     ("vs governor keyed", "random_1m_keys/governor_keyed/1000000"),
     ("vs the 64 MiB CAS floor", "random_1m_keys/floor_cas_random_line_64MiB/1000000"),
     ("vs the key-read + 128 MiB floor", "random_1m_keys/floor_key_read_and_cas_128MiB/1000000")),
    ("1M random keys: governor keyed", "random_1m_keys/governor_keyed/1000000"),
    ("floor: CAS on a random line of 64 MiB", "random_1m_keys/floor_cas_random_line_64MiB/1000000"),
    ("floor: random key read, then CAS on a random line of 128 MiB",
     "random_1m_keys/floor_key_read_and_cas_128MiB/1000000",
     ("of tollgate's time", "random_1m_keys/tollgate_admit/1000000")),
    ("2 threads, distinct keys: tollgate", "two_threads/tollgate_admit/distinct_keys",
     ("vs governor keyed", "two_threads/governor_keyed/distinct_keys")),
    ("2 threads, distinct keys: governor keyed", "two_threads/governor_keyed/distinct_keys"),
    ("2 threads, one key: tollgate", "two_threads/tollgate_admit/one_key",
     ("vs governor keyed", "two_threads/governor_keyed/one_key")),
    ("2 threads, one key: governor keyed", "two_threads/governor_keyed/one_key"),
    ("C ABI: Rust admit", "ffi_hot_key/rust_admit"),
    ("C ABI: tg_admit", "ffi_hot_key/tg_admit", ("of Rust admit", "ffi_hot_key/rust_admit")),
    ("HTTP: axum router alone", "http_layer/axum"),
    ("HTTP: with RateLimitLayer, anonymous", "http_layer/axum+tollgate/anonymous",
     ("of the router alone", "http_layer/axum")),
    ("HTTP: with RateLimitLayer, authenticated", "http_layer/axum+tollgate/authenticated",
     ("of the router alone", "http_layer/axum")),
]

print("| case | median ns/op | ratio (peer / tollgate) |")
print("| --- | ---: | --- |")
for spec in ROWS:
    r = row(*spec)
    if r:
        print(f"| {r[0]} | {r[1]} | {', '.join(r[2:]) if len(r) > 2 else ''} |")
if not os.path.isdir(ROOT):
    sys.exit(f"no criterion results under {ROOT}: run cargo bench first")
