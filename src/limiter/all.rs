//! [`Limiter::admit_all`]: several charges, all or none, with what each took given back
//! exactly at the first refusal.

use super::charge::{Receipt, Refusal, Stale};
use super::Limiter;
use crate::config::Config;
use crate::decision::Decision;
use crate::engine::Verdict;
use crate::identity::{Key, Tenant};

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
        let cfg = self.engine.config.get();
        self.admit_all_from(&cfg, self.now(), items, receipts)
    }

    /// [`Limiter::admit_all_into`] starting on `cfg` at `now`, and under the newest profile on
    /// a fresh clock reading for as long as a reload comes between.
    fn admit_all_from(
        &self,
        cfg: &Config,
        now: u64,
        items: &[(Key<'_>, u32)],
        receipts: &mut [Option<Receipt>],
    ) -> Result<(), Refused> {
        let mut computed = [Decision::Admit; 8];
        let mut spilled = Vec::new();
        let computed = if items.len() <= computed.len() {
            &mut computed[..items.len()]
        } else {
            spilled.resize(items.len(), Decision::Admit);
            &mut spilled[..]
        };
        let decided = match self.admit_all_on(cfg, now, items, receipts, computed) {
            Ok(decided) => decided,
            Err(Stale) => loop {
                let (cfg, now) = (self.engine.config.load(), self.now());
                if let Ok(decided) = self.admit_all_on(&cfg, now, items, receipts, computed) {
                    return self.conclude_all(&cfg, now, items, receipts, computed, decided);
                }
            },
        };
        self.conclude_all(cfg, now, items, receipts, computed, decided)
    }

    /// One pass over `items` on `cfg` at `now`, writing each decided item's answer in
    /// `computed`: how many were decided and whether the last refused, or `Err(Stale)`, with
    /// everything charged given back, if a newer profile was published meanwhile. Nothing is
    /// counted in metrics here: a pass that ends stale is tried again, and counts once.
    fn admit_all_on(
        &self,
        cfg: &Config,
        now: u64,
        items: &[(Key<'_>, u32)],
        receipts: &mut [Option<Receipt>],
        computed: &mut [Decision],
    ) -> Result<Decided, Stale> {
        for (index, (key, n)) in items.iter().enumerate() {
            let class = cfg.class(key.class);
            let (receipt, answer) = match self.charge_n(cfg, key, *n, now) {
                Ok(receipt) => (receipt, Decision::Admit),
                Err(Refusal::Decided(refused)) => (None, refused),
                Err(Refusal::Stale) => {
                    for r in receipts[..index].iter().flatten() {
                        self.give_back(cfg, *r);
                    }
                    return Err(Stale);
                }
            };
            receipts[index] = receipt;
            computed[index] = answer;
            if !Verdict::of(class.shadow, answer).decision.is_admit() {
                for r in receipts[..index].iter().flatten() {
                    self.give_back(cfg, *r);
                }
                return Ok(Decided {
                    count: index + 1,
                    refused: true,
                });
            }
        }
        Ok(Decided {
            count: items.len(),
            refused: false,
        })
    }

    /// Counts the final pass's decisions in metrics (each decided item's own answer, an item
    /// given back still as admitted) and answers.
    fn conclude_all(
        &self,
        cfg: &Config,
        now: u64,
        items: &[(Key<'_>, u32)],
        receipts: &[Option<Receipt>],
        computed: &[Decision],
        decided: Decided,
    ) -> Result<(), Refused> {
        let mut last = Decision::Admit;
        for (index, (key, _)) in items[..decided.count].iter().enumerate() {
            if let Some(r) = &receipts[index] {
                self.counted(cfg, key.class, &r.charged);
            }
            let shadow = cfg.class(key.class).shadow;
            last = self
                .engine
                .conclude(
                    cfg,
                    shadow,
                    key.class,
                    Tenant::of(key),
                    computed[index],
                    now,
                )
                .decision;
        }
        match decided.refused {
            false => Ok(()),
            true => Err(Refused {
                index: decided.count - 1,
                decision: last,
            }),
        }
    }
}

/// How far a pass of [`Limiter::admit_all_on`] went.
#[derive(Clone, Copy, Debug)]
struct Decided {
    /// Items decided (those after a refusal are not).
    count: usize,
    /// The last decided item refused.
    refused: bool,
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use crate::{Key, Limiter, Profile};

    const PROFILE: &str = "name: m\nidentities: { capacity: 64 }\nroute_classes:\n  read:\n    \
        burst: { tokens: 2, per: 1s }\n    sustained: { tokens: 1000, per: 1h }\n";

    /// A reload between the first and the second item sends the pass round again: the first
    /// item (a check, which no reload makes stale) is still counted once.
    #[test]
    fn a_pass_tried_again_after_a_reload_counts_each_item_once() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let l = metrics::with_local_recorder(&recorder, || {
            Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
                .key_secret(b"m")
                .build()
                .unwrap()
        });
        let read = l.route_class("read").unwrap();
        let (a, b) = (
            Key::authenticated("acme", "a", read).unwrap(),
            Key::authenticated("acme", "b", read).unwrap(),
        );
        let old = arc_swap::Guard::into_inner(l.engine.config.load());
        // (The config's metric handles are registered by the recorder of the reload's thread.)
        let faster = Profile::from_yaml(&PROFILE.replace("2, per: 1s", "4, per: 1s")).unwrap();
        metrics::with_local_recorder(&recorder, || l.reload(faster)).unwrap();
        let mut receipts = [None; 2];
        assert_eq!(
            l.admit_all_from(&old, l.now(), &[(a, 0), (b, 1)], &mut receipts),
            Ok(())
        );
        let decisions: u64 = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(k, ..)| k.key().name() == "tollgate_decisions_total")
            .map(|(.., v)| match v {
                DebugValue::Counter(c) => c,
                _ => 0,
            })
            .sum();
        assert_eq!(decisions, 2);
        // The second item was charged once, under the new profile: 3 of 4 left.
        assert_eq!(l.remaining(&b).burst, 3);
    }
}
