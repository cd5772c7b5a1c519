//! Pinned identities: the digests of a key computed once, and the slot it was last found in,
//! for callers that decide many times for the same caller (a connection, a session, a tenant
//! object, a cache of descriptors). A decision on a pinned identity reads no key, hashes
//! nothing, and goes to its slot directly; the slot is checked to still be that identity's
//! (its word, then its digest, as a scan checks a slot), and when it is not (the identity was
//! full, its slot reclaimed, and it came back elsewhere) the decision takes the full way and
//! the pin learns the new slot. It also keeps the config in force when it was made: until a
//! reload, a decision reads it from the pin instead of the thread's cache.

use std::sync::Arc;

use crate::config::Config;
use crate::decision::Decision;
use crate::identity::{Key, Resolved, RouteClass, Tenant};
use crate::sync::unmodelled::AtomicUsize;

use super::charge::Refusal;
use super::Limiter;

/// A key of one [`Limiter`], resolved once ([`Limiter::pin`]); decide with
/// [`Limiter::admit_pinned`]. Holds digests, never the key's strings. Valid across reloads
/// (route class handles and digests survive them); a pin of another limiter is refused with a
/// panic, as another limiter's route class is.
///
/// A pin also holds the profile in force when it was made, which makes its decisions a little
/// cheaper until the next reload; after one, they cost what [`Limiter::admit`]'s do without
/// the hashing, and the pin keeps the old profile's memory (a few KiB, shared by every pin
/// made under it) until it is dropped. Pin again after a reload to have both back.
pub struct Pinned {
    limiter: u64,
    /// The route class, the identity's digest, and its tenant (its digest known) or the
    /// anonymous callers: kept as the decision takes them, so that it copies nothing.
    id: Resolved<'static>,
    /// The slot the identity was last found in (`usize::MAX`: none yet).
    hint: AtomicUsize,
    /// The config cell's generation when the pin was made, and its config then (read after
    /// the generation: a reload in between leaves the pin a generation older than its
    /// config, never newer, so the pin's config is never taken once it is out of date).
    generation: u64,
    config: Arc<Config>,
}

impl core::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pinned")
            .field("limiter", &self.limiter)
            .field("id", &self.id)
            .field("hint", &self.hint)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl Pinned {
    /// The route class the pin decides for.
    pub fn route_class(&self) -> RouteClass {
        self.id.class
    }

    /// Whether it was pinned on `limiter` (the only one [`Limiter::admit_pinned`] takes it on).
    pub fn belongs_to(&self, limiter: &Limiter) -> bool {
        self.limiter == limiter.engine.config.id()
    }
}

impl Limiter {
    /// `key` resolved for repeated decisions: its digests computed once, and its slot looked
    /// up (if it has one yet). The pin holds no string of the key.
    pub fn pin(&self, key: &Key<'_>) -> Pinned {
        let (digest, tenant) = self.engine.hasher.digests(key);
        let generation = self.engine.config.generation();
        Pinned {
            limiter: self.engine.config.id(),
            id: Resolved {
                class: key.class,
                digest,
                tenant: match key.tenant() {
                    Some(_) => Tenant::Known(tenant),
                    None => Tenant::Anonymous,
                },
            },
            hint: AtomicUsize::new(self.table.slot_of(digest).unwrap_or(usize::MAX)),
            generation,
            config: self.engine.config.load_full(),
        }
    }

    /// [`Limiter::admit`] for a pinned key: the same decision, the same charge, the same
    /// metrics, without reading or hashing the key.
    ///
    /// # Panics
    /// If `pinned` was pinned on another limiter.
    #[inline]
    pub fn admit_pinned(&self, pinned: &Pinned) -> Decision {
        assert_eq!(
            pinned.limiter,
            self.engine.config.id(),
            "a Pinned of another limiter"
        );
        let now = self.now();
        // No reload since the pin was made: its config is the one in force (the generation is
        // what the thread's cache checks too, and read the same way, with Acquire).
        // One call of `admit_pinned_on` either way, so that it is inlined.
        let cached;
        let cfg: &Config = if self.engine.config.generation() == pinned.generation {
            &pinned.config
        } else {
            cached = self.engine.config.get();
            &cached
        };
        self.admit_pinned_on(cfg, pinned, now)
    }

    /// Always inlined: the decision's hot path (out of line, its arguments go through memory).
    #[inline(always)]
    fn admit_pinned_on(&self, cfg: &Config, pinned: &Pinned, now: u64) -> Decision {
        let id = &pinned.id;
        let unit = cfg.class(id.class).limits.unit();
        match self.charge_hinted(cfg, id, Some(&pinned.hint), unit, 1, now) {
            Ok(r) => {
                self.counted(cfg, id.class, &r);
                self.engine.admitted(cfg, id.class, &id.tenant, now);
                Decision::Admit
            }
            Err(Refusal::Decided(refused)) => {
                let shadow = cfg.class(id.class).shadow;
                self.engine
                    .conclude(cfg, shadow, id.class, id.tenant, refused, now)
                    .decision
            }
            Err(Refusal::Stale) => self.admit_pinned_again(pinned),
        }
    }

    /// [`Limiter::admit_pinned`] under the newest profile, on a fresh clock reading (a reload
    /// was published since the config the decision held).
    #[cold]
    #[inline(never)]
    fn admit_pinned_again(&self, pinned: &Pinned) -> Decision {
        self.admit_pinned_on(&self.engine.config.load(), pinned, self.now())
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use quanta::Clock;

    use crate::sync::unmodelled::Ordering;
    use crate::{Decision, Key, Limiter, Profile};

    /// A pin made before its identity had a slot learns the slot its first decision claims,
    /// so that the next decisions go to it directly.
    #[test]
    fn a_pin_learns_the_slot_its_identity_claims() {
        let profile = Profile::from_yaml(
            "name: p\nidentities: { capacity: 64 }\nroute_classes:\n  c:\n    \
             burst: { tokens: 10, per: 1s }\n    sustained: { tokens: 1000, per: 1h }\n",
        )
        .unwrap();
        let (clock, _mock) = Clock::mock();
        let l = Limiter::builder(profile).clock(clock).build().unwrap();
        let pin = l.pin(&Key::authenticated("acme", "alice", l.route_class("c").unwrap()).unwrap());
        assert_eq!(pin.hint.load(Ordering::Relaxed), usize::MAX, "no slot yet");
        assert_eq!(l.admit_pinned(&pin), Decision::Admit);
        let slot = l.table.slot_of(pin.id.digest).expect("claimed");
        assert_eq!(pin.hint.load(Ordering::Relaxed), slot);
    }
}
