//! The coarse clock (`Builder::coarse_clock`): decisions and reloads follow the clock through
//! the ticking thread, the interval is checked, and the thread ends with its limiter.

use std::time::{Duration, Instant};

use tollgate::{BuildError, Decision, Key, Limiter};
use tollgate_testkit::profile;

/// Threads of this process named as the coarse clock's (Linux truncates names to 15 bytes).
#[cfg(target_os = "linux")]
fn coarse_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|n| n.trim() == "tollgate-coarse")
        })
        .count()
}

/// Waits (at most 10 s) until `n` such threads are listed: a new thread names itself once it
/// runs, and the kernel may list a joined one a moment longer.
#[cfg(target_os = "linux")]
fn await_coarse_threads(n: usize) {
    let start = Instant::now();
    while coarse_threads() != n {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{} coarse clock threads, expected {n}",
            coarse_threads()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn decisions_follow_the_ticks_and_the_thread_ends_with_the_limiter() {
    let (clock, mock) = tollgate::quanta::Clock::mock();
    let l = Limiter::builder(profile(8, &[(1, 1_000, 10, 60_000)]))
        .clock(clock)
        .key_secret(b"test")
        .coarse_clock(Duration::from_millis(1))
        .build()
        .unwrap();
    #[cfg(target_os = "linux")]
    await_coarse_threads(1);
    let c = l.route_class("c0").unwrap();
    let k = Key::authenticated("t", "alice", c).unwrap();
    assert_eq!(l.admit(&k), Decision::Admit);
    // The clock has not moved: the wait is exact.
    assert!(matches!(
        l.admit(&k),
        Decision::Throttle { retry_after, .. } if retry_after == Duration::from_secs(1)
    ));
    mock.increment(Duration::from_secs(1));
    // Admitted once a tick has stored the new time (bounded: far more than 1 ms).
    let start = Instant::now();
    while l.peek(&k) != Decision::Admit {
        assert!(start.elapsed() < Duration::from_secs(10), "no tick in 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(l.admit(&k), Decision::Admit);
    // A reload takes effect at the last tick, the instant decisions see: the token owed (1 s
    // under 1/1s) is owed under 1/10s as 10 s.
    l.reload(profile(8, &[(1, 10_000, 10, 60_000)])).unwrap();
    assert!(matches!(
        l.admit(&k),
        Decision::Throttle { retry_after, .. } if retry_after == Duration::from_secs(10)
    ));
    mock.increment(Duration::from_secs(10));
    let start = Instant::now();
    while l.peek(&k) != Decision::Admit {
        assert!(start.elapsed() < Duration::from_secs(10), "no tick in 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(l.admit(&k), Decision::Admit);
    assert!(!l.admit(&k).is_admit());
    drop(l);
    #[cfg(target_os = "linux")]
    await_coarse_threads(0);
    // The bounds themselves are allowed (here, not in a test of its own: every coarse limiter
    // of this process is counted above).
    for interval in [Duration::from_micros(100), Duration::from_millis(100)] {
        let built = Limiter::builder(profile(8, &[(1, 1_000, 10, 60_000)]))
            .coarse_clock(interval)
            .build();
        assert!(built.is_ok(), "{interval:?}");
    }
}

#[test]
fn intervals_outside_the_bounds_are_refused() {
    // Refused before any thread is started.
    for interval in [
        Duration::ZERO,
        Duration::from_micros(99),
        Duration::from_millis(101),
    ] {
        let e = Limiter::builder(profile(8, &[(1, 1_000, 10, 60_000)]))
            .coarse_clock(interval)
            .build()
            .unwrap_err();
        assert_eq!(e, BuildError::CoarseClockInterval(interval));
        assert!(e.to_string().contains("coarse clock interval"), "{e}");
    }
}
