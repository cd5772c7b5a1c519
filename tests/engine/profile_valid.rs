//! A profile is valid by construction: the scalars' constructors refuse bad values,
//! `validate` refuses what spans fields, and `build`, `reload` and every serde format refuse an
//! invalid profile with the same `ProfileError` YAML gets. The old profile stays in force after
//! a refused reload.

use std::io;
use std::time::Duration;

use tollgate::profile::{
    Capacity, Code, OrderedMap, Period, Prefix, ProfileErrorKind, Ratio, Shards, Share, Slots,
    TenantPolicy, Tokens, TypeUri, Weight, MAX_CAPACITY, MAX_PERIOD_NANOS, MAX_SLOTS_PER_WINDOW,
    MAX_TOKENS,
};
use tollgate::{BuildError, Decision, Key, Limiter, Profile, ProfileError};

const BASE: &str = "\
name: v
identities: { capacity: 64 }
route_classes:
  read:
    burst:     { tokens: 1, per: 1s }
    sustained: { tokens: 100, per: 1h }
shared_capacity:
  shards: 2
  window: 1s
  slots_per_window: 10
  tenant_share: 0.5
  tenants:
    acme: { weight: 1.5, shard: 1 }
routes:
  - { method: GET, path: \"/v1/**\", class: read }
catalog:
  throttled: { code: rate_limited, type: \"https://errors.example.com/rate-limited\" }
";

fn base() -> Profile {
    Profile::from_yaml(BASE).unwrap()
}

#[track_caller]
fn invalid<T: std::fmt::Debug>(r: Result<T, ProfileError>) -> ProfileError {
    let e = r.expect_err("refused");
    assert_eq!(e.kind(), ProfileErrorKind::Invalid, "{e}");
    e
}

#[test]
fn scalar_constructors_refuse_values_out_of_range() {
    invalid(Tokens::new(0));
    invalid(Tokens::new(MAX_TOKENS + 1));
    invalid(Tokens::new(u64::MAX));
    assert_eq!(Tokens::new(MAX_TOKENS).unwrap().get(), MAX_TOKENS);

    invalid(Period::new(Duration::ZERO));
    invalid(Period::new(Duration::from_nanos(
        MAX_PERIOD_NANOS + 1_000_000,
    )));
    invalid(Period::new(Duration::MAX));
    invalid(Period::from_secs(367 * 86_400));
    invalid(Period::from_secs(u64::MAX));
    // Whole milliseconds only: every period prints as it parses.
    invalid(Period::new(Duration::from_micros(1_500)));
    let max = Period::new(Duration::from_nanos(MAX_PERIOD_NANOS)).unwrap();
    assert_eq!(Period::parse(&max.to_string()).unwrap(), max);
    assert_eq!(Period::from_millis(1).unwrap().as_nanos(), 1_000_000);

    invalid(Capacity::new(0));
    invalid(Capacity::new(MAX_CAPACITY + 1));
    invalid(Shards::new(0));
    invalid(Shards::new((1 << 16) + 1));
    for bad in [0.0, -0.5, 1.0001, f64::NAN, f64::INFINITY] {
        invalid(Share::new(bad));
    }
    assert_eq!(Share::new(1.0).unwrap().get(), 1.0);
    for bad in [-0.1, 1.1, f64::NAN] {
        invalid(Ratio::new(bad));
    }
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        invalid(Weight::new(bad));
    }
    invalid(Slots::new(0));
    invalid(Slots::new(MAX_SLOTS_PER_WINDOW + 1));
    invalid(Slots::new(1 << 24));
    assert_eq!(
        Slots::new(MAX_SLOTS_PER_WINDOW).unwrap().get(),
        (1 << 24) - 1
    );
    invalid(Prefix::<32>::new(33));
    invalid(Prefix::<128>::new(129));
    assert_eq!(Prefix::<128>::new(128).unwrap().get(), 128);
}

#[test]
fn catalog_codes_and_type_uris_refuse_what_is_unsafe_in_a_header_or_json() {
    for bad in [
        "",
        "rate_limited\r\n",
        "rate\r\nSet-Cookie: a=b",
        "rate\nlimited",
        "rate\0",
        "rate limited",
        "Rate_Limited",
        "rate-limited",
        "rate\"limited",
        "rate\\limited",
        "räte",
        &"a".repeat(65),
    ] {
        let e = invalid(Code::new(bad));
        assert!(e.message().contains("invalid code"), "{e}");
    }
    assert_eq!(
        Code::new("over_capacity_2").unwrap().as_str(),
        "over_capacity_2"
    );
    for bad in [
        "",
        "https://e.example/x\r\nSet-Cookie: a=b",
        "about:blank\n",
        "https://e.example/a b",
        "https://e.example/\"x\"",
        "https://e.example/\\x",
        "https://e.example/<x>",
        "https://e.example/\u{7f}",
        "https://e.example/é",
    ] {
        invalid(TypeUri::new(bad));
    }
    for good in [
        "about:blank",
        "https://errors.example.com/over-capacity?v=1#a",
        "urn:x:y%20",
    ] {
        assert_eq!(TypeUri::new(good).unwrap().as_str(), good);
    }
    // Through YAML, a code with CR LF is refused at its position.
    let src = BASE.replace("code: rate_limited", "code: \"rate_limited\\r\\n\"");
    let e = Profile::from_yaml(&src).unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Invalid, "{e}");
    assert!(e.message().starts_with("catalog.throttled.code"), "{e}");
    assert_eq!(e.line(), Some(17), "{e}");
}

#[test]
fn ordered_maps_refuse_empty_long_and_duplicate_names() {
    let mut m = OrderedMap::new();
    let t = TenantPolicy {
        weight: Weight::new(1.0).unwrap(),
        shard: None,
    };
    m.insert("acme", t).unwrap();
    invalid(m.insert("acme", t));
    invalid(m.insert("", t));
    invalid(m.insert("x".repeat(65), t));
    m.insert("x".repeat(64), t).unwrap();
    assert_eq!(m.len(), 2);
    assert_eq!(m.remove("acme"), Some(t));
    assert_eq!(m.position(&"x".repeat(64)), Some(0));
}

/// Profiles that every scalar accepts but that `validate` refuses, and what it says.
fn bad_profiles() -> Vec<(&'static str, Profile, &'static str)> {
    let mut out = Vec::new();
    let mut p = base();
    p.routes[0].class = "writ".into();
    out.push(("unknown route class", p, "routes[0].class"));
    let mut p = base();
    let acme = p.shared_capacity.as_mut().unwrap().tenants.get_mut("acme");
    acme.unwrap().shard = Some(2);
    out.push(("pinned shard out of range", p, "tenants.acme.shard"));
    let mut p = base();
    p.retry_after.max = Period::from_millis(500).unwrap();
    out.push(("retry_after below 1s", p, "retry_after.max"));
    let mut p = base();
    p.name = " ".into();
    out.push(("empty name", p, "name"));
    let mut p = base();
    p.routes.clear();
    p.route_classes.remove("read");
    out.push(("no route class", p, "route_classes"));
    let mut p = base();
    p.routes[0].method = "get\r\n".into();
    out.push(("bad method", p, "routes[0].method"));
    let mut p = base();
    p.routes[0].path = "v1".into();
    out.push(("bad path", p, "routes[0].path"));
    out
}

#[test]
fn validate_refuses_what_spans_fields_as_yaml_does() {
    base().validate().unwrap();
    for (what, p, field) in bad_profiles() {
        let e = invalid(p.validate());
        assert!(e.message().contains(field), "{what}: {e}");
        assert_eq!((e.line(), e.column()), (None, None), "{what}");
        // The same refusal as parsing the same profile (which adds a position).
        let yaml = serde_yaml_ng::to_string(&p).unwrap();
        let from_yaml = Profile::from_yaml(&yaml).unwrap_err();
        assert_eq!(from_yaml.kind(), ProfileErrorKind::Invalid, "{what}");
        assert_eq!(from_yaml.message(), e.message(), "{what}");
    }
}

#[test]
fn build_refuses_an_invalid_profile_with_its_profile_error() {
    for (what, p, _) in bad_profiles() {
        let expected = p.validate().unwrap_err();
        match Limiter::builder(p).build() {
            Err(BuildError::Profile(e)) => assert_eq!(e, expected, "{what}"),
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: built"),
        }
    }
    let e = BuildError::from(invalid(Tokens::new(0)));
    assert!(std::error::Error::source(&e).is_some());
    assert!(e.to_string().contains("invalid value 0"), "{e}");
}

#[test]
fn reload_refuses_an_invalid_profile_and_keeps_the_old_one() {
    let limiter = Limiter::builder(base()).build().unwrap();
    let read = limiter.route_class("read").unwrap();
    let alice = Key::authenticated("globex", "alice", read).unwrap();
    assert_eq!(limiter.admit(&alice), Decision::Admit);
    for (what, p, _) in bad_profiles() {
        let expected = p.validate().unwrap_err();
        assert_eq!(limiter.reload(p), Err(expected), "{what}");
        assert_eq!(*limiter.profile(), base(), "{what}");
        // Still the old one-token burst: the spent token is not back.
        assert!(!limiter.admit(&alice).is_admit(), "{what}");
    }
}

#[test]
fn a_refused_reload_has_its_own_kind() {
    let limiter = Limiter::builder(base()).build().unwrap();
    let mut bigger = base();
    bigger.identities.capacity = Capacity::new(128).unwrap();
    let e = limiter.reload(bigger).unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Reload, "{e}");
    let mut fewer = base();
    fewer.routes.clear();
    fewer.route_classes.remove("read");
    let mut other = tollgate::profile::RouteClassLimits {
        mode: None,
        lease: None,
        ..*base().route_class("read").unwrap()
    };
    other.burst.tokens = Tokens::new(2).unwrap();
    fewer.route_classes.insert("other", other).unwrap();
    assert_eq!(
        limiter.reload(fewer).unwrap_err().kind(),
        ProfileErrorKind::Reload
    );
    assert_eq!(*limiter.profile(), base());
}

#[test]
fn yaml_errors_say_their_kind() {
    let kind = |src: &str| Profile::from_yaml(src).unwrap_err().kind();
    assert_eq!(kind("name: ["), ProfileErrorKind::Syntax);
    assert_eq!(kind(""), ProfileErrorKind::Syntax);
    assert_eq!(kind(&format!("{BASE}nmae: x\n")), ProfileErrorKind::Syntax);
    assert_eq!(
        kind(&BASE.replace("name: v\n", "")),
        ProfileErrorKind::Syntax
    );
    assert_eq!(
        kind(&BASE.replace("tokens: 1,", "tokens: x,")),
        ProfileErrorKind::Syntax
    );
    assert_eq!(kind(&"{a: ".repeat(64)), ProfileErrorKind::Syntax);
    assert_eq!(
        kind(&BASE.replace("tokens: 1,", "tokens: 0,")),
        ProfileErrorKind::Invalid
    );
    assert_eq!(
        kind(&BASE.replace("per: 1s", "per: 0s")),
        ProfileErrorKind::Invalid
    );
    assert_eq!(
        kind(&BASE.replace("window: 1s", "window: 0ms")),
        ProfileErrorKind::Invalid
    );
    assert_eq!(
        kind(&BASE.replace("slots_per_window: 10", "slots_per_window: 16777216")),
        ProfileErrorKind::Invalid
    );
    assert_eq!(
        kind(&BASE.replace("class: read", "class: writ")),
        ProfileErrorKind::Invalid
    );
    // The flag that tells values from syntax does not leak into the next parse.
    assert_eq!(kind("name: ["), ProfileErrorKind::Syntax);
}

#[test]
fn unreadable_files_are_io_errors_with_their_source() {
    let e = Profile::from_path("no/such/profile.yaml").unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Io);
    let source = std::error::Error::source(&e).expect("the io::Error");
    let io = source.downcast_ref::<io::Error>().expect("an io::Error");
    assert_eq!(io.kind(), io::ErrorKind::NotFound);
    assert_eq!(e.clone(), e);
    let e = Profile::from_path("examples/profiles").unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Io, "{e}");
}

/// Deserializing from any serde format validates, not only `from_yaml`.
#[test]
fn serde_json_deserialization_validates() {
    let json = serde_json::to_value(base()).unwrap();
    let back: Profile = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, base());
    let refused = |path: &[&str], value: serde_json::Value, words: &str| {
        let mut j = json.clone();
        let (last, parents) = path.split_last().unwrap();
        let mut at = &mut j;
        for p in parents {
            at = match p.parse::<usize>() {
                Ok(i) => &mut at[i],
                Err(_) => &mut at[*p],
            };
        }
        at[*last] = value;
        let text = serde_json::to_string(&j).unwrap();
        let e = serde_json::from_str::<Profile>(&text).expect_err(words);
        assert!(e.to_string().contains(words), "{words:?} not in {e}");
    };
    use serde_json::json;
    refused(
        &["shared_capacity", "slots_per_window"],
        json!(1u64 << 24),
        "expected a slot count",
    );
    refused(
        &["shared_capacity", "window"],
        json!("0s"),
        "greater than zero",
    );
    refused(&["identities", "capacity"], json!(0), "invalid value 0");
    refused(
        &["route_classes", "read", "burst", "tokens"],
        json!(0),
        "invalid value 0",
    );
    refused(
        &["route_classes", "read", "sustained", "per"],
        json!("367d"),
        "366d",
    );
    refused(&["shared_capacity", "tenant_share"], json!(1.5), "share");
    refused(
        &["catalog", "throttled", "code"],
        json!("a\r\nb"),
        "invalid code",
    );
    refused(
        &["routes", "0", "class"],
        json!("writ"),
        "unknown route class",
    );
    refused(
        &["shared_capacity", "tenants", "acme", "shard"],
        json!(2),
        "below shards",
    );
}

/// The edges `validate` accepts (a `Retry-After` cap of exactly 1s, the last shard, `*` for any
/// method) and the methods next to them it refuses.
#[test]
fn validate_accepts_its_boundaries() {
    let mut p = base();
    assert_eq!(p.shared_capacity.as_ref().unwrap().shards.get(), 2);
    let acme = p.shared_capacity.as_mut().unwrap().tenants.get_mut("acme");
    acme.unwrap().shard = Some(1);
    p.retry_after.max = Period::from_secs(1).unwrap();
    p.validate().unwrap();
    p.routes[0].method = "*".into();
    p.validate().unwrap();
    for m in ["", "get", "Get", "**", "GET "] {
        let mut q = p.clone();
        q.routes[0].method = m.into();
        let e = invalid(q.validate());
        assert!(e.message().contains("routes[0].method"), "{m:?}: {e}");
    }
}
