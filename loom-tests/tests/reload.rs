//! loom model of a reload racing admits, over the real code.
//!
//! What loom does and does not see here: the config lives behind `arc-swap`, which is not
//! loom-instrumented. Its load and store run with std atomics, each as one step between loom's
//! scheduling points (a loom model runs its threads one at a time on one OS thread), so loom
//! explores every placement of the swap relative to the admits' table operations, but not the
//! interleavings or memory orderings *inside* `ArcSwap` itself: the model assumes `ArcSwap` is
//! linearizable (arc-swap's own tests cover that). Under loom `ConfigCell::get` also skips the
//! per-thread config cache and loads from the `ArcSwap` directly, so the cache is not modelled
//! either; `tests/engine/stress.rs` reloads every 10 ms under real threads to cover it. The
//! config *generation* is a loom atomic: a reload's swap and its bump of the generation are two
//! steps loom can schedule between (the bump is a loom operation), and the edge from a state
//! word to the generation read after it (E9, T2) is checked. What the models prove is the
//! limiter's side: one decision reads one config snapshot and applies it whole to the state
//! word, so no decision mixes two profiles, and no word is read as counted in another epoch.
//!
//! Run: `loom-tests/run.sh` (see `admit.rs`).
#![cfg(tollgate_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread::{self, JoinHandle};
use loom_tests::limiter;
use tollgate::{BucketKind, Decision, Key, Limiter, Profile, RouteClass};

/// `n` threads that each admit `p` of tenant `t` on `class` once. Spawning is not a scheduling
/// point, and neither the reload's swap nor the mock clock is a loom operation: a model that
/// races these threads with a reload yields first, or the reload always runs before them.
fn spawn_admits(l: &Arc<Limiter>, n: usize, class: RouteClass) -> Vec<JoinHandle<Decision>> {
    (0..n)
        .map(|_| {
            let l = l.clone();
            thread::spawn(move || l.admit(&Key::authenticated("t", "p", class).unwrap()))
        })
        .collect()
}

/// What the threads of [`spawn_admits`] decided, in spawn order.
fn join_all(handles: Vec<JoinHandle<Decision>>) -> Vec<Decision> {
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Four slots, one tenant may hold them all.
fn profile(burst: &str, sustained: &str) -> Profile {
    loom_tests::profile(4, 1.0, burst, sustained)
}

/// Old limits: burst 1 a second, sustained 1 a second. New limits: burst 2 per 2 s and
/// sustained 2 per 4 s. One identity, two threads admit once each while the main thread reloads
/// from old to new. Whatever the order:
///
/// * at most two are admitted, and at least one (the first decision is always admitted);
/// * a refusal is `Throttle { 1 s, Sustained }`: the old profile on the old profile's debt. A
///   decision on a config read before the swap that meets a word the new profile wrote sees
///   the newer generation and decides again under the new profile (which admits the second
///   request: the one token owed leaves one of two in each bucket). A decision mixing the
///   profiles (the old burst bucket with the new sustained one) would answer
///   `Throttle { 1 s, Burst }`, and the old profile reading the new profile's word as its own
///   `Throttle { 3 s, Sustained }`;
/// * after the reload `profile()` is the new profile, and the identity's state carried over:
///   the number of admissions so far fixes exactly the tokens the new limits leave;
/// * both outcomes (one and two admitted) occur across the executions.
#[test]
fn reload_racing_two_admits_never_mixes_profiles() {
    let old = profile("{ tokens: 1, per: 1s }", "{ tokens: 1, per: 1s }");
    let new = profile("{ tokens: 2, per: 2s }", "{ tokens: 2, per: 4s }");
    loom::model(move || {
        let (l, _mock) = limiter(&old);
        let c = l.route_class("c").unwrap();
        let handles = spawn_admits(&l, 2, c);
        // A scheduling point first: spawning is not one and the reload has no loom operation,
        // so without it the reload would always run before both admits.
        thread::yield_now();
        l.reload(new.clone()).unwrap();
        let decisions = join_all(handles);
        let admitted = decisions.iter().filter(|d| d.is_admit()).count();
        assert!((1..=2).contains(&admitted), "{decisions:?}");
        for d in &decisions {
            if !d.is_admit() {
                assert_eq!(
                    *d,
                    Decision::Throttle {
                        retry_after: Duration::from_secs(1),
                        bucket: BucketKind::Sustained
                    },
                    "a decision mixed the two profiles: {decisions:?}"
                );
            }
        }
        assert_eq!(*l.profile(), new);
        // Under the new limits, at time 0: every admission (old or new) took one second of
        // burst credit (t = 1 s under both), so 2 - admitted burst tokens remain.
        let k = Key::authenticated("t", "p", c).unwrap();
        assert_eq!(l.remaining(&k).burst, 2 - admitted as u64, "{decisions:?}");
        SEEN.fetch_or(1 << admitted, std::sync::atomic::Ordering::Relaxed);
    });
    // The model is not vacuous: some executions ran both admits before the reload (one
    // admitted), some after (two admitted).
    assert_eq!(SEEN.load(std::sync::atomic::Ordering::Relaxed), 0b110);
}

/// Outcomes seen across the executions (bit `n`: `n` admitted).
static SEEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A word written under a newer profile is never taken for an older profile's (E9 in
/// `loom-tests/README.md`). Old: burst 2 per 2 s (t = 1 s); new: 2 per 200 ms (t = 100 ms).
/// The main thread takes one of `p`'s two tokens under the old profile (so `p`'s slot was
/// published by the main thread, not by either admit below), then reloads while two threads
/// admit `p` once each. The clock never moves and debts carry over in tokens, so exactly one
/// of the two is admitted, whatever the order. The race: one thread decides under the new
/// profile and writes `p`'s word tagged with the new epoch; the other, holding the old config,
/// reads that word, and must then see the new generation (and decide again under the new
/// profile). Seeing the old one, it would take the tag for an epoch four reloads old, read
/// the 200 ms owed as 0.2 of the old profile's tokens, and admit a third request. What makes
/// it see the new generation: the writer read (or published) it before its CAS, and the CAS's
/// Release hands that on to the reader's Acquire load of the word. The slot's claim was the
/// main thread's, so no release sequence of the writer's own publish covers for it.
#[test]
fn a_word_of_a_newer_profile_is_never_read_as_an_older_ones() {
    let old = profile("{ tokens: 2, per: 2s }", "{ tokens: 100, per: 1s }");
    let new = profile("{ tokens: 2, per: 200ms }", "{ tokens: 100, per: 1s }");
    loom::model(move || {
        let (l, _mock) = limiter(&old);
        let c = l.route_class("c").unwrap();
        assert!(l
            .admit(&Key::authenticated("t", "p", c).unwrap())
            .is_admit());
        let handles = spawn_admits(&l, 2, c);
        thread::yield_now();
        l.reload(new.clone()).unwrap();
        let decisions = join_all(handles);
        assert_eq!(
            decisions.iter().filter(|d| d.is_admit()).count(),
            1,
            "a bucket of 2 with 1 left: {decisions:?}"
        );
    });
}

/// Reloads racing admits never forgive a debt (a reload to a smaller bucket that clamped the
/// debt would grant it again on the way back). Burst 2 per 2 s; the main thread empties it at
/// time 0, then two threads admit once each while the main thread reloads to 1 per 1 s (the same
/// rate, a smaller bucket) and back. The clock never moves, so whatever the interleaving,
/// nothing more is admitted: the largest bucket holds 2. Under the old clamp, a refusal under
/// the small bucket wrote the debt down to 1 s and an admit after the way back got a token.
#[test]
fn reloads_racing_admits_never_forgive_debt() {
    let big = profile("{ tokens: 2, per: 2s }", "{ tokens: 100, per: 1s }");
    let small = profile("{ tokens: 1, per: 1s }", "{ tokens: 100, per: 1s }");
    loom::model(move || {
        let (l, _mock) = limiter(&big);
        let c = l.route_class("c").unwrap();
        let k = Key::authenticated("t", "p", c).unwrap();
        assert!(l.admit(&k).is_admit() && l.admit(&k).is_admit());
        let handles = spawn_admits(&l, 2, c);
        thread::yield_now();
        l.reload(small.clone()).unwrap();
        thread::yield_now();
        l.reload(big.clone()).unwrap();
        let decisions = join_all(handles);
        assert!(
            decisions.iter().all(|d| !d.is_admit()),
            "a reload forgave debt: {decisions:?}"
        );
        assert!(!l.admit(&k).is_admit());
        assert_eq!(l.remaining(&k).burst, 0);
    });
}

/// The reload's re-tag of the table racing an admit (the state word keeps the profile epoch mod
/// 4, so the fourth reload converts the words still tagged with epoch 0 before the tag means
/// epoch 4). A = burst 2 per 2 s (t = 1 s), B = 4 per 1 s (t = 250 ms), C = 1 per 500 ms. At
/// time 0 (the clock never moves) the identity owes 2 tokens under A, in a word tagged 0; the
/// main thread reloads B, A, B (epochs 1 to 3: nothing touches the word), then C (epoch 4: its
/// walk converts the word to epoch 3 first) while another thread admits once. Under B the 2
/// tokens owed leave 2 of 4, so that admit is admitted if it decides under B (converting the
/// word itself, or after the walk did) and refused under C. Whatever the order, the debt
/// afterwards is exactly `2 + admitted` tokens, under C `(2 + admitted) * 500 ms`, and the next
/// request waits that long (`debt + t - tau`, with `t = tau`). A second identity, emptied
/// alike and not admitted meanwhile, is left to the walk alone: it owes exactly 2 tokens of C
/// (a wait of 1 s); without the walk C would read its word tagged 0 as its own, 2 s owed.
/// Both outcomes of the race occur (asserted below).
#[test]
fn retag_racing_an_admit_keeps_the_debt_in_tokens() {
    let a = profile("{ tokens: 2, per: 2s }", "{ tokens: 100, per: 1s }");
    let b = profile("{ tokens: 4, per: 1s }", "{ tokens: 100, per: 1s }");
    let c = profile("{ tokens: 1, per: 500ms }", "{ tokens: 100, per: 1s }");
    loom::model(move || {
        let (l, _mock) = limiter(&a);
        let class = l.route_class("c").unwrap();
        let k = Key::authenticated("t", "p", class).unwrap();
        let idle = Key::authenticated("t", "q", class).unwrap();
        assert!(l.admit(&k).is_admit() && l.admit(&k).is_admit());
        assert!(l.admit(&idle).is_admit() && l.admit(&idle).is_admit());
        for p in [&b, &a, &b] {
            l.reload(p.clone()).unwrap();
        }
        let admit = spawn_admits(&l, 1, class);
        // A scheduling point first (see above), then the reload that walks the table.
        thread::yield_now();
        l.reload(c.clone()).unwrap();
        let admitted = u64::from(join_all(admit)[0].is_admit());
        assert_eq!(
            l.admit(&k),
            Decision::Throttle {
                retry_after: Duration::from_millis(500 * (2 + admitted)),
                bucket: BucketKind::Burst
            },
            "{admitted} admitted during the reloads"
        );
        assert_eq!(
            l.admit(&idle),
            Decision::Throttle {
                retry_after: Duration::from_secs(1),
                bucket: BucketKind::Burst
            },
            "the walk converted the idle identity's word"
        );
        RETAG_SEEN.fetch_or(1 << admitted, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(RETAG_SEEN.load(std::sync::atomic::Ordering::Relaxed), 0b11);
}

/// A word the reload's walk re-tagged is never read as an older epoch's (T2 in
/// `loom-tests/README.md`). A = burst 2 per 2 s (t = 1 s), B = 2 per 200 ms (t = 100 ms). The
/// main thread takes one of `p`'s tokens under A (a word tagged 0), spawns a thread that admits
/// `p` once, and reloads B four times (epochs 1 to 4); the fourth's walk re-tags `p`'s word to
/// epoch 3 (one token: 100 ms). The admit may hold A's config all along (epoch 0) and read the
/// re-tagged word: it must then see a generation past 0 and decide again under B. Seeing 0, it
/// would read the tag 3 as an epoch older than its own, take the 100 ms as owed under A (0.1
/// of a token), and leave a debt of 1.1 s in a word tagged 0, which epoch 4 reads as its own
/// (11 tokens). What makes it see the new generation: the main thread bumped it before the
/// walk, and the walk's CAS Release hands that on to the admit's Acquire load of the word.
/// Whatever the order, the admit is admitted (one token is left under either profile) and then
/// `p` owes 2 of B's tokens: the next request waits 100 ms.
#[test]
fn a_word_the_walk_retagged_is_never_read_as_an_older_epochs() {
    let a = profile("{ tokens: 2, per: 2s }", "{ tokens: 100, per: 1s }");
    let b = profile("{ tokens: 2, per: 200ms }", "{ tokens: 100, per: 1s }");
    loom::model(move || {
        let (l, _mock) = limiter(&a);
        let class = l.route_class("c").unwrap();
        let k = Key::authenticated("t", "p", class).unwrap();
        assert!(l.admit(&k).is_admit());
        let admit = spawn_admits(&l, 1, class);
        thread::yield_now();
        for _ in 0..4 {
            l.reload(b.clone()).unwrap();
        }
        assert_eq!(join_all(admit), [Decision::Admit]);
        assert_eq!(
            l.admit(&k),
            Decision::Throttle {
                retry_after: Duration::from_millis(100),
                bucket: BucketKind::Burst
            },
            "p owes 2 tokens of B"
        );
    });
}

/// Outcomes seen across the executions of the re-tag model (bit `n`: `n` admitted).
static RETAG_SEEN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
