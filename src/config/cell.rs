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

/// One thread's configs, most recently used first: what every read looks at. Plain data with
/// no destructor, so that reaching it is one thread-local address (a thread-local with a
/// destructor is checked for being alive at every access, twice a decision).
#[cfg(not(tollgate_loom))]
struct Front {
    /// True while a cached [`ConfigRef`] of this thread is alive: the cache is then neither
    /// changed nor handed out again (a nested read, from a metrics callback, takes the swap).
    busy: bool,
    /// A cell's id, or 0 (no cell has it): an empty place.
    ids: [u64; CACHED],
    generations: [u64; CACHED],
    /// Where `ids[i]` is not 0: the config of `Owned`'s place `i` (see `Owned`).
    configs: [*const Config; CACHED],
}

/// What keeps `Front`'s configs alive: at every place whose id is not 0, the `Arc` that
/// `Front::configs` points into. Its drop (the thread's exit) empties `Front` first, so that
/// no read after it finds a config that is gone.
#[cfg(not(tollgate_loom))]
struct Owned([Option<Arc<Config>>; CACHED]);

#[cfg(not(tollgate_loom))]
impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: `Front` is thread-local, and no reference to it is alive: one is made only
        // inside `get`, `refreshed` and `ConfigRef::drop`, none of which runs foreign code
        // (such as this destructor) while it holds it.
        FRONT.with(|front| unsafe { (*front.get()).ids = [0; CACHED] });
    }
}

#[cfg(not(tollgate_loom))]
std::thread_local! {
    /// Reached only inside `ConfigCell::get`, `ConfigCell::refreshed` and `ConfigRef::drop`,
    /// which run no foreign code while they hold a reference to it.
    static FRONT: core::cell::UnsafeCell<Front> = const {
        core::cell::UnsafeCell::new(Front {
            busy: false,
            ids: [0; CACHED],
            generations: [0; CACHED],
            configs: [core::ptr::null(); CACHED],
        })
    };
    /// Reached only inside `ConfigCell::refreshed`, with `FRONT`.
    static OWNED: core::cell::UnsafeCell<Owned> =
        const { core::cell::UnsafeCell::new(Owned([None, None, None, None])) };
}

/// A read of the current config: from this thread's cache, or from the swap. One pointer
/// either way, so that reading through it is one load, with no branch on where it came from.
pub(crate) struct ConfigRef<'a> {
    /// Into an `Arc<Config>` of this thread's cache (`swapped` is `None`), which stays put
    /// while the cache is busy, or into `swapped`'s. The raw pointer also keeps the guard on
    /// its thread (`!Send`).
    config: *const Config,
    /// The swap's snapshot, when the cache was not used; dropped by hand, so that the drop of
    /// a cached guard is one store, inlined.
    swapped: core::mem::ManuallyDrop<Option<arc_swap::Guard<Arc<Config>>>>,
    _cell: core::marker::PhantomData<&'a ConfigCell>,
}

impl core::ops::Deref for ConfigRef<'_> {
    type Target = Config;
    #[inline]
    fn deref(&self) -> &Config {
        // SAFETY: the pointer came from an `Arc<Config>` that outlives the guard. Either it is
        // `swapped`'s (moving a guard does not move the config it points to), or it is held in
        // this thread's cache, which drops or replaces its `Arc`s only in `refresh`, which runs
        // only while the cache is not busy, and at the thread's exit, after every guard (a
        // guard lives within one call of the crate, never in a thread-local); the cache stays
        // busy until this guard is dropped, and the guard cannot leave the thread (`*const`
        // is `!Send`). So the `Config` is alive and unchanged for the guard's life.
        unsafe { &*self.config }
    }
}

impl Drop for ConfigRef<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `swapped` is taken once, here, and not used after.
        match unsafe { core::mem::ManuallyDrop::take(&mut self.swapped) } {
            Some(guard) => release(guard),
            #[cfg(not(tollgate_loom))]
            None => {
                FRONT.with(|front| {
                    // SAFETY: no other reference to this thread's cache exists: `get` holds
                    // one only while running no foreign code, and this guard holds only a
                    // pointer to a config. The cache is thread-local, so no other thread
                    // reaches it.
                    unsafe { (*front.get()).busy = false }
                });
            }
            #[cfg(tollgate_loom)]
            None => {}
        }
    }
}

/// Drops a guard of the swap, out of line: the rare case.
#[cold]
#[inline(never)]
fn release(guard: arc_swap::Guard<Arc<Config>>) {
    drop(guard);
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
            // Acquire: pairs with the Release bump in `store`, after the new config.
            let generation = self.generation.load(Ordering::Acquire);
            let lent = FRONT.with(|front| {
                // SAFETY: no other reference to this thread's cache exists (see `Drop`), and
                // none is made while this one lives. The cache is thread-local.
                let front = unsafe { &mut *front.get() };
                // A place whose id is not 0 points to a config that `Owned` keeps alive.
                if front.ids[0] == self.id && front.generations[0] == generation && !front.busy {
                    front.busy = true;
                    return Ok(front.configs[0]);
                }
                Err(front.busy)
            });
            match lent {
                Ok(config) => return self.cached(config),
                Err(false) => return self.refreshed(generation),
                // Busy: a nested read on this thread.
                Err(true) => {}
            }
        }
        self.swapped()
    }

    /// A guard on a config lent out of this thread's cache (now busy).
    #[cfg(not(tollgate_loom))]
    #[inline]
    fn cached(&self, config: *const Config) -> ConfigRef<'_> {
        ConfigRef {
            config,
            swapped: core::mem::ManuallyDrop::new(None),
            _cell: core::marker::PhantomData,
        }
    }

    /// A guard on the swap's config.
    #[inline]
    fn swapped(&self) -> ConfigRef<'_> {
        let guard = self.current.load();
        ConfigRef {
            config: Arc::as_ptr(&guard),
            swapped: core::mem::ManuallyDrop::new(Some(guard)),
            _cell: core::marker::PhantomData,
        }
    }

    /// [`ConfigCell::get`] when this thread's cache, not busy, does not hold the current
    /// config at its front: refreshed, then lent out.
    #[cold]
    #[inline(never)]
    #[cfg(not(tollgate_loom))]
    fn refreshed(&self, generation: u64) -> ConfigRef<'_> {
        // `Err` at the thread's exit, once its configs are released: read from the swap.
        let lent = OWNED.try_with(|owned| {
            FRONT.with(|front| {
                // SAFETY: as in `get`, for both (nothing here runs foreign code: the config a
                // refresh evicts is dropped after the references are gone).
                let (front, owned) = unsafe { (&mut *front.get(), &mut *owned.get()) };
                let evicted = self.refresh(front, owned, generation);
                front.busy = true;
                (front.configs[0], evicted)
            })
        });
        match lent {
            Ok((config, evicted)) => {
                drop(evicted);
                self.cached(config)
            }
            Err(_) => self.swapped(),
        }
    }

    /// Moves this limiter's entry to the front of the thread's cache, fresh; returns the
    /// config it replaced, for the caller to drop once it holds no reference to the cache
    /// (dropping a config runs its fields' destructors, foreign code).
    #[cold]
    #[cfg(not(tollgate_loom))]
    fn refresh(
        &self,
        front: &mut Front,
        owned: &mut Owned,
        generation: u64,
    ) -> Option<Arc<Config>> {
        let i = front
            .ids
            .iter()
            .position(|&id| id == self.id)
            .unwrap_or(CACHED - 1);
        front.ids[..=i].rotate_right(1);
        front.generations[..=i].rotate_right(1);
        front.configs[..=i].rotate_right(1);
        owned.0[..=i].rotate_right(1);
        if front.ids[0] == self.id && front.generations[0] == generation {
            return None;
        }
        let config = self.current.load_full();
        front.ids[0] = self.id;
        front.generations[0] = generation;
        front.configs[0] = Arc::as_ptr(&config);
        owned.0[0].replace(config)
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::profile::Profile;

    fn cell() -> ConfigCell {
        let profile = Profile::from_yaml(
            "name: c\nidentities: { capacity: 64 }\nroute_classes:\n  c:\n    \
             burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 10, per: 1h }\n",
        )
        .unwrap();
        let hasher = crate::config::key_hasher(&profile, b"c");
        ConfigCell::new(Config::new(profile, &hasher, false))
    }

    /// A read lent out of the thread's cache gives it back when dropped: the next read is
    /// lent from the cache again, not from the swap.
    #[test]
    fn a_dropped_read_gives_the_cache_back() {
        let cell = cell();
        drop(cell.get());
        for _ in 0..2 {
            let read = cell.get();
            assert!(read.swapped.is_none(), "lent from the cache");
        }
    }

    /// A read inside a read (the outer one holds the cache) is served from the swap: were it
    /// lent the cache, its drop would free the cache while the outer read still points into
    /// it, and a refresh could then drop the outer read's config.
    #[test]
    fn a_read_inside_a_read_comes_from_the_swap() {
        let cell = cell();
        drop(cell.get());
        let outer = cell.get();
        assert!(outer.swapped.is_none(), "lent from the cache");
        let inner = cell.get();
        assert!(inner.swapped.is_some(), "the cache is busy");
        drop(inner);
        assert!(
            cell.get().swapped.is_some(),
            "still busy while the outer read lives"
        );
        drop(outer);
        assert!(cell.get().swapped.is_none(), "given back");
    }
}
