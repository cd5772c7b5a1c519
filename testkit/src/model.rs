//! Shared by the integration tests: profiles with chosen numbers, a limiter on a mock clock, and
//! the reference model.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tollgate::quanta::{Clock, Mock};
use tollgate::{BucketKind, Decision, Limiter, Profile};

/// One route class's numbers: (burst tokens, burst period ms, sustained tokens, sustained ms).
pub type ClassSpec = (u64, u64, u64, u64);

pub fn profile(capacity: u64, classes: &[ClassSpec]) -> Profile {
    let mut src = format!("name: test\nidentities: {{ capacity: {capacity} }}\nroute_classes:\n");
    for (i, (bt, bp, st, sp)) in classes.iter().enumerate() {
        src += &format!(
            "  c{i}:\n    burst: {{ tokens: {bt}, per: {bp}ms }}\n    sustained: {{ tokens: {st}, per: {sp}ms }}\n"
        );
    }
    Profile::from_yaml(&src).unwrap()
}

pub fn mock_limiter(profile: Profile) -> (Limiter, Arc<Mock>) {
    let (clock, mock) = Clock::mock();
    let limiter = Limiter::builder(profile)
        .clock(clock)
        .key_secret(b"test")
        .build()
        .unwrap();
    (limiter, mock)
}

/// A token bucket written the obvious way: `credit` nanoseconds of refill, at most `tau`, each
/// token worth `t` ns; it starts full and refills one ns per ns.
#[derive(Clone, Copy, Debug)]
pub struct ModelBucket {
    t: u64,
    tau: u64,
    credit: u64,
    last: u64,
}

impl ModelBucket {
    pub fn new(tokens: u64, per_ns: u64) -> Self {
        let t = per_ns.div_ceil(tokens);
        ModelBucket {
            t,
            tau: t * tokens,
            credit: t * tokens,
            last: 0,
        }
    }
    fn refill(&mut self, now: u64) {
        self.credit = (self.credit + (now - self.last)).min(self.tau);
        self.last = now;
    }
    fn is_full_at(&self, now: u64) -> bool {
        self.credit + (now - self.last) >= self.tau
    }
    /// Nanoseconds until one token is there.
    fn wait(&self) -> u64 {
        self.t.saturating_sub(self.credit)
    }
}

/// The reference model: per key, two buckets; admitted only if both have a token.
#[derive(Default)]
pub struct Model {
    keys: HashMap<(String, usize), (ModelBucket, ModelBucket)>,
}

impl Model {
    /// Identities (other than `except`) whose buckets are not both full at `now`: each of them
    /// must hold a table slot.
    pub fn busy_identities(&self, now: u64, except: (&str, usize)) -> usize {
        self.keys
            .iter()
            .filter(|((k, c), _)| (k.as_str(), *c) != except)
            .filter(|(_, (b, s))| !(b.is_full_at(now) && s.is_full_at(now)))
            .count()
    }

    /// True if the key has never been seen or both its buckets are full at `now`.
    pub fn is_full(&self, key: &str, class: usize, now: u64) -> bool {
        self.keys
            .get(&(key.to_owned(), class))
            .is_none_or(|(b, s)| b.is_full_at(now) && s.is_full_at(now))
    }

    pub fn admit(&mut self, key: &str, class: usize, spec: ClassSpec, now: u64) -> Decision {
        let (bt, bp, st, sp) = spec;
        let (b, s) = self.keys.entry((key.to_owned(), class)).or_insert_with(|| {
            let mut b = ModelBucket::new(bt, bp * 1_000_000);
            let mut s = ModelBucket::new(st, sp * 1_000_000);
            b.last = now;
            s.last = now;
            (b, s)
        });
        b.refill(now);
        s.refill(now);
        let (wb, ws) = (b.wait(), s.wait());
        if wb == 0 && ws == 0 {
            b.credit -= b.t;
            s.credit -= s.t;
            return Decision::Admit;
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
}
