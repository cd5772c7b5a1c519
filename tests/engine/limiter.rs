//! The limiter's public behaviour: identities, fail-closed table, memory, concurrency.

use tollgate_testkit as common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{mock_limiter, profile};
use tollgate::{BucketKind, BuildError, Cause, Decision, Key, Limiter, Profile};

#[test]
fn limiter_and_pins_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Limiter>();
    assert_send_sync::<tollgate::Pinned>();
}

#[test]
fn identities_are_tenant_principal_and_class() {
    let (l, _) = mock_limiter(profile(
        64,
        &[(1, 1_000, 10, 60_000), (1, 1_000, 10, 60_000)],
    ));
    let (c0, c1) = (l.route_class("c0").unwrap(), l.route_class("c1").unwrap());
    let k = |t, p, c| Key::authenticated(t, p, c).unwrap();
    assert_eq!(l.admit(&k("acme", "alice", c0)), Decision::Admit);
    assert!(!l.admit(&k("acme", "alice", c0)).is_admit());
    // Another principal, another tenant, another class: each has its own buckets.
    assert_eq!(l.admit(&k("acme", "bob", c0)), Decision::Admit);
    assert_eq!(l.admit(&k("globex", "alice", c0)), Decision::Admit);
    assert_eq!(l.admit(&k("acme", "alice", c1)), Decision::Admit);
}

#[test]
fn anonymous_callers_share_their_network_prefix() {
    let (l, _) = mock_limiter(profile(64, &[(1, 1_000, 10, 60_000)]));
    let c = l.route_class("c0").unwrap();
    let anon = |ip: &str| l.admit(&Key::anonymous(ip.parse().unwrap(), c));
    assert_eq!(anon("198.51.100.7"), Decision::Admit);
    assert!(!anon("198.51.100.200").is_admit(), "same /24");
    assert_eq!(anon("198.51.101.7"), Decision::Admit, "another /24");
    assert_eq!(anon("2001:db8:1:2::1"), Decision::Admit);
    assert!(!anon("2001:db8:1:2:ffff::9").is_admit(), "same /56");
    // An anonymous network never shares a bucket with a tenant of the same text.
    assert_eq!(
        l.admit(&Key::authenticated("198.51.100.0", "x", c).unwrap()),
        Decision::Admit
    );
}

#[test]
fn a_new_identity_with_no_slot_fails_closed() {
    let (l, mock) = mock_limiter(profile(1, &[(2, 1_000, 10, 60_000)]));
    let c = l.route_class("c0").unwrap();
    let alice = Key::authenticated("t", "alice", c).unwrap();
    let bob = Key::authenticated("t", "bob", c).unwrap();
    assert_eq!(l.admit(&alice), Decision::Admit);
    let full = Decision::Unavailable {
        retry_after: None,
        cause: Cause::TableFull,
    };
    assert_eq!(l.admit(&bob), full);
    assert_eq!(full.http_status(), 503);
    // Alice keeps her state: one token left in her burst.
    assert_eq!(l.admit(&alice), Decision::Admit);
    assert!(matches!(
        l.admit(&alice),
        Decision::Throttle {
            bucket: BucketKind::Burst,
            ..
        }
    ));
    // Once alice has refilled completely (sustained: 6 s a token, 12 s for two), bob gets the slot.
    mock.increment(Duration::from_secs(11));
    assert_eq!(l.admit(&bob), full);
    mock.increment(Duration::from_secs(1));
    assert_eq!(l.admit(&bob), Decision::Admit);
}

#[test]
fn peek_charges_nothing() {
    let (l, _) = mock_limiter(profile(8, &[(1, 1_000, 10, 60_000)]));
    let k = Key::authenticated("t", "p", l.route_class("c0").unwrap()).unwrap();
    for _ in 0..3 {
        assert_eq!(l.peek(&k), Decision::Admit);
    }
    assert_eq!(l.admit(&k), Decision::Admit);
    let refused = l.peek(&k);
    assert_eq!(refused, l.admit(&k));
    assert_eq!(refused.retry_after(), Some(Duration::from_secs(1)));
}

#[test]
fn catalog_codes_and_statuses_follow_the_profile() {
    let p = Profile::from_path("examples/profiles/example.yaml").unwrap();
    let throttle = Decision::Throttle {
        retry_after: Duration::from_millis(1),
        bucket: BucketKind::Burst,
    };
    assert_eq!(throttle.http_status(), 429);
    assert_eq!(throttle.catalog_code(&p), Some("rate_limited"));
    for cause in [Cause::ShardFull, Cause::TenantShare, Cause::TableFull] {
        let d = Decision::Unavailable {
            retry_after: None,
            cause,
        };
        assert_eq!(
            (d.http_status(), d.catalog_code(&p)),
            (503, Some("over_capacity"))
        );
    }
    let store = Decision::Unavailable {
        retry_after: None,
        cause: Cause::StoreUnavailable,
    };
    assert_eq!(store.catalog_code(&p), Some("limiter_unavailable"));
    assert_eq!(Decision::Admit.catalog_code(&p), None);
}

#[test]
fn memory_is_72_bytes_per_identity() {
    let p = Profile::from_path("examples/profiles/example.yaml").unwrap();
    let l = Limiter::builder(p).build().unwrap();
    assert_eq!(l.capacity(), 1 << 20);
    // 64 bytes a slot and 8 its tenants' slot counter, plus the tenants' table (64 bytes an
    // entry: a sixteenth of the slots, at most 65,536, and two per listed tenant), plus a fixed
    // few KiB of bookkeeping that does not grow with identities.
    let tenants = 64 * ((1 << 16) + 2 * 2);
    let overhead = l.memory_bytes() - 72 * l.capacity() - tenants;
    assert!(l.memory_bytes() >= 64 << 20);
    assert!(overhead < 16 << 10, "{overhead} bytes of overhead");
}

#[test]
fn bad_builder_input_is_refused() {
    let p = profile(8, &[(1, 1_000, 10, 60_000)]);
    assert_eq!(
        Limiter::builder(p).key_secret(b"").build().unwrap_err(),
        BuildError::EmptySecret
    );
}

#[test]
#[should_panic(expected = "does not belong to this limiter")]
fn a_class_of_another_limiter_is_refused_loudly() {
    let (small, _) = mock_limiter(profile(8, &[(1, 1_000, 10, 60_000)]));
    let (big, _) = mock_limiter(profile(
        8,
        &[(1, 1_000, 10, 60_000), (1, 1_000, 10, 60_000)],
    ));
    let c1 = big.route_class("c1").unwrap();
    small.admit(&Key::authenticated("t", "p", c1).unwrap());
}

#[test]
fn same_secret_same_identities() {
    // Two limiters with the same secret agree on who is who (as Redis workers must); with
    // another secret the digests differ, which the table cannot observe but the digest test does.
    let mk = || {
        let (clock, _mock) = tollgate::quanta::Clock::mock();
        Limiter::builder(profile(8, &[(1, 1_000, 10, 60_000)]))
            .clock(clock)
            .key_secret(b"shared")
            .build()
            .unwrap()
    };
    let (a, b) = (mk(), mk());
    let k = Key::authenticated("t", "p", a.route_class("c0").unwrap()).unwrap();
    assert_eq!(a.admit(&k), b.admit(&k));
}

/// Two threads hammer one identity on a frozen clock: exactly `burst` admissions in total.
#[test]
fn concurrent_admits_never_over_admit() {
    for _ in 0..20 {
        let (l, _) = mock_limiter(profile(64, &[(50, 1_000, 1_000, 60_000)]));
        let c = l.route_class("c0").unwrap();
        let admitted = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    let k = Key::authenticated("t", "hot", c).unwrap();
                    for _ in 0..200 {
                        if l.admit(&k).is_admit() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), 50);
    }
}

/// Two threads insert the same new identities at once: each gets exactly one slot, so
/// exactly `burst` admissions each.
#[test]
fn concurrent_claims_of_one_identity_make_one_slot() {
    let (l, _) = mock_limiter(profile(4096, &[(3, 1_000, 1_000, 60_000)]));
    let c = l.route_class("c0").unwrap();
    let names: Vec<String> = (0..500).map(|i| format!("user-{i}")).collect();
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for n in &names {
                    for _ in 0..3 {
                        if l.admit(&Key::authenticated("t", n, c).unwrap()).is_admit() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });
    assert_eq!(admitted.load(Ordering::Relaxed), 3 * 500);
}

#[test]
fn remaining_counts_the_callers_own_tokens() {
    let (l, mock) = mock_limiter(profile(8, &[(5, 1_000, 100, 3_600_000)]));
    let k = Key::authenticated("t", "p", l.route_class("c0").unwrap()).unwrap();
    assert_eq!(
        l.remaining(&k),
        tollgate::Remaining {
            burst: 5,
            sustained: 100
        }
    );
    for _ in 0..3 {
        l.admit(&k);
    }
    assert_eq!(
        l.remaining(&k),
        tollgate::Remaining {
            burst: 2,
            sustained: 97
        }
    );
    mock.increment(Duration::from_millis(200));
    assert_eq!(l.remaining(&k).burst, 3);
}

/// Each thread caches the config it last read; a reload must reach a thread that read the old
/// one, and two limiters must never see each other's config.
#[test]
fn reload_reaches_threads_that_cached_the_old_config() {
    use std::sync::mpsc;
    let (a, _) = mock_limiter(profile(8, &[(1, 1_000, 100, 60_000)]));
    let (b, _) = mock_limiter(profile(8, &[(3, 1_000, 100, 60_000)]));
    let a = std::sync::Arc::new(a);
    let (go, wait) = mpsc::channel::<()>();
    let (done, finished) = mpsc::channel::<Vec<Decision>>();
    let worker = {
        let a = a.clone();
        std::thread::spawn(move || {
            let c = a.route_class("c0").unwrap();
            let admit = |p| a.admit(&Key::authenticated("t", p, c).unwrap());
            done.send(vec![admit("x"), admit("x")]).unwrap();
            wait.recv().unwrap();
            done.send(vec![admit("y"), admit("y"), admit("y")]).unwrap();
        })
    };
    let first = finished.recv().unwrap();
    assert!(first[0].is_admit() && !first[1].is_admit());
    a.reload(profile(8, &[(2, 1_000, 100, 60_000)])).unwrap();
    go.send(()).unwrap();
    let second = finished.recv().unwrap();
    assert_eq!(
        second.iter().filter(|d| d.is_admit()).count(),
        2,
        "{second:?}"
    );
    worker.join().unwrap();
    // This thread uses both limiters in turn: each keeps its own limits.
    let c = b.route_class("c0").unwrap();
    let k = Key::authenticated("t", "z", c).unwrap();
    assert_eq!((0..5).filter(|_| b.admit(&k).is_admit()).count(), 3);
    assert_eq!((0..5).filter(|_| a.admit(&k).is_admit()).count(), 2);
}

/// A thread's last decisions can come from its own thread-locals' destructors, after the
/// configs it cached are released (a thread's locals are dropped in the reverse order of first
/// use, so the one used first here goes last): they are decided, on the limiter's current
/// profile, and the thread exits cleanly.
#[test]
fn a_thread_decides_in_its_last_destructor() {
    use std::sync::{mpsc, Arc};
    struct Late(Arc<Limiter>, mpsc::Sender<Vec<Decision>>);
    impl Drop for Late {
        fn drop(&mut self) {
            let c = self.0.route_class("c0").unwrap();
            let k = Key::authenticated("t", "late", c).unwrap();
            let _ = self.1.send((0..3).map(|_| self.0.admit(&k)).collect());
        }
    }
    thread_local! {
        static LATE: std::cell::RefCell<Option<Late>> = const { std::cell::RefCell::new(None) };
    }
    let (l, _) = mock_limiter(profile(8, &[(2, 1_000, 100, 60_000)]));
    let l = Arc::new(l);
    let (tx, rx) = mpsc::channel();
    let worker = {
        let l = l.clone();
        std::thread::spawn(move || {
            LATE.with(|late| *late.borrow_mut() = Some(Late(l.clone(), tx)));
            let c = l.route_class("c0").unwrap();
            let early = Key::authenticated("t", "early", c).unwrap();
            assert!(l.admit(&early).is_admit());
        })
    };
    worker.join().unwrap();
    let late = rx.recv().unwrap();
    assert_eq!(late.iter().filter(|d| d.is_admit()).count(), 2, "{late:?}");
}
