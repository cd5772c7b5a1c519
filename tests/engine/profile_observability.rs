//! The `observability:` section: `near_limit` and `sdk_versions` are optional, and a bad value
//! is refused with its line and column, like every other field.

use tollgate::profile::{ProfileErrorKind, MAX_SDK_VERSIONS};
use tollgate::Profile;

const CLASSES: &str = "route_classes:\n  read:\n    burst: { tokens: 1, per: 1s }\n    \
                       sustained: { tokens: 10, per: 1h }\n";

fn parse(observability: &str) -> Result<Profile, tollgate::ProfileError> {
    Profile::from_yaml(&format!(
        "name: n\nidentities: {{ capacity: 64 }}\nobservability:\n{observability}{CLASSES}"
    ))
}

#[test]
fn the_section_is_optional_and_round_trips() {
    let p = Profile::from_yaml(&format!(
        "name: n\nidentities: {{ capacity: 64 }}\n{CLASSES}"
    ))
    .unwrap();
    assert_eq!(p.observability.near_limit.get(), 0.2);
    assert!(p.observability.sdk_versions.is_empty());
    let text = serde_yaml_ng::to_string(&p).unwrap();
    assert!(
        !text.contains("observability"),
        "defaults are not written: {text}"
    );
    let p = parse("  near_limit: 0.1\n  sdk_versions: [tollgate-client/0.1.0, curl]\n").unwrap();
    let tokens: Vec<&str> = p
        .observability
        .sdk_versions
        .iter()
        .map(|t| t.as_str())
        .collect();
    assert_eq!(tokens, ["tollgate-client/0.1.0", "curl"]);
    let again = Profile::from_yaml(&serde_yaml_ng::to_string(&p).unwrap()).unwrap();
    assert_eq!(again, p);
}

#[test]
fn a_bad_near_limit_is_refused_with_its_line_and_column() {
    let e = parse("  near_limit: 1.5\n").unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Invalid, "{e}");
    assert_eq!((e.line(), e.column()), (Some(4), Some(15)), "{e}");
    assert!(
        e.message().contains("observability.near_limit"),
        "{}",
        e.message()
    );
    let e = parse("  near_limt: 0.1\n").unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Syntax, "{e}");
    assert_eq!(e.line(), Some(4), "{e}");
}

#[test]
fn bad_sdk_versions_are_refused_with_their_line_and_column() {
    // Not a product token (a space), the second entry, line 7 column 7 (block style: the
    // parser reports the list, the position is refined to the entry).
    let e = parse(
        "  sdk_versions:\n    - tollgate-client/0.1.0\n    # a comment\n    - \"bad token\"\n",
    )
    .unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Invalid, "{e}");
    assert_eq!((e.line(), e.column()), (Some(7), Some(7)), "{e}");
    assert!(
        e.message().starts_with("observability.sdk_versions[1]: "),
        "{e}"
    );
    // Flow style, across lines and with quoted commas: the second entry, then the third.
    let e = parse("  sdk_versions: [a/1, \"b,c\",\n     'd e', f/2]\n").unwrap_err();
    assert!(e.message().contains("\"b,c\""), "{e}");
    assert_eq!((e.line(), e.column()), (Some(4), Some(23)), "{e}");
    let e = parse("  sdk_versions: [a/1, b/1,\n     'd e', f/2]\n").unwrap_err();
    assert!(
        e.message().starts_with("observability.sdk_versions[2]: "),
        "{e}"
    );
    assert_eq!((e.line(), e.column()), (Some(5), Some(6)), "{e}");
    for bad in ["a/", "/1", "a/1/2", "other", "none", "x\u{e9}"] {
        let e = parse(&format!("  sdk_versions: [{bad:?}]\n")).unwrap_err();
        assert_eq!(e.kind(), ProfileErrorKind::Invalid, "{bad}: {e}");
        assert_eq!(e.line(), Some(4), "{bad}: {e}");
    }
    let e = parse("  sdk_versions: [curl, curl]\n").unwrap_err();
    assert!(e.message().contains("twice"), "{e}");
    assert!(e.line().is_some(), "{e}");
    let many: Vec<String> = (0..=MAX_SDK_VERSIONS).map(|i| format!("c/{i}")).collect();
    let e = parse(&format!("  sdk_versions: [{}]\n", many.join(", "))).unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Invalid, "{e}");
    assert!(e.message().contains("at most 32"), "{e}");
    assert_eq!(e.line(), Some(4), "{e}");
}
