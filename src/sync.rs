//! The one module that names atomics.
//!
//! Everything else imports its atomics from here, so that `loom-tests/` can swap std's types for
//! loom's and model the real code rather than a copy (crossbeam's `primitive`, tokio's
//! `src/loom`). The swap needs both the `loom` feature and `--cfg tollgate_loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg tollgate_loom" cargo test -p loom-tests --release
//! ```
//!
//! loom has no 128-bit atomic; under loom [`AtomicU128`] is a loom `Mutex<u128>`, so loom explores
//! every interleaving of the state word's loads and compare-exchanges (each one linearizable, as
//! the hardware's `lock cmpxchg16b` is), while the 64-bit atomics around it keep their real
//! orderings.

#[cfg(all(tollgate_loom, feature = "loom"))]
mod imp {
    pub(crate) use loom::sync::atomic::fence;
    pub(crate) use loom::sync::atomic::AtomicU64;
    pub(crate) use loom::sync::atomic::Ordering;

    /// A 128-bit atomic modelled by a loom mutex (see the module doc).
    #[derive(Debug)]
    pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

    impl AtomicU128 {
        pub(crate) fn new(v: u128) -> Self {
            Self(loom::sync::Mutex::new(v))
        }
        pub(crate) fn load(&self, _: Ordering) -> u128 {
            *self.0.lock().unwrap()
        }
        pub(crate) fn store(&self, v: u128, _: Ordering) {
            *self.0.lock().unwrap() = v;
        }
        pub(crate) fn compare_exchange(
            &self,
            current: u128,
            new: u128,
            _: Ordering,
            _: Ordering,
        ) -> Result<u128, u128> {
            let mut g = self.0.lock().unwrap();
            if *g == current {
                *g = new;
                Ok(current)
            } else {
                Err(*g)
            }
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

#[cfg(not(all(tollgate_loom, feature = "loom")))]
mod imp {
    /// The snapshot's seqlock-style re-check of a slot (`table/persist.rs`).
    pub(crate) use core::sync::atomic::fence;
    pub(crate) use core::sync::atomic::AtomicU64;
    pub(crate) use core::sync::atomic::Ordering;
    /// Waits in a spin loop (spinning, then yielding). Named for what it does here; the client
    /// SDK's public `Backoff` is a retry policy, a different thing.
    pub(crate) use crossbeam_utils::Backoff as SpinWait;
    /// On x86-64 this is `lock cmpxchg16b` (loads use an AVX move where the CPU has AVX);
    /// elsewhere portable-atomic picks the native instruction or a fallback.
    pub(crate) use portable_atomic::AtomicU128;
}

pub(crate) use imp::*;

/// Atomics that loom never models, even under `tollgate_loom`: statistics (the metrics ring) and
/// process-wide bookkeeping (config generations and ids), whose races decide nothing about
/// admission. Modelling them would only multiply the interleavings loom explores.
pub(crate) mod unmodelled {
    #[cfg(feature = "metrics")]
    pub(crate) use core::sync::atomic::AtomicBool;
    pub(crate) use core::sync::atomic::{AtomicU64, Ordering};
}
