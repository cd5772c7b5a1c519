//! The optional `descriptors:` section (tollgate-server's mapping of Envoy descriptors): every
//! malformed or contradictory rule is refused with the field and its line and column, and a
//! profile without the section is what it was.

use tollgate::profile::Unmatched;
use tollgate::Profile;

const HEAD: &str = "\
name: t
identities: { capacity: 16 }
route_classes:
  read:
    burst:     { tokens: 5, per: 1s }
    sustained: { tokens: 100, per: 1h }
  write:
    burst:     { tokens: 2, per: 1s }
    sustained: { tokens: 100, per: 1h }
";

fn with(section: &str) -> Result<Profile, tollgate::ProfileError> {
    Profile::from_yaml(&format!("{HEAD}{section}"))
}

/// The error for `section`, checked to name every word and to sit at `line` (1-based, in the
/// whole source; the section starts at line 10).
#[track_caller]
fn refused(section: &str, words: &[&str], line: usize) {
    let e = with(section).expect_err(section);
    for w in words {
        assert!(e.to_string().contains(w), "{w:?} not in {e}");
    }
    assert_eq!(e.line(), Some(line), "{e}");
    assert!(e.column().is_some(), "{e}");
}

#[test]
fn a_full_section_is_read() {
    let p = with(
        "descriptors:
  domain: edge
  unknown_domain: refuse
  rules:
    - { when: { generic_key: reports }, tenant: tenant, principal: user, class: write }
    - { tenant: tenant, principal: user, class_from: route_class }
    - { anonymous: remote_address, class: read }
",
    )
    .unwrap();
    let d = p.descriptors.as_ref().unwrap();
    assert_eq!(d.domain.as_str(), "edge");
    assert_eq!(d.unknown_domain, Unmatched::Refuse);
    assert_eq!(d.unmatched, Unmatched::Allow);
    assert_eq!(d.rules.len(), 3);
    assert_eq!(
        d.rules[0].when.get("generic_key").map(String::as_str),
        Some("reports")
    );
    assert_eq!(
        d.rules[1].class_from.as_ref().unwrap().as_str(),
        "route_class"
    );
    assert_eq!(
        d.rules[2].anonymous.as_ref().unwrap().as_str(),
        "remote_address"
    );
    // Serialized and read again: the same profile.
    let yaml = serde_yaml_ng::to_string(&p).unwrap();
    assert_eq!(Profile::from_yaml(&yaml).unwrap(), p);
}

#[test]
fn the_section_is_optional() {
    assert_eq!(with("").unwrap().descriptors, None);
    let example = include_str!("../../examples/profiles/example.yaml");
    assert!(Profile::from_yaml(example).is_ok());
}

#[test]
fn bad_rules_are_refused_with_their_position() {
    refused(
        "descriptors:\n  domain: edge\n  rules:\n    - { tenant: t, principal: u, class: wrte }\n",
        &["descriptors.rules[0].class", "unknown route class \"wrte\""],
        13,
    );
    refused(
        "descriptors:\n  domain: edge\n  rules:\n    - { tenant: t, class: read }\n",
        &["rules[0].principal", "needs `principal`"],
        13,
    );
    refused(
        "descriptors:\n  domain: edge\n  rules:\n    - { principal: u, class: read }\n",
        &["rules[0].tenant", "needs `tenant`"],
        13,
    );
    refused(
        "descriptors:\n  domain: edge\n  rules:\n    - { tenant: t, principal: u, anonymous: a, class: read }\n",
        &["rules[0].anonymous", "not both"],
        13,
    );
    refused(
        "descriptors:\n  domain: edge\n  rules:\n    - { anonymous: a, class: read, class_from: c }\n",
        &["rules[0].class", "`class` or `class_from`"],
        13,
    );
    refused(
        "descriptors:\n  domain: edge\n  rules:\n    - { anonymous: a, class_from: a }\n",
        &["rules[0]", "named twice"],
        12,
    );
    refused(
        "descriptors:\n  domain: edge\n  rules: []\n",
        &["descriptors.rules", "at least one rule"],
        12,
    );
}

#[test]
fn bad_fields_and_values_are_refused_with_their_position() {
    refused(
        "descriptors:\n  domain: edge\n  rules:\n    - { anonymous: a, class: read, colour: red }\n",
        &["descriptors.rules[0]", "unknown field `colour`"],
        13,
    );
    refused(
        "descriptors:\n  domain: edge\n  unmatched: maybe\n  rules:\n    - { anonymous: a, class: read }\n",
        &["descriptors.unmatched", "maybe"],
        12,
    );
    refused(
        "descriptors:\n  domain: \"has space\"\n  rules:\n    - { anonymous: a, class: read }\n",
        &["descriptors.domain", "visible ASCII"],
        11,
    );
    refused(
        "descriptors:\n  rules:\n    - { anonymous: a, class: read }\n",
        &["descriptors", "missing field `domain`"],
        11,
    );
}

#[test]
fn validate_refuses_a_rule_broken_in_rust() {
    let mut p =
        with("descriptors:\n  domain: edge\n  rules:\n    - { anonymous: a, class: read }\n")
            .unwrap();
    p.descriptors.as_mut().unwrap().rules[0].class = Some("gone".into());
    let e = p.validate().unwrap_err();
    assert!(
        e.to_string().contains("unknown route class \"gone\""),
        "{e}"
    );
}

/// The defaults let through what the rules do not cover; a start-up warning says where the
/// caller could choose to be unlimited, and `refuse` silences it.
#[test]
fn allowing_what_the_rules_miss_is_warned_about() {
    let rules = "  rules:
    - { tenant: tenant, principal: user, class_from: class }
    - { anonymous: remote_address, class: read }
";
    let open = with(&format!("descriptors:\n  domain: edge\n{rules}")).unwrap();
    let w = open.descriptors.as_ref().unwrap().warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("unknown_domain") && w[0].contains("refuse"),
        "{}",
        w[0]
    );
    assert!(
        w[1].contains("rules[0]")
            && w[1].contains("\"class\"")
            && w[1].contains("unmatched: refuse"),
        "{}",
        w[1]
    );
    let closed = with(&format!(
        "descriptors:\n  domain: edge\n  unknown_domain: refuse\n  unmatched: refuse\n{rules}"
    ))
    .unwrap();
    assert!(closed.descriptors.unwrap().warnings().is_empty());
    // A fixed class has no value to choose: only the domain is warned about.
    let fixed = with("descriptors:\n  domain: edge\n  rules:\n    - { anonymous: remote_address, class: read }\n").unwrap();
    assert_eq!(fixed.descriptors.unwrap().warnings().len(), 1);
}
