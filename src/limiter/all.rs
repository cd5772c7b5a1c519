//! [`Limiter::admit_all`]: several charges, all or none, with what each took given back
//! exactly at the first refusal.

use super::charge::{Receipt, Refusal, Stale};
use super::Limiter;
use crate::config::Config;
use crate::decision::Decision;
use crate::identity::Key;

/// Which item of [`Limiter::admit_all`] (or [`Admission::admit_all`](crate::Admission::admit_all))
/// refused, and how; every item before it was given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The refused item's index in the slice.
    pub index: usize,
    /// Its refusal (never [`Decision::Admit`]).
    pub decision: Decision,
}

impl Limiter {
    /// Admits every `(key, n)` of `items` (as [`Limiter::admit_n`], in order), or none: at the
    /// first refusal, the tokens and shard slots already charged for the items before it are
    /// given back exactly, and the refusal says which item it was. For a request that several
    /// limits must all allow (Envoy sends several descriptors). All items are decided on one
    /// reading of the clock and one snapshot of the profile.
    ///
    /// Metrics count each decided item's own answer (an item given back still counts as
    /// admitted; the items after the refusal are not decided, nor counted). An item in shadow
    /// mode never refuses, as with `admit`.
    pub fn admit_all(&self, items: &[(Key<'_>, u32)]) -> Result<(), Refused> {
        const INLINE: usize = 8;
        if items.len() <= INLINE {
            let mut receipts = [None; INLINE];
            self.admit_all_into(items, &mut receipts)
        } else {
            let mut receipts = vec![None; items.len()];
            self.admit_all_into(items, &mut receipts)
        }
    }

    /// [`Limiter::admit_all`] keeping what each charge took in `receipts` (at least one per item).
    fn admit_all_into(
        &self,
        items: &[(Key<'_>, u32)],
        receipts: &mut [Option<Receipt>],
    ) -> Result<(), Refused> {
        let now = self.now();
        let cfg = self.engine.config.get();
        match self.admit_all_on(&cfg, now, items, receipts) {
            Ok(result) => result,
            Err(Stale) => loop {
                if let Ok(result) =
                    self.admit_all_on(&self.engine.config.load(), self.now(), items, receipts)
                {
                    return result;
                }
            },
        }
    }

    /// [`Limiter::admit_all_into`] on `cfg` at `now`; `Err(Stale)`, with everything charged
    /// given back, if a newer profile was published meanwhile (metrics then count the items
    /// decided before it twice, once per try).
    fn admit_all_on(
        &self,
        cfg: &Config,
        now: u64,
        items: &[(Key<'_>, u32)],
        receipts: &mut [Option<Receipt>],
    ) -> Result<Result<(), Refused>, Stale> {
        for (index, (key, n)) in items.iter().enumerate() {
            let class = cfg.class(key.class);
            let (receipt, computed) = match self.charge_n(cfg, key, *n, now) {
                Ok(receipt) => (receipt, Decision::Admit),
                Err(Refusal::Decided(refused)) => (None, refused),
                Err(Refusal::Stale) => {
                    for r in receipts[..index].iter().flatten() {
                        self.give_back(cfg, *r);
                    }
                    return Err(Stale);
                }
            };
            let verdict = self.engine.conclude(cfg, class.shadow, key, computed, now);
            receipts[index] = receipt;
            if !verdict.decision.is_admit() {
                for r in receipts[..index].iter().flatten() {
                    self.give_back(cfg, *r);
                }
                return Ok(Err(Refused {
                    index,
                    decision: verdict.decision,
                }));
            }
        }
        Ok(Ok(()))
    }
}
