//! The `admit_sequence` check: what `fuzz/fuzz_targets/admit_sequence.rs` runs on every input, and what
//! `tests/engine/fuzz_corpus.rs` replays on stable over `fuzz/corpus/admit_sequence/`.
//!
//! Arbitrary sequences of mock-clock moves and admits on four keys and two route classes, with
//! limits taken from the input, against a reference model written the obvious way (credit in
//! nanoseconds, refilled one ns per ns, capped; the model of `testkit/src/model.rs`): every
//! decision, including the exact `retry_after` and the bucket named, is the model's, and `peek`
//! just before each admit predicts it.

use std::collections::HashMap;
use std::time::Duration;

use tollgate::quanta::Clock;
use tollgate::{BucketKind, Decision, Key, Limiter, Profile};

#[derive(Clone, Copy, Debug)]
struct ModelBucket {
    t: u64,
    tau: u64,
    credit: u64,
    last: u64,
}

impl ModelBucket {
    fn new(tokens: u64, per_ns: u64, now: u64) -> Self {
        let t = per_ns.div_ceil(tokens);
        ModelBucket {
            t,
            tau: t * tokens,
            credit: t * tokens,
            last: now,
        }
    }
    fn refill(&mut self, now: u64) {
        self.credit = (self.credit + (now - self.last)).min(self.tau);
        self.last = now;
    }
    fn wait(&self) -> u64 {
        self.t.saturating_sub(self.credit)
    }
}

/// (burst tokens, burst ms, sustained tokens, sustained ms)
type Spec = (u64, u64, u64, u64);

fn model_admit(
    keys: &mut HashMap<(usize, usize), (ModelBucket, ModelBucket)>,
    key: (usize, usize),
    spec: Spec,
    now: u64,
    charge: bool,
) -> Decision {
    let (bt, bp, st, sp) = spec;
    let entry = keys.entry(key).or_insert_with(|| {
        (
            ModelBucket::new(bt, bp * 1_000_000, now),
            ModelBucket::new(st, sp * 1_000_000, now),
        )
    });
    let (mut b, mut s) = *entry;
    b.refill(now);
    s.refill(now);
    let (wb, ws) = (b.wait(), s.wait());
    if wb == 0 && ws == 0 {
        if charge {
            b.credit -= b.t;
            s.credit -= s.t;
            *entry = (b, s);
        }
        return Decision::Admit;
    }
    if charge {
        *entry = (b, s);
    }
    let (wait, bucket) = if wb > ws {
        (wb, BucketKind::Burst)
    } else {
        (ws, BucketKind::Sustained)
    };
    Decision::Throttle {
        retry_after: Duration::from_nanos(wait),
        bucket,
    }
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
}

const KEYS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// Runs one input; panics on a divergence from the model.
pub fn check(data: &[u8]) {
    let mut b = Bytes(data);
    let mut specs = [(0, 0, 0, 0); 2];
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
    let mut model = HashMap::new();
    let mut now = 0u64;
    let mut steps = 0;
    while !b.0.is_empty() && steps < 4_096 {
        steps += 1;
        let op = b.u8();
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
            _ => {
                let (k, c) = (usize::from(op >> 2) % KEYS.len(), usize::from(op >> 4) % 2);
                let key = Key::authenticated("t", KEYS[k], classes[c]).unwrap();
                let predicted = model_admit(&mut model, (k, c), specs[c], now, false);
                assert_eq!(limiter.peek(&key), predicted, "peek {k} {c} at {now}");
                let want = model_admit(&mut model, (k, c), specs[c], now, true);
                let got = limiter.admit(&key);
                assert_eq!(
                    got, want,
                    "admit {} class {c} at {now} ns, specs {specs:?}",
                    KEYS[k]
                );
            }
        }
    }
}
