//! Memory per identity: `memory_bytes()` and the resident set measured around filling a table
//! to capacity, next to governor's keyed limiter holding the same keys.
//!
//! `cargo run --release --example memory` (Linux: reads /proc/self/statm).

use std::num::NonZeroU32;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tollgate::{Key, Limiter, Profile};

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    const IDENTITIES: usize = 1 << 20;
    // Key strings are built first, so that their memory is not counted for either limiter.
    let keys: Vec<(String, String)> = (0..IDENTITIES)
        .map(|i| (format!("tenant-{:03}", i % 1000), format!("user-{i:09}")))
        .collect();
    let joined: Vec<String> = keys.iter().map(|(t, p)| format!("{t}/{p}/read")).collect();

    let profile = Profile::from_yaml(&format!(
        "name: mem\nidentities: {{ capacity: {} }}\nroute_classes:\n  read:\n    \
         burst: {{ tokens: 50, per: 1s }}\n    sustained: {{ tokens: 6000, per: 1h }}\n",
        2 * IDENTITIES
    ))
    .unwrap();
    let before = rss_bytes();
    let limiter = Limiter::builder(profile).build().unwrap();
    let read = limiter.route_class("read").unwrap();
    let mut admitted = 0;
    for (t, p) in &keys {
        admitted += usize::from(
            limiter
                .admit(&Key::authenticated(t, p, read).unwrap())
                .is_admit(),
        );
    }
    let tollgate_rss = rss_bytes() - before;
    println!(
        "tollgate: {} slots, {admitted} identities admitted; memory_bytes() {} = {:.2} B per slot; \
         RSS +{} = {:.2} B per slot",
        limiter.capacity(),
        limiter.memory_bytes(),
        limiter.memory_bytes() as f64 / limiter.capacity() as f64,
        tollgate_rss,
        tollgate_rss as f64 / limiter.capacity() as f64,
    );
    drop(limiter);

    // How full the table gets before a new identity finds no slot within its window.
    let profile = Profile::from_yaml(&format!(
        "name: fill\nidentities: {{ capacity: {IDENTITIES} }}\nroute_classes:\n  read:\n    \
         burst: {{ tokens: 50, per: 1h }}\n    sustained: {{ tokens: 6000, per: 1d }}\n"
    ))
    .unwrap();
    let limiter = Limiter::builder(profile).build().unwrap();
    let mut first_full = None;
    let mut placed = 0usize;
    for (i, (t, p)) in keys.iter().enumerate() {
        if limiter
            .admit(&Key::authenticated(t, p, read).unwrap())
            .is_admit()
        {
            placed += 1;
        } else if first_full.is_none() {
            first_full = Some(i);
        }
    }
    println!(
        "fill: the first new identity refused (TableFull) came at {:.1}% of capacity; offered one \
         identity per slot, {:.1}% of them got one",
        first_full.unwrap_or(IDENTITIES) as f64 * 100.0 / IDENTITIES as f64,
        placed as f64 * 100.0 / IDENTITIES as f64
    );
    drop(limiter);

    let before = rss_bytes();
    let keyed: DefaultKeyedRateLimiter<String> =
        RateLimiter::keyed(Quota::per_second(NonZeroU32::new(50).unwrap()));
    for j in &joined {
        let _ = keyed.check_key(j);
    }
    let governor_rss = rss_bytes().saturating_sub(before);
    println!(
        "governor keyed (String keys, cloned into the map): {} keys; RSS +{} = {:.2} B per key, unbounded",
        keyed.len(),
        governor_rss,
        governor_rss as f64 / IDENTITIES as f64
    );
}
