//! Hostile calls of tollgate's Redis module against a real `redis-server` that loads it: the
//! `redis_module_calls` fuzz check (`tollgate_testkit::fuzz::redis_module_calls`) over the
//! checked-in corpus (`fuzz/corpus/redis_module_calls/`) and over seeded random inputs. The
//! server must answer `PING` after every call, a refusal must change nothing, and a charge must
//! store a value tollgate can read back.

use std::panic::AssertUnwindSafe;

use rand::{Rng, SeedableRng};
use tollgate_testkit::fuzz::redis_module_calls::{check_counted, Called, Harness};

/// Random inputs per run: about 20 calls each. `TOLLGATE_MODULE_CALLS_INPUTS` sets another
/// count (a longer run by hand).
const INPUTS: usize = 400;

fn replay(harness: &Harness, inputs: impl Iterator<Item = (String, Vec<u8>)>) -> Called {
    let mut seen = Called::default();
    for (name, data) in inputs {
        let h = AssertUnwindSafe(harness);
        match std::panic::catch_unwind(move || {
            let mut one = Called::default();
            check_counted(&h, &data, &mut one);
            one
        }) {
            Ok(one) => seen.add(one),
            Err(e) => {
                eprintln!("input failed: {name}");
                std::panic::resume_unwind(e);
            }
        }
    }
    seen
}

#[test]
fn the_module_survives_its_corpus() {
    let harness = Harness::start();
    let inputs = tollgate_testkit::fuzz::corpus::inputs("redis_module_calls", 1).into_iter();
    let seen = replay(&harness, inputs);
    eprintln!("{seen:?}");
    assert!(seen.charged > 0 && seen.refused > 0 && seen.wrong_type > 0 && seen.getkeys > 0);
}

#[test]
fn the_module_survives_random_calls() {
    let harness = Harness::start();
    let count = std::env::var("TOLLGATE_MODULE_CALLS_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(INPUTS);
    let seed: u64 = std::env::var("TOLLGATE_MODULE_CALLS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x7011_6a7e);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let inputs = (0..count).map(|i| {
        let len = rng.gen_range(1..400);
        let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        (format!("seed {seed}, input {i}"), data)
    });
    let seen = replay(&harness, inputs);
    eprintln!("{seen:?}");
    assert!(seen.charged > 0 && seen.refused > 0 && seen.answered > 0);
}
