"""Decisions per second from Python: tollgate's ``Limiter.admit`` (and ``admit_pinned``, each
caller pinned once) against ``limits`` (in-memory moving window and fixed window) and
``pyrate-limiter`` (in-memory buckets), on one hot key and on 1M distinct keys. Every limiter
is given a limit no caller reaches, so each call is an admission that is counted; each runs for
``--seconds`` or ``--calls``, whichever ends first.

    python benches/decisions.py [--seconds 20] [--calls 1000000] [--keys 1000000]

Needs the wheel installed, and ``pip install limits pyrate-limiter``.
"""

from __future__ import annotations

import argparse
import gc
import platform
import time

import tollgate

HUGE = 1_000_000_000

PROFILE = f"""\
name: bench
identities: {{ capacity: 4194304 }}
route_classes:
  api:
    burst:     {{ tokens: {HUGE}, per: 1s }}
    sustained: {{ tokens: 4000000000, per: 1h }}
"""


def tollgate_admit():
    limiter = tollgate.Limiter.from_yaml(PROFILE)
    api = limiter.route_class("api")
    admit = limiter.admit

    def call(key: str) -> bool:
        return admit("tenant", key, api).admitted

    return call


def tollgate_admit_pinned(keys):
    """Callers pinned once each (a session's or a connection's pin), looked up by key."""
    limiter = tollgate.Limiter.from_yaml(PROFILE)
    api = limiter.route_class("api")
    pins = {key: limiter.pin("tenant", key, api) for key in dict.fromkeys(keys)}
    admit_pinned = limiter.admit_pinned

    def call(key: str) -> bool:
        return admit_pinned(pins[key]).admitted

    return call


def limits_strategy(name: str):
    from limits import parse, storage, strategies

    limiter = getattr(strategies, name)(storage.MemoryStorage())
    rate = parse(f"{HUGE}/second")
    hit = limiter.hit

    def call(key: str) -> bool:
        return hit(rate, key)

    return call


def pyrate():
    from pyrate_limiter import BucketFactory, Duration, InMemoryBucket, Limiter, Rate, RateItem, WallClock

    rates = [Rate(HUGE, Duration.SECOND)]

    class PerKey(BucketFactory):
        """One in-memory bucket per key, made on first use (its multi-bucket pattern)."""

        def __init__(self) -> None:
            self.clock = WallClock()
            self.buckets: dict = {}

        def wrap_item(self, name: str, weight: int = 1) -> RateItem:
            return RateItem(name, self.clock.now(), weight=weight)

        def get(self, item: RateItem):
            bucket = self.buckets.get(item.name)
            if bucket is None:
                bucket = self.buckets[item.name] = self.create(InMemoryBucket, rates)
            return bucket

    limiter = Limiter(PerKey())
    acquire = limiter.try_acquire

    def call(key: str) -> bool:
        return acquire(key, blocking=False)

    return call


# Each maker is given the keys of the run (only the pinned one uses them, to pin each once).
PEERS = {
    "tollgate Limiter.admit": lambda keys: tollgate_admit(),
    "tollgate Limiter.admit_pinned": tollgate_admit_pinned,
    "limits moving window (memory)": lambda keys: limits_strategy("MovingWindowRateLimiter"),
    "limits fixed window (memory)": lambda keys: limits_strategy("FixedWindowRateLimiter"),
    "pyrate-limiter (in-memory buckets)": lambda keys: pyrate(),
}


def measure(make, keys, seconds: float, calls: int) -> float:
    call = make(keys)
    gc.collect()
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    # Batches of 1,000 between clock reads, so the clock is not what is measured.
    while n < calls:
        for key in keys[n % len(keys) : n % len(keys) + 1000]:
            if not call(key):
                raise SystemExit(f"refused at call {n}: the limit was meant to be out of reach")
        n += min(1000, len(keys) - n % len(keys))
        if time.perf_counter() > deadline:
            break
    return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--calls", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    args = ap.parse_args()
    hot = ["alice"] * 1000
    many = [f"user-{i}" for i in range(args.keys)]
    print(f"Python {platform.python_version()} on {platform.machine()}, {args.seconds} s or {args.calls} calls each")
    print()
    print(f"| limiter | one hot key (decisions/s) | {args.keys:,} keys (decisions/s) |")
    print("| --- | ---: | ---: |")
    rows = []
    for name, make in PEERS.items():
        hot_rate = measure(make, hot, args.seconds, args.calls)
        many_rate = measure(make, many, args.seconds, args.calls)
        rows.append((name, hot_rate, many_rate))
        print(f"| {name} | {hot_rate:,.0f} | {many_rate:,.0f} |", flush=True)
    ours = rows[0]
    peers = [r for r in rows if not r[0].startswith("tollgate")]
    best_hot = max(r[1] for r in peers)
    best_many = max(r[2] for r in peers)
    print()
    print(f"tollgate / fastest peer: {ours[1] / best_hot:.1f}x on one hot key, {ours[2] / best_many:.1f}x on {args.keys:,} keys")


if __name__ == "__main__":
    main()
