//! Every kind of descriptor rule: class from an entry, a fixed class, `when`, a class value
//! naming no class, the anonymous address, no rule at all; tenants apart.

use crate::*;

/// Sends `d` until refused; the number admitted (at most 20).
async fn admitted(s: &mut Server, d: RateLimitDescriptor) -> usize {
    for n in 0..20 {
        let r = ask(s, req("edge", vec![d.clone()], 0)).await;
        if r.overall_code != OK {
            assert_eq!(r.overall_code, OVER_LIMIT);
            return n;
        }
    }
    20
}

#[tokio::test]
async fn class_from_an_entry_picks_that_class() {
    let mut s = start(PROFILE).await;
    assert_eq!(admitted(&mut s, alice("write")).await, 2, "write: burst 2");
    assert_eq!(
        admitted(&mut s, alice("odd")).await,
        2,
        "odd: burst 2, its own bucket"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_fixed_class_rule_needs_no_class_entry() {
    let mut s = start(PROFILE).await;
    let d = desc(&[("tenant", "acme"), ("user", "alice")]);
    assert_eq!(admitted(&mut s, d).await, 3, "read: burst 3");
    s.stop().await;
}

#[tokio::test]
async fn when_matches_exact_values_first() {
    let mut s = start(PROFILE).await;
    let reports = desc(&[
        ("generic_key", "reports"),
        ("tenant", "acme"),
        ("user", "alice"),
    ]);
    assert_eq!(
        admitted(&mut s, reports).await,
        2,
        "the `when` rule's class (odd)"
    );
    // Another value of the entry is not that rule: the fixed `read` rule takes it.
    let other = desc(&[
        ("generic_key", "items"),
        ("tenant", "acme"),
        ("user", "alice"),
    ]);
    assert_eq!(admitted(&mut s, other).await, 3);
    s.stop().await;
}

#[tokio::test]
async fn a_class_value_naming_no_class_falls_to_the_next_rule() {
    let mut s = start(PROFILE).await;
    assert_eq!(
        admitted(&mut s, alice("no-such-class")).await,
        3,
        "the read rule"
    );
    s.stop().await;
}

#[tokio::test]
async fn anonymous_callers_share_their_network_prefix() {
    let mut s = start(PROFILE).await;
    let ip = |a: &str| desc(&[("remote_address", a)]);
    assert_eq!(admitted(&mut s, ip("203.0.113.9")).await, 3);
    // The same /24: the same bucket, already empty.
    assert_eq!(admitted(&mut s, ip("203.0.113.77")).await, 0);
    assert_eq!(admitted(&mut s, ip("198.51.100.1")).await, 3);
    assert_eq!(admitted(&mut s, ip("2001:db8::1")).await, 3);
    s.stop().await;
}

#[tokio::test]
async fn a_descriptor_no_rule_matches_is_not_limited() {
    let mut s = start(PROFILE).await;
    let stray = desc(&[("destination_cluster", "upstream")]);
    for _ in 0..50 {
        let r = ask(&mut s, req("edge", vec![stray.clone()], 0)).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses.len(), 1);
        assert_eq!(r.statuses[0].code, OK);
        assert_eq!(r.statuses[0].current_limit, None, "nothing limits it");
    }
    s.stop().await;
}

#[tokio::test]
async fn unmatched_descriptors_are_refused_when_the_profile_says_so() {
    let yaml = PROFILE.replace("  domain: edge\n", "  domain: edge\n  unmatched: refuse\n");
    let mut s = start(&yaml).await;
    let stray = desc(&[("destination_cluster", "upstream")]);
    for _ in 0..3 {
        let e = refused(&mut s, req("edge", vec![alice("write"), stray.clone()], 0)).await;
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        assert!(
            e.message().contains("descriptors[1] matches no rule"),
            "{e:?}"
        );
    }
    // Nothing was charged: alice still has her two write tokens.
    assert_eq!(admitted(&mut s, alice("write")).await, 2);
    s.stop().await;
}

#[tokio::test]
async fn tenants_and_principals_have_their_own_buckets() {
    let mut s = start(PROFILE).await;
    assert_eq!(admitted(&mut s, alice("write")).await, 2);
    let bob = desc(&[("tenant", "acme"), ("user", "bob"), ("class", "write")]);
    assert_eq!(admitted(&mut s, bob).await, 2);
    let globex = desc(&[("tenant", "globex"), ("user", "alice"), ("class", "write")]);
    assert_eq!(admitted(&mut s, globex).await, 2);
    s.stop().await;
}

#[tokio::test]
async fn a_reload_swaps_rules_and_keeps_buckets() {
    let mut s = start(PROFILE).await;
    assert_eq!(admitted(&mut s, alice("write")).await, 2);
    // The new profile maps a stray descriptor to write, and keeps alice's empty bucket.
    let yaml = PROFILE.replace(
        "  rules:\n",
        "  rules:\n    - { tenant: team, principal: member, class: write }\n",
    );
    std::fs::write(&s.profile_path, &yaml).unwrap();
    s.limiter.reload_from(&s.profile_path).unwrap();
    let team = desc(&[("team", "t1"), ("member", "m1")]);
    assert_eq!(admitted(&mut s, team).await, 2, "the new rule limits it");
    assert_eq!(
        admitted(&mut s, alice("write")).await,
        0,
        "bucket state kept"
    );
    // A profile without `descriptors:` is refused; the old rules stay.
    let cut = PROFILE.split("descriptors:").next().unwrap();
    std::fs::write(&s.profile_path, cut).unwrap();
    let e = s.limiter.reload_from(&s.profile_path).unwrap_err();
    assert!(e.contains("no `descriptors:` section"), "{e}");
    let team = desc(&[("team", "t2"), ("member", "m1")]);
    assert_eq!(admitted(&mut s, team).await, 2, "still the new rules");
    s.stop().await;
}

#[tokio::test]
async fn a_reload_that_reorders_the_classes_charges_each_descriptor_its_own_class() {
    let mut s = start(PROFILE).await;
    // `write` listed first and `read` after it: a rule's class is found by name, and charges
    // that class's buckets (burst 2 for write, 3 for read), as before the reload.
    let write =
        "  write:\n    burst:     { tokens: 2, per: 1s }\n    sustained: { tokens: 50, per: 1h }\n";
    let yaml = PROFILE
        .replace(write, "")
        .replace("route_classes:\n", &format!("route_classes:\n{write}"));
    assert_ne!(yaml, PROFILE);
    std::fs::write(&s.profile_path, &yaml).unwrap();
    s.limiter.reload_from(&s.profile_path).unwrap();
    assert_eq!(admitted(&mut s, alice("write")).await, 2, "write: burst 2");
    assert_eq!(admitted(&mut s, alice("read")).await, 3, "read: burst 3");
    s.stop().await;
}
