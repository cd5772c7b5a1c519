//! The optional local deny cache: a throttled identity is answered by this worker until its
//! `retry_after` has passed, without a round trip to Redis.
//!
//! Exact, because nothing but time gives a throttled identity tokens back: no other worker can
//! refill a bucket, and a throttle charges nothing. The instant stored is `now + retry_after` on
//! the worker's monotonic clock, read when the answer arrived (so a few microseconds late at
//! most, never early). Only `Throttle` is cached: a capacity refusal depends on other callers.
//! A reload clears the cache, since new limits may refill faster.

use core::time::Duration;
use std::time::Instant;

use parking_lot::Mutex;

use crate::decision::{BucketKind, Decision};
use crate::identity::{Digest, DigestMap};

/// Locks the cache is split over, so that workers' tasks rarely wait on each other.
const SHARDS: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Denied {
    until: Instant,
    bucket: BucketKind,
}

/// A fixed-size map of throttled identities: at most `per_shard` entries in each of
/// [`SHARDS`] maps; a full map first drops what has expired, then the entry that expires soonest.
pub(crate) struct DenyCache {
    shards: Box<[Mutex<DigestMap<Denied>>]>,
    per_shard: usize,
}

impl DenyCache {
    /// A cache of at most `capacity` identities (at least one per shard).
    pub(crate) fn new(capacity: usize) -> DenyCache {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        DenyCache {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(DigestMap::with_capacity_and_hasher(
                        per_shard,
                        Default::default(),
                    ))
                })
                .collect(),
            per_shard,
        }
    }

    fn shard(&self, digest: Digest) -> &Mutex<DigestMap<Denied>> {
        &self.shards[(digest.lo >> 1) as usize % SHARDS]
    }

    /// The throttle still in force for `digest`, with the wait left, if any.
    #[inline]
    pub(crate) fn get(&self, digest: Digest) -> Option<Decision> {
        let mut map = self.shard(digest).lock();
        let denied = *map.get(&digest)?;
        let now = Instant::now();
        if now < denied.until {
            Some(Decision::Throttle {
                retry_after: denied.until - now,
                bucket: denied.bucket,
            })
        } else {
            map.remove(&digest);
            None
        }
    }

    /// Remembers that `digest` is throttled for `retry_after` from now.
    pub(crate) fn insert(&self, digest: Digest, retry_after: Duration, bucket: BucketKind) {
        let now = Instant::now();
        let denied = Denied {
            until: now + retry_after,
            bucket,
        };
        let mut map = self.shard(digest).lock();
        if map.len() >= self.per_shard && !map.contains_key(&digest) {
            map.retain(|_, d| d.until > now);
            if map.len() >= self.per_shard {
                let soonest = map.iter().min_by_key(|(_, d)| d.until).map(|(k, _)| *k);
                if let Some(k) = soonest {
                    map.remove(&k);
                }
            }
        }
        map.insert(digest, denied);
    }

    /// Forgets everything (after a reload).
    pub(crate) fn clear(&self) {
        for s in self.shards.iter() {
            s.lock().clear();
        }
    }

    /// Entries held, expired or not.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(i: u64) -> Digest {
        Digest {
            hi: i,
            lo: i * 2 + 1,
        }
    }

    #[test]
    fn answers_until_the_instant_then_forgets() {
        let c = DenyCache::new(64);
        c.insert(d(1), Duration::from_millis(30), BucketKind::Burst);
        match c.get(d(1)) {
            Some(Decision::Throttle {
                retry_after,
                bucket,
            }) => {
                assert!(retry_after <= Duration::from_millis(30));
                assert_eq!(bucket, BucketKind::Burst);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.get(d(2)), None);
        std::thread::sleep(Duration::from_millis(35));
        assert_eq!(c.get(d(1)), None);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn stays_bounded() {
        let c = DenyCache::new(32);
        for i in 0..10_000 {
            c.insert(d(i), Duration::from_secs(60 + i), BucketKind::Sustained);
        }
        assert!(c.len() <= 32, "{}", c.len());
        // The newest entry is kept (the soonest to expire went).
        assert!(c.get(d(9_999)).is_some());
        c.clear();
        assert_eq!(c.len(), 0);
    }
}
