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

/// [`profile`] with shared capacity: one shard of `slots` per `window_ms`, which the one tenant
/// may use whole (`tenant_share: 1.0`), as [`ModelCapacity`] models it.
pub fn profile_with_capacity(
    capacity: u64,
    classes: &[ClassSpec],
    window_ms: u64,
    slots: u64,
) -> Profile {
    let mut src = format!(
        "name: test\nidentities: {{ capacity: {capacity}, tenant_share: 1.0 }}\nroute_classes:\n"
    );
    for (i, (bt, bp, st, sp)) in classes.iter().enumerate() {
        src += &format!(
            "  c{i}:\n    burst: {{ tokens: {bt}, per: {bp}ms }}\n    sustained: {{ tokens: {st}, per: {sp}ms }}\n"
        );
    }
    src += &format!(
        "shared_capacity:\n  shards: 1\n  window: {window_ms}ms\n  slots_per_window: {slots}\n  tenant_share: 1.0\n"
    );
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

/// The most a reload's conversion leaves a bucket owing (the limiter's `DEBT_CAP`, 2^56 ns).
pub const DEBT_CAP: u64 = 1 << 56;

/// A token bucket written the obvious way: `debt` nanoseconds owed as of `last`, each token
/// worth `t` ns, `tau` ns of credit when full; it starts full (no debt), and time pays the debt
/// down one ns per ns. A request of `n` tokens fits if `debt + n * t <= tau`.
#[derive(Clone, Copy, Debug)]
pub struct ModelBucket {
    t: u64,
    tau: u64,
    debt: u64,
    last: u64,
}

impl ModelBucket {
    pub fn new(tokens: u64, per_ns: u64) -> Self {
        let t = per_ns.div_ceil(tokens);
        ModelBucket {
            t,
            tau: t * tokens,
            debt: 0,
            last: 0,
        }
    }
    fn refill(&mut self, now: u64) {
        self.debt = self.debt.saturating_sub(now - self.last);
        self.last = now;
    }
    fn is_full_at(&self, now: u64) -> bool {
        self.debt <= now - self.last
    }
    /// Nanoseconds until `n` tokens are there (`n` at most the bucket's tokens).
    fn wait_n(&self, n: u64) -> u64 {
        (self.debt + n * self.t).saturating_sub(self.tau)
    }
    /// The reload rule: at `now`, the tokens owed (`debt / t`) are owed under the new bucket of
    /// `tokens` per `per_ns`, rounded up to a whole ns, at most [`DEBT_CAP`].
    fn reload(&mut self, tokens: u64, per_ns: u64, now: u64) {
        self.refill(now);
        let new = ModelBucket::new(tokens, per_ns);
        let debt = (u128::from(self.debt) * u128::from(new.t)).div_ceil(u128::from(self.t));
        self.debt = debt.min(u128::from(DEBT_CAP)) as u64;
        (self.t, self.tau) = (new.t, new.tau);
    }
}

/// Shared capacity the obvious way, for one shard and one tenant that may use all of it
/// (`tenant_share: 1.0`): `slots` per fixed window of `window_ns`.
#[derive(Clone, Debug)]
pub struct ModelCapacity {
    pub window_ns: u64,
    pub slots: u64,
    /// (window number, slots used in it).
    used: (u64, u64),
}

impl ModelCapacity {
    pub fn new(window_ns: u64, slots: u64) -> Self {
        ModelCapacity {
            window_ns,
            slots,
            used: (0, 0),
        }
    }
    /// Takes `n` slots at `now`, or refuses: the tenant's share is checked first, so with a
    /// share of 1 every refusal is `TenantShare`; a cost above the slots has no wait.
    fn take(&mut self, n: u64, now: u64) -> Result<(), Decision> {
        let window = now / self.window_ns;
        let used = if self.used.0 == window {
            self.used.1
        } else {
            0
        };
        if used + n > self.slots {
            let end = (window + 1) * self.window_ns;
            return Err(Decision::Unavailable {
                retry_after: (n <= self.slots).then(|| Duration::from_nanos(end - now)),
                cause: tollgate::Cause::TenantShare,
            });
        }
        self.used = (window, used + n);
        Ok(())
    }
    fn check(&self, now: u64) -> Result<(), Decision> {
        self.clone().take(1, now)
    }
}

/// The reference model: per key, two buckets; admitted only if both have a token (`n` tokens,
/// for a weighted cost) and, with shared capacity, the window has the slots.
#[derive(Clone, Default)]
pub struct Model {
    keys: HashMap<(String, usize), (ModelBucket, ModelBucket)>,
    pub capacity: Option<ModelCapacity>,
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

    /// A reload at `now` to a profile of `specs` (by class): every bucket's debt carries over
    /// in tokens ([`ModelBucket`]'s rule).
    pub fn reload(&mut self, specs: &[ClassSpec], now: u64) {
        for ((_, class), (b, s)) in self.keys.iter_mut() {
            let (bt, bp, st, sp) = specs[*class];
            b.reload(bt, bp * 1_000_000, now);
            s.reload(st, sp * 1_000_000, now);
        }
    }

    pub fn admit(&mut self, key: &str, class: usize, spec: ClassSpec, now: u64) -> Decision {
        self.admit_n(key, class, spec, now, 1)
    }

    /// A request of weighted cost `n`: `n = 0` answers as a cost of 1 would, charging nothing;
    /// a cost above either bucket's tokens is `Exceeds` (the bucket with fewer tokens when both
    /// are too small, the burst on a tie); otherwise both buckets need `n` tokens and shared
    /// capacity `n` slots, and a capacity refusal charges nothing.
    pub fn admit_n(
        &mut self,
        key: &str,
        class: usize,
        spec: ClassSpec,
        now: u64,
        n: u32,
    ) -> Decision {
        let (bt, bp, st, sp) = spec;
        let n = u64::from(n);
        match (n > bt, n > st) {
            (true, false) => {
                return Decision::Exceeds {
                    bucket: BucketKind::Burst,
                }
            }
            (false, true) => {
                return Decision::Exceeds {
                    bucket: BucketKind::Sustained,
                }
            }
            (true, true) => {
                let bucket = if bt <= st {
                    BucketKind::Burst
                } else {
                    BucketKind::Sustained
                };
                return Decision::Exceeds { bucket };
            }
            (false, false) => {}
        }
        let (b, s) = self.keys.entry((key.to_owned(), class)).or_insert_with(|| {
            let mut b = ModelBucket::new(bt, bp * 1_000_000);
            let mut s = ModelBucket::new(st, sp * 1_000_000);
            b.last = now;
            s.last = now;
            (b, s)
        });
        b.refill(now);
        s.refill(now);
        let (wb, ws) = (b.wait_n(n.max(1)), s.wait_n(n.max(1)));
        if wb == 0 && ws == 0 {
            let capacity = match (&mut self.capacity, n) {
                (None, _) => Ok(()),
                (Some(c), 0) => c.check(now),
                (Some(c), n) => c.take(n, now),
            };
            if let Err(refused) = capacity {
                return refused;
            }
            b.debt += b.t * n;
            s.debt += s.t * n;
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

    /// Every `(key, class, n)` admitted at `now`, or none: the model is left as it was at the
    /// first refusal, which is returned with its index.
    pub fn admit_all(
        &mut self,
        items: &[(&str, usize, u32)],
        specs: &[ClassSpec],
        now: u64,
    ) -> Result<(), (usize, Decision)> {
        let mut next = self.clone();
        for (i, &(key, class, n)) in items.iter().enumerate() {
            match next.admit_n(key, class, specs[class], now, n) {
                Decision::Admit => {}
                refused => return Err((i, refused)),
            }
        }
        *self = next;
        Ok(())
    }
}
