//! The cell that holds the current [`Config`]: swapped whole on reload, read on the hot path
//! through a per-thread cache.

use std::sync::Arc;

use super::Config;
use crate::sync::{unmodelled, AtomicU64, Ordering};

/// Holds the current [`Config`] and hands it to readers cheaply.
///
/// `ArcSwap::load` costs a few nanoseconds of fences per call, a tenth of an admit. Each thread
/// instead keeps the configs of the last few limiters it used, tagged with the generation they
/// were read at; a read is then two thread-local accesses and one load of the generation, and
/// only a reload (which bumps the generation) sends threads back to the `ArcSwap`. A thread's
/// cache holds at most [`CACHED`] old configs alive, until it next uses those limiters or exits.
///
/// Readers get a guard ([`ConfigRef`]) rather than running a closure: a decision returned out
/// of a closure through the thread-local machinery was copied twice, and each copy stalled on
/// store-to-load forwarding, a large share of an admit.
pub(crate) struct ConfigCell {
    current: arc_swap::ArcSwap<Config>,
    generation: AtomicU64,
    /// Process-unique, so that a new limiter at a freed address never hits another's cache.
    #[cfg_attr(tollgate_loom, allow(dead_code))]
    id: u64,
}

/// Limiters whose configs one thread keeps.
#[cfg(not(tollgate_loom))]
const CACHED: usize = 4;

/// One thread's configs, most recently used first.
#[cfg(not(tollgate_loom))]
struct Cache {
    ids: [u64; CACHED],
    generations: [u64; CACHED],
    configs: [Option<Arc<Config>>; CACHED],
}

#[cfg(not(tollgate_loom))]
std::thread_local! {
    /// Mutated only by the holder of `BUSY` on this thread (see `ConfigCell::get`).
    static CACHE: core::cell::UnsafeCell<Cache> = const {
        core::cell::UnsafeCell::new(Cache {
            ids: [0; CACHED],
            generations: [0; CACHED],
            configs: [None, None, None, None],
        })
    };
    /// True while a `ConfigRef::Cached` of this thread is alive: the cache is then neither
    /// changed nor handed out again (a nested read, from a metrics callback, takes the swap).
    static BUSY: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// A read of the current config: from this thread's cache, or from the swap.
pub(crate) enum ConfigRef<'a> {
    /// Points into an `Arc<Config>` of this thread's cache, which stays put while `BUSY`.
    /// The raw pointer also keeps the guard on its thread (`!Send`).
    #[cfg(not(tollgate_loom))]
    Cached(*const Config, core::marker::PhantomData<&'a ConfigCell>),
    /// A plain `ArcSwap` snapshot.
    Swapped(
        arc_swap::Guard<Arc<Config>>,
        core::marker::PhantomData<&'a ConfigCell>,
    ),
}

impl core::ops::Deref for ConfigRef<'_> {
    type Target = Config;
    #[inline]
    fn deref(&self) -> &Config {
        match self {
            #[cfg(not(tollgate_loom))]
            // SAFETY: (1) the pointer came from an `Arc<Config>` held in this thread's cache;
            // (2) that `Arc` is dropped or replaced only by `refresh`, which runs only with
            // `BUSY` taken, and `BUSY` stays taken until this guard is dropped; (3) the guard
            // cannot leave the thread (`*const` is `!Send`), and the cache outlives any guard
            // on its thread. So the `Config` is alive and unchanged for the guard's life.
            ConfigRef::Cached(ptr, _) => unsafe { &**ptr },
            ConfigRef::Swapped(guard, _) => guard,
        }
    }
}

#[cfg(not(tollgate_loom))]
impl Drop for ConfigRef<'_> {
    #[inline]
    fn drop(&mut self) {
        if let ConfigRef::Cached(..) = self {
            // During thread teardown there is nothing left to release.
            let _ = BUSY.try_with(|b| b.set(false));
        }
    }
}

impl ConfigCell {
    pub(crate) fn new(config: Config) -> ConfigCell {
        static NEXT_ID: unmodelled::AtomicU64 = unmodelled::AtomicU64::new(1);
        ConfigCell {
            current: arc_swap::ArcSwap::from_pointee(config),
            generation: AtomicU64::new(0),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// A snapshot to read (off the hot path).
    pub(crate) fn load(&self) -> arc_swap::Guard<Arc<Config>> {
        self.current.load()
    }

    /// A snapshot to keep, across an `await` for instance.
    #[cfg(feature = "redis")]
    pub(crate) fn load_full(&self) -> Arc<Config> {
        self.current.load_full()
    }

    /// Installs a new config (the caller serialises reloads, and numbers the config's `epoch`
    /// as the generation after this store).
    pub(crate) fn store(&self, config: Config) {
        let epoch = config.epoch;
        self.swap_in(config);
        self.publish(epoch);
    }

    /// The first half of [`ConfigCell::store`]: the new config is readable from the swap, its
    /// generation not yet published.
    pub(crate) fn swap_in(&self, config: Config) {
        debug_assert_eq!(config.epoch, self.generation.load(Ordering::Relaxed) + 1);
        self.current.store(Arc::new(config));
    }

    /// Makes `epoch`'s generation the published one, unless it is already. The reload does,
    /// after the swap; so does a decision that read the new config from the swap before that
    /// (between the reload's two halves), before it writes a word tagged with the new epoch: a
    /// decision holding the old config that reads the word must then see the new generation
    /// in `latest` (and retry), not take the tag for an epoch four reloads old. Release: a
    /// reader that sees the new generation then loads the new config (the caller loaded it
    /// first: the reload stored it, a decision read it from the swap). SeqCst: against a
    /// claim's SeqCst CAS and load of `latest` (see `table/retag.rs`).
    pub(crate) fn publish(&self, epoch: u64) {
        self.generation.fetch_max(epoch, Ordering::SeqCst);
    }

    /// The generation, read after a state word, by a decision that holds a config of epoch
    /// `e`: a value above `e` means a newer profile was published, and the word may be counted
    /// in it (its writer read that generation before writing it; Acquire on the word and here
    /// make that visible). SeqCst: for the claim, see `table/retag.rs`; on x86-64 and AArch64
    /// a SeqCst load is the same instruction as an Acquire one.
    #[inline]
    pub(crate) fn latest(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Bumped by every `store`: a reader that saw a value may keep what it derived from the
    /// config until the value changes (Acquire: pairs with the Release bump in `store`).
    /// This cell's id: one limiter's (a pinned identity names the limiter it was pinned on).
    #[inline]
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current config, for the hot path.
    #[inline]
    pub(crate) fn get(&self) -> ConfigRef<'_> {
        #[cfg(not(tollgate_loom))]
        {
            // Take BUSY; if it was taken (a nested read on this thread), use the swap.
            if let Ok(false) = BUSY.try_with(|b| b.replace(true)) {
                // Acquire: pairs with the Release bump in `store`, after the new config.
                let generation = self.generation.load(Ordering::Acquire);
                let cached = CACHE.try_with(|cache| {
                    // SAFETY: we hold BUSY, so no other reference into the cache exists on
                    // this thread (no live `ConfigRef::Cached`, no `get` in progress), and the
                    // cache is thread-local, so no other thread can reach it.
                    let cache = unsafe { &mut *cache.get() };
                    if cache.ids[0] != self.id || cache.generations[0] != generation {
                        self.refresh(cache, generation);
                    }
                    cache.configs[0].as_ref().map(Arc::as_ptr)
                });
                if let Ok(Some(ptr)) = cached {
                    return ConfigRef::Cached(ptr, core::marker::PhantomData);
                }
                let _ = BUSY.try_with(|b| b.set(false));
            }
        }
        ConfigRef::Swapped(self.current.load(), core::marker::PhantomData)
    }

    /// Moves this limiter's entry to the front of the thread's cache, fresh.
    #[cold]
    #[cfg(not(tollgate_loom))]
    fn refresh(&self, cache: &mut Cache, generation: u64) {
        let i = cache
            .ids
            .iter()
            .position(|&id| id == self.id)
            .unwrap_or(CACHED - 1);
        cache.ids[..=i].rotate_right(1);
        cache.generations[..=i].rotate_right(1);
        cache.configs[..=i].rotate_right(1);
        let stale = cache.ids[0] != self.id || cache.generations[0] != generation;
        if stale || cache.configs[0].is_none() {
            cache.ids[0] = self.id;
            cache.generations[0] = generation;
            cache.configs[0] = Some(self.current.load_full());
        }
    }
}
