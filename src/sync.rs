//! The one module that names atomics.
//!
//! Everything else imports its atomics from here, so that `loom-tests/` can swap std's types for
//! loom's and model the real code rather than a copy (crossbeam's `primitive`, tokio's
//! `src/loom`). One cfg switches: `--cfg tollgate_loom`, which also brings in the `loom`
//! dependency (a `[target.'cfg(tollgate_loom)'.dependencies]` entry, as tokio does):
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom -C debug-assertions=on" cargo test -p loom-tests --release
//! ```
//!
//! # The state word under loom
//!
//! loom has no 128-bit atomic. Under loom [`AtomicU128`] is a loom `AtomicPtr` to immutable,
//! *interned* `u128`s: every value has exactly one address (a process-wide map, never freed),
//! so two pointers are equal exactly when the values are. A load, store or compare-exchange of
//! the word is then one load, store or compare-exchange of the pointer, with the caller's
//! orderings unchanged; the pointee is written once, before its address is first returned, and
//! never again, so reading it adds no synchronisation of its own. loom therefore sees the word's
//! real modification order and its real happens-before edges: a Relaxed load may return an
//! older word, a publish weakened to Relaxed does not carry the digest stores with it, and a
//! compare-exchange succeeds exactly when the word (not merely some earlier word with the same
//! value) is the latest. (A mutex, the earlier model, synchronised every access, so no ordering
//! of the word was ever checked.)
//!
//! What this cannot show: that the hardware's 16-byte atomics are atomic (`cmpxchg16b` and the
//! AVX load, inline or portable-atomic's, or its lock-based fallback elsewhere, are taken on
//! trust); anything loom itself does not model (`SeqCst` is modelled no stronger than
//! `AcqRel`; loads never read from stores that are later in program order, the "load
//! buffering" outcomes C++ allows but x86 and Arm do not produce); and interleavings beyond
//! `LOOM_MAX_PREEMPTIONS`.

#[cfg(tollgate_loom)]
mod imp {
    pub(crate) use loom::sync::atomic::fence;
    use loom::sync::atomic::AtomicPtr;
    pub(crate) use loom::sync::atomic::AtomicU64;
    pub(crate) use loom::sync::atomic::Ordering;

    /// A 128-bit atomic modelled by a loom atomic pointer to interned values (see the module
    /// doc).
    pub(crate) struct AtomicU128(AtomicPtr<u128>);

    /// The one address of `v`: a leaked box, created on first use and never written or freed
    /// again. The map is a std mutex, not a loom one: it is bookkeeping of the model, held for
    /// no loom operation, so it adds no scheduling point and no happens-before edge loom sees.
    fn intern(v: u128) -> *mut u128 {
        use std::collections::HashMap;
        use std::sync::{Mutex, OnceLock};
        static VALUES: OnceLock<Mutex<HashMap<u128, usize>>> = OnceLock::new();
        let mut values = VALUES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *values
            .entry(v)
            .or_insert_with(|| Box::into_raw(Box::new(v)) as usize) as *mut u128
    }

    /// The value at an interned address.
    fn value(p: *mut u128) -> u128 {
        // SAFETY: every pointer the atomic holds came from `intern`: a leaked box that lives for
        // the rest of the process, written only before its address was returned, never after.
        unsafe { *p }
    }

    impl AtomicU128 {
        pub(crate) fn new(v: u128) -> Self {
            Self(AtomicPtr::new(intern(v)))
        }
        pub(crate) fn load(&self, o: Ordering) -> u128 {
            value(self.0.load(o))
        }
        pub(crate) fn store(&self, v: u128, o: Ordering) {
            self.0.store(intern(v), o)
        }
        pub(crate) fn compare_exchange(
            &self,
            current: u128,
            new: u128,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u128, u128> {
            self.0
                .compare_exchange(intern(current), intern(new), success, failure)
                .map(value)
                .map_err(value)
        }
    }

    impl core::fmt::Debug for AtomicU128 {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            // No load: a loom load is a model step, and Debug must not add one.
            f.write_str("AtomicU128(..)")
        }
    }

    /// Lets another thread run; loom needs an explicit yield in every spin loop.
    pub(crate) struct SpinWait;
    impl SpinWait {
        pub(crate) fn new() -> Self {
            SpinWait
        }
        pub(crate) fn snooze(&self) {
            loom::thread::yield_now();
        }
    }
}

#[cfg(not(tollgate_loom))]
mod imp {
    /// On x86-64, `lock cmpxchg16b` and an AVX load, inline where the CPU has both (decided
    /// once per process: `inline_u128.rs`); elsewhere, and under Miri (no inline assembly),
    /// portable-atomic picks the native instruction or a fallback.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    pub(crate) use super::inline_u128::AtomicU128;
    /// The snapshot's seqlock-style re-check of a slot (`table/persist.rs`).
    pub(crate) use core::sync::atomic::fence;
    pub(crate) use core::sync::atomic::AtomicU64;
    pub(crate) use core::sync::atomic::Ordering;
    /// Waits in a spin loop (spinning, then yielding). Named for what it does here; the client
    /// SDK's public `Backoff` is a retry policy, a different thing.
    pub(crate) use crossbeam_utils::Backoff as SpinWait;
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    pub(crate) use portable_atomic::AtomicU128;
}

#[cfg(all(target_arch = "x86_64", not(miri), not(tollgate_loom)))]
mod inline_u128;

pub(crate) use imp::*;

/// Atomics that loom never models, even under `tollgate_loom`: statistics (the metrics ring) and
/// process-wide bookkeeping (the config cells' and layers' ids, the coarse clock, the Redis clock
/// offset and script state, the snapshot's temporary file names, a pinned identity's slot hint,
/// which is checked against the slot's own word before it is used). Their races decide nothing
/// about admission, and modelling them would only multiply the interleavings loom explores.
/// (The config generation is modelled: a decision that reads a word tagged with a newer epoch
/// than its config tells it from an older epoch's by its load of the generation, E9 and T2 in
/// `loom-tests/README.md`.)
pub(crate) mod unmodelled {
    #[cfg(any(feature = "metrics", feature = "redis"))]
    pub(crate) use core::sync::atomic::AtomicBool;
    pub(crate) use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
}
