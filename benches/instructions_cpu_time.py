#!/usr/bin/env python3
"""CPU time per admit of the loops `benches/instructions.sh` builds, several trees interleaved.

The difference of an N-admit and a 3N-admit run over 2N (start-up and calibration cancel), in
user + system CPU time of the child, so that time spent waiting for a core on a loaded machine
is not counted (time stolen by a busy sibling hyperthread still is). Run instructions.sh first;
its binaries are /tmp/tollgate-instructions/t*/target/release/t* (one per tree: the Cargo.toml
beside each names its tree).

    python3 benches/instructions_cpu_time.py hot 5000000 5 before=BIN1 after=BIN2
"""
import os, resource, subprocess, sys, statistics
mode, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bins = [a.split('=', 1) for a in sys.argv[4:]]
def cpu(b, k):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([b, mode, str(k)], stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
res = {name: [] for name, _ in bins}
for _ in range(rounds):
    for name, b in bins:
        res[name].append((cpu(b, 3 * n) - cpu(b, n)) / (2 * n) * 1e9)
for name, v in res.items():
    print(f"{name} {mode}: median {statistics.median(v):.1f} ns, min {min(v):.1f} ns per admit (CPU time, {rounds} rounds)")
