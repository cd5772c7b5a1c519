//! Every invalid profile is refused with a message naming the field and, where the parser knows
//! it, the line and column; the example profile is accepted.

use std::time::Duration;

use tollgate::profile::Period;
use tollgate::Profile;

const EXAMPLE: &str = include_str!("../../examples/profiles/example.yaml");

const MINIMAL: &str = "\
name: t
identities: { capacity: 16 }
route_classes:
  read:
    burst:     { tokens: 5, per: 1s }
    sustained: { tokens: 100, per: 1h }
";

#[test]
fn example_profile_is_accepted() {
    let p = Profile::from_yaml(EXAMPLE).unwrap();
    assert_eq!(p.name, "partner-apis");
    assert_eq!(p.identities.capacity.get(), 1_048_576);
    let names: Vec<&str> = p.route_classes.iter().map(|(k, _)| k).collect();
    assert_eq!(names, ["read", "write", "registration", "expensive"]);
    let reg = p.route_class("registration").unwrap();
    assert_eq!(reg.burst.tokens.get(), 3);
    assert_eq!(reg.burst.per.get(), Duration::from_secs(60));
    assert_eq!(reg.sustained.per.get(), Duration::from_secs(86_400));
    let sc = p.shared_capacity.as_ref().unwrap();
    assert_eq!(sc.shards.get(), 8);
    assert_eq!(sc.tenants.get("acme").unwrap().weight.get(), 1.5);
    assert_eq!(sc.tenants.get("globex").unwrap().weight.get(), 1.0);
    assert_eq!(p.routes.len(), 5);
    assert_eq!(p.catalog.throttled.code.as_str(), "rate_limited");
    assert_eq!(
        p.catalog.over_capacity.type_uri.as_str(),
        "https://errors.example.com/over-capacity"
    );
    assert_eq!(p.retry_after.max.get(), Duration::from_secs(3600));
    assert_eq!(p.anonymous.ipv6_prefix.get(), 56);
}

#[test]
fn profile_round_trips_through_yaml() {
    for src in [EXAMPLE, MINIMAL] {
        let p = Profile::from_yaml(src).unwrap();
        let printed = serde_yaml_ng::to_string(&p).unwrap();
        assert_eq!(Profile::from_yaml(&printed).unwrap(), p, "{printed}");
    }
}

#[test]
fn from_path_reads_and_names_the_file() {
    let p = Profile::from_path("examples/profiles/example.yaml").unwrap();
    assert_eq!(p, Profile::from_yaml(EXAMPLE).unwrap());
    let e = Profile::from_path("no/such/profile.yaml").unwrap_err();
    assert!(e.message().contains("no/such/profile.yaml"), "{e}");
}

/// Replaces `from` by `to` in the minimal profile and returns the error.
fn refuse(from: &str, to: &str) -> tollgate::ProfileError {
    assert!(MINIMAL.contains(from), "{from}");
    let src = MINIMAL.replacen(from, to, 1);
    Profile::from_yaml(&src).expect_err(&src)
}

#[track_caller]
fn says(e: &tollgate::ProfileError, words: &[&str], line: Option<usize>) {
    for w in words {
        assert!(e.to_string().contains(w), "{w:?} not in {e}");
    }
    if let Some(l) = line {
        assert_eq!(e.line(), Some(l), "{e}");
        assert!(e.column().is_some(), "{e}");
        assert!(e.to_string().contains(&format!("line {l}")), "{e}");
    }
}

#[test]
fn zero_and_negative_tokens_are_refused() {
    says(
        &refuse("tokens: 5,", "tokens: 0,"),
        &["burst.tokens", "invalid value 0"],
        Some(5),
    );
    says(
        &refuse("tokens: 5,", "tokens: -3,"),
        &["burst.tokens", "-3"],
        Some(5),
    );
    says(
        &refuse("tokens: 100,", "tokens: 4294967296,"),
        &["sustained.tokens"],
        Some(6),
    );
}

#[test]
fn bad_periods_are_refused() {
    says(
        &refuse("per: 1s", "per: 0s"),
        &["burst.per", "greater than zero"],
        Some(5),
    );
    says(
        &refuse("per: 1s", "per: 1.5s"),
        &["burst.per", "1.5s"],
        Some(5),
    );
    says(
        &refuse("per: 1h", "per: 1 hour"),
        &["sustained.per", "unit"],
        Some(6),
    );
    says(
        &refuse("per: 1h", "per: 367d"),
        &["sustained.per", "366d"],
        Some(6),
    );
    says(&refuse("per: 1h", "per: -1h"), &["sustained.per"], Some(6));
}

#[test]
fn unknown_fields_are_refused() {
    says(
        &refuse("tokens: 5,", "tokenz: 5,"),
        &["tokenz", "burst"],
        Some(5),
    );
    says(
        &refuse("name: t\n", "name: t\nnmae: u\n"),
        &["nmae"],
        Some(2),
    );
    says(
        &refuse("    sustained:", "    steady:"),
        &["steady"],
        Some(6),
    );
}

#[test]
fn missing_fields_are_refused() {
    says(
        &refuse("identities: { capacity: 16 }\n", ""),
        &["identities"],
        None,
    );
    says(
        &refuse("    sustained: { tokens: 100, per: 1h }\n", ""),
        &["sustained"],
        None,
    );
}

#[test]
fn capacity_must_be_positive_and_bounded() {
    says(
        &refuse("capacity: 16", "capacity: 0"),
        &["identities.capacity", "invalid value 0"],
        Some(2),
    );
    says(
        &refuse("capacity: 16", "capacity: 2000000000"),
        &["identities.capacity"],
        Some(2),
    );
}

#[test]
fn shares_outside_zero_one_are_refused() {
    let with = |share: &str| {
        format!(
            "{MINIMAL}shared_capacity:\n  shards: 2\n  window: 1s\n  slots_per_window: 10\n  tenant_share: {share}\n"
        )
    };
    assert!(Profile::from_yaml(&with("1")).is_ok());
    assert!(Profile::from_yaml(&with("0.25")).is_ok());
    for bad in ["0", "1.5", "-0.5", ".nan"] {
        let e = Profile::from_yaml(&with(bad)).unwrap_err();
        says(&e, &["tenant_share"], Some(11));
    }
    let pinned = format!("{}  tenants:\n    acme: {{ shard: 2 }}\n", with("0.5"));
    says(
        &Profile::from_yaml(&pinned).unwrap_err(),
        &["tenants.acme.shard", "below shards"],
        Some(13),
    );
    let weight = format!("{}  tenants:\n    acme: {{ weight: 0 }}\n", with("0.5"));
    says(
        &Profile::from_yaml(&weight).unwrap_err(),
        &["weight"],
        Some(13),
    );
}

/// Shares and weights that give a tenant less than one slot were rounded up to one without a
/// word, and a weight of 1e308 overflowed the product: both refused, with the position.
#[test]
fn shares_below_one_slot_and_absurd_weights_are_refused() {
    let with = |share: &str, tenants: &str| {
        format!(
            "{MINIMAL}shared_capacity:\n  shards: 2\n  window: 1s\n  slots_per_window: 10\n  \
             tenant_share: {share}\n{tenants}"
        )
    };
    let e = Profile::from_yaml(&with("5e-324", "")).unwrap_err();
    says(
        &e,
        &["shared_capacity.tenant_share", "less than one slot", "0.1"],
        Some(11),
    );
    let e = Profile::from_yaml(&with("0.05", "")).unwrap_err();
    says(&e, &["10 slots x 0.05"], Some(11));
    assert!(
        Profile::from_yaml(&with("0.1", "")).is_ok(),
        "exactly one slot"
    );
    let weighted = |w: &str| with("0.5", &format!("  tenants:\n    acme: {{ weight: {w} }}\n"));
    let e = Profile::from_yaml(&weighted("0.1")).unwrap_err();
    says(&e, &["tenants.acme.weight", "at least 0.2"], Some(13));
    let e = Profile::from_yaml(&weighted("1e308")).unwrap_err();
    says(&e, &["weight", "at most 1000000"], Some(13));
    assert!(Profile::from_yaml(&weighted("1000000")).is_ok());
    // The identity table's share, against its capacity (16 slots in MINIMAL).
    let e =
        Profile::from_yaml(&MINIMAL.replace("capacity: 16", "capacity: 16, tenant_share: 0.01"))
            .unwrap_err();
    says(&e, &["identities.tenant_share", "16 slots"], Some(2));
}

#[test]
fn leases_larger_than_a_bucket_or_longer_than_the_burst_are_refused() {
    let with = |lease: &str| format!("{MINIMAL}    lease: {lease}\n");
    let p = Profile::from_yaml(&with("{ max_tokens: 5, ttl: 1s }")).unwrap();
    let lease = p.route_class("read").unwrap().lease.unwrap();
    assert_eq!(
        (lease.max_tokens.get(), lease.ttl.get()),
        (5, Duration::from_secs(1))
    );
    let e = Profile::from_yaml(&with("{ max_tokens: 6, ttl: 1s }")).unwrap_err();
    says(
        &e,
        &["route_classes.read.lease.max_tokens", "6", "at most 5"],
        Some(7),
    );
    let e = Profile::from_yaml(&with("{ max_tokens: 2, ttl: 2s }")).unwrap_err();
    says(
        &e,
        &["route_classes.read.lease.ttl", "the burst's per"],
        Some(7),
    );
    let e = Profile::from_yaml(&with("{ max_tokens: 0, ttl: 1s }")).unwrap_err();
    says(&e, &["max_tokens"], Some(7));
    let e = Profile::from_yaml(&with("{ max_tokens: 2 }")).unwrap_err();
    says(&e, &["ttl"], Some(7));
    let e = Profile::from_yaml(&with("{ max_tokens: 2, ttl: 1s, size: 3 }")).unwrap_err();
    says(&e, &["size"], Some(7));
    // With shared capacity, a lease is at most a shard's slots.
    let capacity =
        "shared_capacity: { shards: 1, window: 1s, slots_per_window: 3, tenant_share: 1.0 }\n";
    let e = Profile::from_yaml(&format!("{}{capacity}", with("{ max_tokens: 4, ttl: 1s }")))
        .unwrap_err();
    says(&e, &["slots_per_window", "at most 3"], Some(7));
    // Built in Rust: the same check.
    let mut p = Profile::from_yaml(MINIMAL).unwrap();
    let mut read = *p.route_class("read").unwrap();
    read.lease = Some(tollgate::profile::LeasePolicy {
        max_tokens: tollgate::profile::Tokens::new(50).unwrap(),
        ttl: Period::from_secs(1).unwrap(),
    });
    p.route_classes.remove("read");
    p.route_classes.insert("read", read).unwrap();
    assert!(p.validate().unwrap_err().to_string().contains("at most 5"));
}

#[test]
fn unknown_route_class_in_routes_is_refused() {
    let src = format!("{MINIMAL}routes:\n  - {{ method: GET, path: \"/v1/**\", class: read }}\n  - {{ method: POST, path: \"/v1/**\", class: writ }}\n");
    let e = Profile::from_yaml(&src).unwrap_err();
    says(&e, &["routes[1].class", "\"writ\"", "read"], Some(9));
    let src = format!("{MINIMAL}routes:\n  - {{ method: get, path: \"/v1/**\", class: read }}\n");
    says(
        &Profile::from_yaml(&src).unwrap_err(),
        &["routes[0].method"],
        Some(8),
    );
    let src = format!("{MINIMAL}routes:\n  - {{ method: GET, path: \"v1\", class: read }}\n");
    says(
        &Profile::from_yaml(&src).unwrap_err(),
        &["routes[0].path"],
        Some(8),
    );
}

#[test]
fn other_bad_values_are_refused() {
    says(&refuse("name: t", "name: \"\""), &["name"], Some(1));
    says(
        &refuse("route_classes:\n", "route_classes: {}\nx:\n"),
        &["x"],
        None,
    );
    let dup = MINIMAL.to_owned()
        + "  read:\n    burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 1, per: 1s }\n";
    says(&Profile::from_yaml(&dup).unwrap_err(), &["read"], None);
    let v4 = format!("{MINIMAL}anonymous: {{ ipv4_prefix: 33 }}\n");
    says(
        &Profile::from_yaml(&v4).unwrap_err(),
        &["anonymous.ipv4_prefix", "33"],
        Some(7),
    );
    let cap = format!("{MINIMAL}retry_after: {{ max: 500ms }}\n");
    says(
        &Profile::from_yaml(&cap).unwrap_err(),
        &["retry_after.max", "at least 1s"],
        Some(7),
    );
    let code = format!("{MINIMAL}catalog:\n  throttled: {{ code: Rate-Limited }}\n");
    says(
        &Profile::from_yaml(&code).unwrap_err(),
        &["catalog.throttled.code"],
        Some(8),
    );
    says(&Profile::from_yaml("").unwrap_err(), &[], None);
    says(&Profile::from_yaml("name: [").unwrap_err(), &[], None);
    says(
        &Profile::from_yaml("- 1\n- 2\n").unwrap_err(),
        &["struct Profile"],
        None,
    );
}

#[test]
fn durations_print_in_their_largest_exact_unit() {
    for (s, back) in [
        ("250ms", "250ms"),
        ("1000ms", "1s"),
        ("60s", "1m"),
        ("90m", "90m"),
        ("24h", "1d"),
        ("1d", "1d"),
    ] {
        assert_eq!(Period::parse(s).unwrap().to_string(), back);
    }
    for bad in [
        "",
        "s",
        "1",
        "1 s",
        "1S",
        "1us",
        "1.0s",
        "+1s",
        "1s ",
        "18446744073709551616ms",
    ] {
        assert!(Period::parse(bad).is_err(), "{bad:?}");
    }
}
