//! The `admit_sequence` check: what `fuzz/fuzz_targets/admit_sequence.rs` runs on every input, and what
//! `tests/engine/fuzz_corpus.rs` replays on stable over `fuzz/corpus/admit_sequence/`.
//!
//! Arbitrary sequences of mock-clock moves, admits, weighted admits (`admit_n`: `n = 0`, costs
//! within the buckets, and costs larger than either) and `admit_all` over up to four items, on
//! four keys and two route classes, with limits taken from the input, against the reference
//! model of `testkit/src/model.rs` (debt in nanoseconds, paid down one ns per ns):
//! every decision, including the exact `retry_after`, the bucket named and `admit_all`'s refused
//! index, is the model's, and `peek` just before each single admit predicts it.
//!
//! Operation bytes: `op % 4` 0 and 1 move the clock, 2 is an admit, 3 (new with weighted cost;
//! the older seeds have none, so they replay as they did) is `admit_n` or, with bit 5 set,
//! `admit_all`.

use tollgate::quanta::Clock;
use tollgate::{Key, Limiter, Profile};

use super::bytes::Bytes;
use crate::model::{ClassSpec, Model};

/// Weighted costs, chosen by four bits: 0, within the burst (1 to 5 tokens), within the
/// sustained bucket only (up to 29), just above the largest bucket, and far beyond.
const COSTS: [u32; 16] = [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    12,
    29,
    30,
    31,
    1_000,
    u32::MAX - 1,
    u32::MAX,
    1,
];

const KEYS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// Runs one input; panics on a divergence from the model.
pub fn check(data: &[u8]) {
    let mut b = Bytes(data);
    let mut specs: [ClassSpec; 2] = [(0, 0, 0, 0); 2];
    for s in &mut specs {
        *s = (
            1 + u64::from(b.u8() % 5),
            1 + u64::from(b.u16() % 2_000),
            1 + u64::from(b.u8() % 29),
            1 + u64::from(b.u16()) * 2 % 120_000,
        );
    }
    let mut src = String::from("name: fuzz\nidentities: { capacity: 64 }\nroute_classes:\n");
    for (i, (bt, bp, st, sp)) in specs.iter().enumerate() {
        src += &format!(
            "  c{i}:\n    burst: {{ tokens: {bt}, per: {bp}ms }}\n    sustained: {{ tokens: {st}, per: {sp}ms }}\n"
        );
    }
    let profile = Profile::from_yaml(&src).expect("generated profile is valid");
    let (clock, mock) = Clock::mock();
    let limiter = Limiter::builder(profile)
        .clock(clock)
        .key_secret(b"fuzz")
        .build()
        .expect("small table");
    let classes = [
        limiter.route_class("c0").unwrap(),
        limiter.route_class("c1").unwrap(),
    ];
    let key = |k: usize, c: usize| Key::authenticated("t", KEYS[k], classes[c]).unwrap();
    let mut model = Model::default();
    let mut now = 0u64;
    let mut steps = 0;
    while !b.0.is_empty() && steps < 4_096 {
        steps += 1;
        let op = b.u8();
        let (k, c) = (usize::from(op >> 2) % KEYS.len(), usize::from(op >> 4) % 2);
        match op % 4 {
            // Small moves: up to 65 ms in microseconds; large: up to 655 s.
            0 => {
                let d = u64::from(b.u16()) * 1_000;
                mock.increment(d);
                now += d;
            }
            1 => {
                let d = u64::from(b.u16()) * 10_000_000;
                mock.increment(d);
                now += d;
            }
            2 => {
                let predicted = model.clone().admit(KEYS[k], c, specs[c], now);
                assert_eq!(limiter.peek(&key(k, c)), predicted, "peek {k} {c} at {now}");
                let want = model.admit(KEYS[k], c, specs[c], now);
                let got = limiter.admit(&key(k, c));
                assert_eq!(
                    got, want,
                    "admit {} class {c} at {now} ns, specs {specs:?}",
                    KEYS[k]
                );
            }
            _ if op & 0x20 == 0 => {
                let n = COSTS[usize::from(b.u8()) % COSTS.len()];
                let want = model.admit_n(KEYS[k], c, specs[c], now, n);
                let got = limiter.admit_n(&key(k, c), n);
                assert_eq!(
                    got, want,
                    "admit_n {} class {c} n {n} at {now} ns, specs {specs:?}",
                    KEYS[k]
                );
            }
            _ => {
                // Up to four items (repeats allowed: a key twice pays twice).
                let count = 1 + usize::from(op >> 6);
                let items: Vec<(&str, usize, u32)> = (0..count)
                    .map(|_| {
                        let x = b.u8();
                        let n = COSTS[usize::from(x >> 3) % COSTS.len()];
                        (KEYS[usize::from(x) % 4], usize::from(x >> 2) % 2, n)
                    })
                    .collect();
                let want = model.admit_all(&items, &specs, now);
                let keyed: Vec<_> = items
                    .iter()
                    .map(|&(name, c, n)| {
                        let k = KEYS.iter().position(|&x| x == name).unwrap();
                        (key(k, c), n)
                    })
                    .collect();
                let got = limiter.admit_all(&keyed).map_err(|r| (r.index, r.decision));
                assert_eq!(
                    got, want,
                    "admit_all {items:?} at {now} ns, specs {specs:?}"
                );
            }
        }
    }
}
