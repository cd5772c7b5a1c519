//! The state word's 128-bit atomic on x86-64, inline where the CPU has `cmpxchg16b` and AVX.
//!
//! portable-atomic, unless the build enables both features (`-C target-cpu=native`, or
//! `-C target-feature=+cmpxchg16b,+avx`), reaches its 128-bit load and compare-exchange through
//! a function pointer chosen on first use, and they cannot be inlined (their bodies are
//! compiled with `#[target_feature(enable = "avx")]`). Every admit pays two such calls. Here the
//! choice is made once per process, a static byte the hot path tests with one compare, and the
//! instructions are inline assembly, which needs no target feature on the calling function.
//!
//! The instructions are portable-atomic's own (`src/imp/atomic128/x86_64.rs`, 1.15):
//!
//! * compare-exchange: `lock cmpxchg16b`, a full barrier (sequentially consistent whatever the
//!   ordering asked for; on failure it returns the word it found).
//! * load: `vmovdqa` of the 16-byte-aligned word, which Intel, AMD and Zhaoxin document as
//!   atomic on CPUs with AVX (GCC bug 104688; LLVM and Boost.Atomic rely on it too). An x86
//!   load is an acquire load, and a `SeqCst` load is a plain load in the x86 mapping (the
//!   barrier is on the `SeqCst` store side).
//! * store: `vmovdqa` to the word (an x86 store is a release store); `SeqCst` adds `mfence`
//!   after it, the x86 mapping of a sequentially consistent store.
//!
//! Why mixing with portable-atomic is sound: the inline path is taken only when the CPU has
//! `cmpxchg16b` (and AVX). portable-atomic decides from the same CPUID bits, and on such a CPU
//! it too uses only `lock cmpxchg16b` and `vmovdqa` on the word, never its lock-based fallback.
//! So every access to a word, whichever path made it, is one of these hardware atomics.

use core::sync::atomic::{AtomicU8, Ordering};

/// Not decided yet; the inline instructions; portable-atomic's.
const UNDECIDED: u8 = 0;
const INLINE: u8 = 1;
const PORTABLE: u8 = 2;

/// The process's choice, made once (a race between two first callers writes the same value).
static PATH: AtomicU8 = AtomicU8::new(UNDECIDED);

/// True if the CPU has `cmpxchg16b` and AVX (the OS saving the AVX state: std checks XCR0).
#[inline(always)]
fn inline_path() -> bool {
    if cfg!(all(target_feature = "cmpxchg16b", target_feature = "avx")) {
        return true;
    }
    // Relaxed: the byte is the whole state, and any value read is a correct one (see `decide`).
    match PATH.load(Ordering::Relaxed) {
        INLINE => true,
        PORTABLE => false,
        _ => decide(),
    }
}

#[cold]
#[inline(never)]
fn decide() -> bool {
    let inline =
        std::is_x86_feature_detected!("cmpxchg16b") && std::is_x86_feature_detected!("avx");
    // Relaxed: every thread that decides computes the same answer from CPUID.
    PATH.store(if inline { INLINE } else { PORTABLE }, Ordering::Relaxed);
    inline
}

/// A 128-bit atomic: portable-atomic's type (the storage, 16-byte aligned, and the fallback),
/// accessed inline where [`inline_path`] allows.
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct AtomicU128(portable_atomic::AtomicU128);

impl AtomicU128 {
    /// Also makes the process's choice, so that the first admit finds it made.
    pub(crate) fn new(v: u128) -> Self {
        inline_path();
        AtomicU128(portable_atomic::AtomicU128::new(v))
    }

    #[inline(always)]
    pub(crate) fn load(&self, order: Ordering) -> u128 {
        if !inline_path() {
            return self.0.load(order);
        }
        let src = self.0.as_ptr();
        let out: core::arch::x86_64::__m128i;
        // SAFETY: (1) `src` points to the word of `self`, valid for reads for `&self`'s
        // lifetime and 16-byte aligned (portable-atomic's `AtomicU128` is `align(16)`), as
        // `vmovdqa` requires; (2) the CPU has AVX, checked by `inline_path`, and on such CPUs
        // an aligned `vmovdqa` is a single atomic access (see the module doc); (3) every other
        // access to the word is atomic too (module doc), so there is no data race; (4) no
        // `readonly`/`pure` option: the block is a compiler barrier, so no later access is
        // moved above it, which together with x86's ordering of loads makes it acquire (and
        // `SeqCst` in the x86 mapping), whatever `order` asked for; (5) it writes only `out`
        // and touches no stack or flags.
        unsafe {
            core::arch::asm!(
                "vmovdqa {out}, xmmword ptr [{src}]",
                src = in(reg) src,
                out = out(xmm_reg) out,
                options(nostack, preserves_flags),
            );
            // SAFETY: `__m128i` and `u128` are both 16 plain bytes, and on little-endian x86-64
            // the register's low lane is the word's low half, as in memory.
            core::mem::transmute::<core::arch::x86_64::__m128i, u128>(out)
        }
    }

    #[inline(always)]
    pub(crate) fn store(&self, v: u128, order: Ordering) {
        if !inline_path() {
            return self.0.store(v, order);
        }
        let dst = self.0.as_ptr();
        // SAFETY: `__m128i` and `u128` are both 16 plain bytes (see `load`).
        let val = unsafe { core::mem::transmute::<u128, core::arch::x86_64::__m128i>(v) };
        // SAFETY: (1) `dst` is the word of `self`, valid for writes (an atomic is written
        // through `&self`, the cell being interior-mutable) and 16-byte aligned; (2) with AVX
        // an aligned `vmovdqa` store is atomic (module doc), and every other access is atomic,
        // so no data race; (3) a compiler barrier (no `nomem`), so no earlier access moves
        // below it, which with x86's store ordering makes it a release store; `SeqCst` adds
        // `mfence` below (the x86 mapping); (4) no stack, no flags.
        unsafe {
            core::arch::asm!(
                "vmovdqa xmmword ptr [{dst}], {val}",
                dst = in(reg) dst,
                val = in(xmm_reg) val,
                options(nostack, preserves_flags),
            );
        }
        if order == Ordering::SeqCst {
            core::sync::atomic::fence(Ordering::SeqCst);
        }
    }

    /// The orderings are ignored: `lock cmpxchg16b` is a full barrier, at least as strong as
    /// any pair of them.
    #[inline(always)]
    pub(crate) fn compare_exchange(
        &self,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128> {
        if !inline_path() {
            return self.0.compare_exchange(current, new, success, failure);
        }
        let dst = self.0.as_ptr();
        let (prev_lo, prev_hi): (u64, u64);
        let equal: u8;
        // SAFETY: (1) `dst` is the word of `self`, valid for reads and writes and 16-byte
        // aligned, as `cmpxchg16b` requires; (2) the CPU has `cmpxchg16b` (`inline_path`), and
        // with `lock` it is one atomic read-modify-write and a full barrier; every other access
        // to the word is atomic (module doc); (3) rbx, which LLVM reserves and so cannot be an
        // operand, carries the new low half only inside the block: it is swapped with r8 before
        // and restored from r8 after, so it leaves the block as it entered. The address is in
        // a named register (r11, caller-saved on every x86-64 ABI), never `in(reg)`: the
        // allocator may pick rbx for a `reg` operand, which the swap would overwrite; (4) `cmpxchg16b`
        // compares rdx:rax with the word, stores rcx:rbx if equal and loads the word into
        // rdx:rax otherwise, and sets ZF on equality, which `sete` copies (flags are clobbered:
        // no `preserves_flags`); (5) no stack is touched; (6) no `nomem`: a compiler barrier.
        unsafe {
            core::arch::asm!(
                "xchg r8, rbx",
                "lock cmpxchg16b xmmword ptr [r11]",
                "sete cl",
                "mov rbx, r8",
                in("r11") dst,
                inout("r8") new as u64 => _,
                in("rcx") (new >> 64) as u64,
                inout("rax") current as u64 => prev_lo,
                inout("rdx") (current >> 64) as u64 => prev_hi,
                lateout("cl") equal,
                options(nostack),
            );
        }
        let prev = u128::from(prev_hi) << 64 | u128::from(prev_lo);
        if equal != 0 {
            Ok(prev)
        } else {
            Err(prev)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inline path on this machine (where it has the instructions) and portable-atomic
    /// agree on every operation's result.
    #[test]
    fn inline_operations_behave_as_atomics() {
        let a = AtomicU128::new(0);
        assert_eq!(
            inline_path(),
            std::is_x86_feature_detected!("cmpxchg16b") && std::is_x86_feature_detected!("avx")
        );
        let x = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
        assert_eq!(a.load(Ordering::Acquire), 0);
        a.store(x, Ordering::Release);
        assert_eq!(a.load(Ordering::Relaxed), x);
        assert_eq!(
            a.compare_exchange(1, 2, Ordering::AcqRel, Ordering::Acquire),
            Err(x),
            "a failed exchange returns the word and changes nothing"
        );
        assert_eq!(a.load(Ordering::SeqCst), x);
        let y = !x;
        assert_eq!(
            a.compare_exchange(x, y, Ordering::AcqRel, Ordering::Acquire),
            Ok(x)
        );
        assert_eq!(a.load(Ordering::Acquire), y);
        a.store(u128::MAX, Ordering::SeqCst);
        assert_eq!(
            a.0.load(Ordering::SeqCst),
            u128::MAX,
            "portable-atomic reads it"
        );
        // Halves that differ only in one half: the compare must look at both.
        assert!(a
            .compare_exchange(u128::MAX >> 64, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_err());
        assert!(a
            .compare_exchange(u128::MAX << 64, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_err());
    }

    /// Increments from several threads by compare-exchange loops lose none (the word is one
    /// atomic, both halves at once: a carry crosses from the low half to the high half).
    #[test]
    fn concurrent_increments_are_not_lost() {
        const THREADS: u128 = 4;
        const EACH: u128 = 20_000;
        let a = AtomicU128::new(u128::from(u64::MAX) - THREADS * EACH / 2);
        let start = a.load(Ordering::Relaxed);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..EACH {
                        let mut cur = a.load(Ordering::Relaxed);
                        while let Err(actual) =
                            a.compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed)
                        {
                            cur = actual;
                        }
                    }
                });
            }
        });
        assert_eq!(a.load(Ordering::Acquire), start + THREADS * EACH);
        assert_eq!(
            a.load(Ordering::Acquire) >> 64,
            1,
            "the carry reached the high half"
        );
    }
}
