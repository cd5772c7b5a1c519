//! The state word's ABA: a claim that scanned one occupant's word and whose CAS to `BUSY`
//! succeeds against a *later* occupant's identical word, because the 6-bit generation wrapped
//! (64 claims of the slot between the scan and the CAS) and every claim left the same TATs.
//! Only the Acquire of that CAS (E4 in `loom-tests/README.md`) then reaches the later
//! occupant's partition store: the scan's Acquire load (E3) read the earlier occupant's.
//!
//! A *bounded* check: loom explores the model's first [`EXECUTIONS`] executions (its order is
//! depth-first and deterministic, so every run explores the same ones), not all of them. A
//! thread making 64 claims is thousands of loom operations, and two preemptions placed among
//! them are more executions than CI can afford: a run to the end was stopped unfinished after
//! 16,600 executions (8 minutes on 2 shared cores), none failing. Within the bound, weakening
//! E4 fails the model (at about execution 1,100); `loom-tests/README.md` has the experiment.
//! Run: `loom-tests/run.sh` (see `admit.rs`).
#![cfg(tollgate_loom)]

use loom::thread;
use loom_tests::{bucket, key, limiter, SUSTAINED, TABLE_FULL};
use tollgate::{Decision, Limiter, Refused};

/// Claims of the slot between the scan and the CAS that bring its word back: the generation's
/// period (`GEN` is 6 bits in `src/table/state.rs`).
const WRAP: usize = 64;

/// A cost above the burst (2 tokens): refused `Exceeds` before the table is touched.
const TOO_MANY: u32 = 3;

/// The new identity `who` of `tenant` claims the slot at 0 s and gives its token back at once:
/// `admit_all` of one token, then of a cost no bucket holds, which refunds the first charge
/// exactly. The slot is left with both TATs at 0 (full, so reclaimable at 0 s) and a new
/// generation, the word of every such claim but for that generation. `TableFull` if another
/// identity holds the slot live.
fn claim_and_give_back(l: &Limiter, tenant: &'static str, who: &str) -> Result<(), Refused> {
    loom_tests::charge_and_refund(l, tenant, who, 1, TOO_MANY)
}

/// The executions the model explores (see the module doc).
const EXECUTIONS: usize = 4_000;

/// Two preemptions whatever `LOOM_MAX_PREEMPTIONS` says (CI's value, fixed here so that the
/// executions explored are the same ones in every environment), room in an execution's path for the
/// thousands of loom operations of 64 claims (each is a branch of the path; loom's default
/// bound is 1,000), and the first [`EXECUTIONS`] executions only (loom checks the bound every
/// `checkpoint_interval` executions).
fn bounded() -> loom::model::Builder {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.max_branches = 20_000;
    model.checkpoint_interval = 1;
    model.max_permutations = Some(EXECUTIONS);
    model
}

/// A `peek` of `who` (the slot's first occupant): loads of the slot's word, nothing stored.
/// Called by the main thread after it yielded to `y` and before it spawns `t`: these loads race
/// with `y`'s stores to the word (its CAS to `BUSY` first), and a race is where loom's partial
/// order reduction tries another thread, here the main thread, which then spawns `t` right
/// before that CAS. The spawn itself races with nothing.
fn peek_the_slot(l: &Limiter, tenant: &'static str, who: &'static str) {
    // Any answer: `x0` may have been replaced meanwhile.
    let _ = l.peek(&key(l, tenant, who));
}

/// True if [`claim_and_give_back`] claimed the slot and gave its token back, false if it was
/// refused `TableFull`; any other answer fails the model.
fn gave_back(r: Result<(), Refused>) -> bool {
    match r {
        Err(Refused {
            index: 1,
            decision: Decision::Exceeds { .. },
        }) => true,
        Err(Refused {
            index: 0,
            decision: TABLE_FULL,
        }) => false,
        other => panic!("a claim got {other:?}"),
    }
}

/// One slot, each tenant's cap one slot (`tenant_share: 1`), the clock frozen at 0 s. `x0` of
/// tenant `A` holds the slot, full. Thread `y` admits `C`'s new `y`, which reclaims `A`'s
/// slot: reserve one of `C`'s, CAS the word to `BUSY`, read the old occupant's partition and
/// give that partition its slot back. Meanwhile thread `t` claims the slot 64 times for new
/// identities of `B` (the 63rd of `A`), each leaving the slot full with the next generation:
/// after the 64th the word is `x0`'s again, bit for bit, but the slot is `B`'s.
///
/// The schedule that matters: `y` scans and reads `x0`'s word (and `A` as the
/// partition hint), `t` runs all 64 claims, `y`'s CAS succeeds. `y` must then read the
/// partition `B` and give `B` its slot back; only the CAS's Acquire, reading `t`'s last store,
/// makes that store of `B` visible. Read stale (`A`, the 63rd claim's), `y` gives back a slot
/// `A` does not hold (`slot_counts.rs`'s debug assertion) and `B` stays counted for a slot it lost.
///
/// Afterwards, whatever the interleaving: `y` is admitted or refused `TableFull` (it found the
/// slot busy or live), every claim of `t` gave its token back until one was refused `TableFull`
/// (`y` held the slot), and at 10 s each of `A`, `B` and `C` claims the slot for a new identity
/// in turn: none is counted for a slot it does not hold.
///
/// `t` is spawned only after the main thread has yielded to `y` (and peeked at the slot, see
/// [`peek_the_slot`]), so loom's depth-first order reaches the schedule early: `y` preempted
/// before its CAS, `t` running all its claims, `y` resumed. A first version that spawned both
/// at once (with one preemption, and `t` going on after a refusal) was unfinished after 496,000
/// executions, and with E4 weakened had not failed after 208,000; and with one preemption
/// instead of two loom never runs `t` there (its preemption-bounded search refuses even a free switch at a
/// point where the bound is already spent).
#[test]
fn claim_whose_cas_meets_a_later_occupants_identical_word() {
    let p = loom_tests::profile(1, 1.0, &bucket(2, "2s"), SUSTAINED);
    bounded().check(move || {
        let (l, mock) = limiter(&p);
        assert!(gave_back(claim_and_give_back(&l, "A", "x0")));
        let ty = {
            let l = l.clone();
            thread::spawn(move || l.admit(&key(&l, "C", "y")))
        };
        // `y` starts first; `t` exists only once `y` has been preempted or has ended (see the
        // doc: this is what keeps the exploration small).
        thread::yield_now();
        peek_the_slot(&l, "A", "x0");
        let tt = {
            let l = l.clone();
            thread::spawn(move || {
                // Stops at the first refusal: then `y` holds the slot (busy or live), and the
                // clock is frozen, so no later claim could take it; going on would only let loom
                // choose, claim after claim, whether `t` sees `y`'s stores yet.
                (1..=WRAP)
                    .take_while(|i| {
                        let tenant = if *i == WRAP - 1 { "A" } else { "B" };
                        gave_back(claim_and_give_back(&l, tenant, &format!("x{i}")))
                    })
                    .count()
            })
        };
        let y = ty.join().unwrap();
        let claimed = tt.join().unwrap();
        assert!(matches!(y, Decision::Admit | TABLE_FULL), "y got {y:?}");
        assert!(
            y == Decision::Admit || claimed > 0,
            "the slot went to nobody"
        );
        // At 10 s every TAT is in the past: each tenant may take the one slot (its cap), and
        // takes it from the one before (whose count must then drop to zero for its turn).
        mock.increment(std::time::Duration::from_secs(10));
        for (tenant, who) in [("A", "a"), ("B", "b"), ("C", "c"), ("A", "a2"), ("B", "b2")] {
            assert_eq!(
                l.admit(&key(&l, tenant, who)),
                Decision::Admit,
                "{tenant}'s count is exact"
            );
            // Full again before the next tenant comes: give the token back.
            mock.increment(std::time::Duration::from_secs(10));
        }
    });
}
