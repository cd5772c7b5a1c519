//! Hostile profile sources must not make the parser burn CPU. The nesting guard scanned the text with its own idea of quoting and comments, so
//! `name: Bob's` on an earlier line or `[a#b, …]` hid deep flow nesting from it (65,536 levels
//! took 9.4 s, hours at the 4 MiB limit); names were checked for duplicates against every name
//! before them; and a UTF-8 byte-order mark broke every profile with a misleading error. The
//! depth and alias checks now run on libyaml's own events (`src/profile/shape.rs`).

use tollgate::profile::{ProfileErrorKind, MAX_PROFILE_ALIAS_NODES, MAX_PROFILE_NESTING};
use tollgate::{Profile, ProfileError};

#[path = "../../benches/profile_parse/inputs.rs"]
mod inputs;

use inputs::HEAD;

/// Refused as a syntax error whose message has `needle`, at `(line, column)`.
fn refused_at(src: &str, needle: &str, at: (usize, usize)) -> ProfileError {
    let e = Profile::from_yaml(src).expect_err(&src[..src.len().min(200)]);
    assert_eq!(e.kind(), ProfileErrorKind::Syntax, "{e}");
    assert!(e.message().contains(needle), "{e}");
    assert_eq!((e.line(), e.column()), (Some(at.0), Some(at.1)), "{e}");
    e
}

const DEEP: &str = "collections nested more than 32 deep";

#[test]
fn nesting_hidden_behind_a_quote_is_refused() {
    let src = format!("name: Bob's\nx: {}{}\n", "[".repeat(64), "]".repeat(64));
    // The root mapping is the first level, so the 32nd `[` (column 3 + 32) is the 33rd.
    refused_at(&src, DEEP, (2, 35));
    let src = format!("name: \"Bob\\\"s\"\nx: {}\n", "{a: ".repeat(64));
    refused_at(&src, DEEP, (2, 128));
}

#[test]
fn nesting_hidden_behind_a_hash_is_refused() {
    let src = format!("x: [a#b, {}{}]\n", "[".repeat(64), "]".repeat(64));
    refused_at(&src, DEEP, (1, 40));
    // A real comment hides nothing either: the nesting on the next line counts.
    let src = format!("x: # ' [\n  {}\n", "[".repeat(64));
    refused_at(&src, DEEP, (2, 34));
}

#[test]
fn block_nesting_is_refused() {
    // `- - - a`: block sequences nested on one line.
    let src = format!("x:\n{}a\n", "- ".repeat(64));
    refused_at(&src, DEEP, (2, 63));
    // Nesting by indentation.
    let mut src = String::new();
    for i in 0..40 {
        src.push_str(&format!("{}k{i}:\n", " ".repeat(i)));
    }
    refused_at(&src, DEEP, (33, 33));
}

#[test]
fn nesting_through_aliases_is_refused() {
    // 20 levels behind an alias inside 20 more.
    let src = format!(
        "a: &a {}1{}\nb: {}*a{}\n",
        "[".repeat(20),
        "]".repeat(20),
        "[".repeat(20),
        "]".repeat(20)
    );
    let e = refused_at(&src, DEEP, (2, 24));
    assert!(e.message().contains("alias"), "{e}");
}

#[test]
fn an_alias_inside_its_own_node_is_refused() {
    let e = refused_at(
        &format!("{HEAD}routes: &a [*a, *a]\n"),
        "an alias inside the node it names",
        (7, 13),
    );
    assert!(e.to_string().contains("line 7 column 13"), "{e}");
    // The name is the node's from its start: a later node may take it again.
    let src = format!("{HEAD}routes:\n  - &a {{method: GET, path: /, class: c}}\n  - *a\n");
    assert_eq!(Profile::from_yaml(&src).unwrap().routes.len(), 2);
}

#[test]
fn alias_bomb_is_refused() {
    let e = Profile::from_yaml(&inputs::alias_bomb()).unwrap_err();
    assert!(
        e.message().contains(&format!(
            "aliases repeat more than {MAX_PROFILE_ALIAS_NODES} nodes"
        )),
        "{e}"
    );
    assert!(e.line().is_some() && e.column().is_some(), "{e}");
}

/// Every 4 MiB attack of the bench, at 64 KiB: refused with a position, or parsed. How long
/// they take is the benchmark's business (`benches/profile_parse`, linear in the input), not a
/// timed assertion's.
#[test]
fn adversarial_inputs_are_refused_with_a_position_or_parsed() {
    for (name, src) in inputs::adversarial(64 << 10) {
        if let Err(e) = Profile::from_yaml(&src) {
            assert!(
                matches!(
                    e.kind(),
                    ProfileErrorKind::Syntax | ProfileErrorKind::Invalid
                ),
                "{name}: {e}"
            );
            assert!(e.line().is_some(), "{name}: no position: {e}");
        }
    }
}

/// What the old guard miscounted still parses: quotes with `''` escapes, `#` inside plain and
/// quoted scalars, brackets in comments and block scalars.
#[test]
fn quotes_hashes_and_block_scalars_in_valid_profiles_still_parse() {
    let brackets = "[".repeat(64);
    let src = format!(
        "name: Bob's [{{ # {brackets}\n{}",
        HEAD.trim_start_matches("name: t\n")
    );
    assert_eq!(Profile::from_yaml(&src).unwrap().name, "Bob's [{");
    for (name, want) in [
        (format!("'it''s {brackets}'"), format!("it's {brackets}")),
        (format!("\"a\\\"#{brackets}\""), format!("a\"#{brackets}")),
        ("a#b".to_owned(), "a#b".to_owned()),
        (
            format!("|\n  {brackets}\n  {{a: "),
            format!("{brackets}\n{{a: \n"),
        ),
    ] {
        let src = HEAD.replace("name: t", &format!("name: {name}"));
        let p = Profile::from_yaml(&src).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.name, want);
    }
    // Exactly the limit is not refused for its depth (the root mapping is one level).
    let src = format!(
        "{HEAD}x: {}{}\n",
        "[".repeat(MAX_PROFILE_NESTING - 1),
        "]".repeat(MAX_PROFILE_NESTING - 1)
    );
    let e = Profile::from_yaml(&src).unwrap_err();
    assert!(e.message().contains("unknown field `x`"), "{e}");
}

/// A UTF-8 byte-order mark at the start is skipped: YAML allows one there and editors write
/// it. Positions count from after it, as editors show them.
#[test]
fn byte_order_mark_is_skipped() {
    let example = std::fs::read_to_string("examples/profiles/example.yaml").unwrap();
    let with_bom = format!("\u{feff}{example}");
    assert_eq!(
        Profile::from_yaml(&with_bom).unwrap(),
        Profile::from_yaml(&example).unwrap()
    );
    let bad = HEAD.replace("capacity: 8", "capacity: 0");
    assert_eq!(
        Profile::from_yaml(&format!("\u{feff}{bad}")).unwrap_err(),
        Profile::from_yaml(&bad).unwrap_err()
    );
    // Unstripped, libyaml read the mark as a document of its own before the profile.
    let raw = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&format!("\u{feff}{bad}"));
    assert!(raw.is_err());
}

/// Many names: the duplicate check is hashed, and still refuses a duplicate with its position.
#[test]
fn many_names_parse_and_duplicates_are_still_refused() {
    let mut src = format!(
        "{HEAD}shared_capacity:\n  shards: 1\n  window: 1s\n  slots_per_window: 1\n  \
         tenant_share: 1\n  tenants:\n"
    );
    for i in 0..5000 {
        src.push_str(&format!("    t{i}: {{}}\n"));
    }
    let p = Profile::from_yaml(&src).unwrap();
    assert_eq!(p.shared_capacity.unwrap().tenants.len(), 5000);
    src.push_str("    t17: {}\n");
    let e = Profile::from_yaml(&src).unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Invalid);
    assert!(e.message().contains("duplicate name \"t17\""), "{e}");
    assert!(e.line().is_some(), "{e}");
}

/// Through the C ABI's reload: the attack is refused and the limiter is as it was.
#[test]
fn refused_reload_changes_nothing() {
    use tollgate_ffi::*;
    let yaml = "name: f\nidentities: { capacity: 16 }\nroute_classes:\n  c:\n    \
                burst: { tokens: 1, per: 1h }\n    sustained: { tokens: 10, per: 1h }\n";
    let mut l = core::ptr::null_mut();
    let admit = |l: *mut tg_limiter| {
        let mut out: tg_decision = unsafe { core::mem::zeroed() };
        // SAFETY: valid buffers and out pointer.
        let r = unsafe {
            tg_admit(
                l,
                b"t".as_ptr().cast(),
                1,
                b"p".as_ptr().cast(),
                1,
                0,
                &mut out,
            )
        };
        assert_eq!(r, tg_result::Ok);
        out.kind
    };
    // SAFETY: valid buffer and out pointer.
    let r = unsafe { tg_limiter_new_from_yaml(yaml.as_ptr().cast(), yaml.len(), &mut l) };
    assert_eq!(r, tg_result::Ok);
    assert_eq!(admit(l), tg_decision_kind::Admit);
    let attack = format!("name: Bob's\nx: {}\n", "[".repeat(1 << 16));
    // SAFETY: `l` is live; the buffer is valid for its length.
    let r = unsafe { tg_limiter_reload(l, attack.as_ptr().cast(), attack.len()) };
    assert_eq!(r, tg_result::InvalidProfile);
    // The one token is still spent.
    assert_eq!(admit(l), tg_decision_kind::Throttle);
    // SAFETY: from `tg_limiter_new_from_yaml`, freed once.
    unsafe { tg_limiter_free(l) };
}

/// A message quoting a huge value keeps its two ends: the value's start and what was expected.
#[test]
fn messages_quoting_huge_values_are_shortened() {
    let src = format!("{HEAD}mode: {}\n", "k".repeat(1 << 20));
    let e = Profile::from_yaml(&src).unwrap_err();
    let m = e.message();
    assert!(m.len() <= 1024, "{} bytes", m.len());
    assert!(m.starts_with("mode: unknown variant `kkk"), "{m}");
    assert!(m.contains("bytes cut"), "{m}");
    assert!(m.ends_with("expected `enforce` or `shadow`"), "{m}");
    assert_eq!((e.line(), e.column()), (Some(7), Some(7)));
    let short = format!("{HEAD}mode: {}\n", "é".repeat(600));
    let e = Profile::from_yaml(&short).unwrap_err();
    assert!(e.message().len() <= 1024 && e.message().contains("bytes cut"));
}

/// A profile file over the limit is refused after reading one byte more than the limit.
#[test]
fn oversized_profile_files_are_refused_unread() {
    use tollgate::profile::MAX_PROFILE_BYTES;
    let dir = std::env::temp_dir().join(format!("tollgate-b4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("big.yaml");
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(8 * MAX_PROFILE_BYTES as u64).unwrap();
    let e = Profile::from_path(&p).unwrap_err();
    assert_eq!(e.kind(), ProfileErrorKind::Syntax);
    assert!(e.message().contains("big.yaml"), "{e}");
    assert!(
        e.message().contains("more than the 4194304 bytes allowed"),
        "{e}"
    );
    let e = Profile::from_path("/dev/zero").unwrap_err();
    assert!(
        e.message().contains("more than the 4194304 bytes allowed"),
        "{e}"
    );
    // Exactly the limit is read and parsed.
    let mut src = format!("{HEAD}#");
    src.push_str(&"x".repeat(MAX_PROFILE_BYTES - src.len() - 1));
    src.push('\n');
    std::fs::write(&p, &src).unwrap();
    assert!(Profile::from_path(&p).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

mod agrees_with_the_parser {
    //! The guard counts what the parser builds: on generated sources mixing the tricks that
    //! hid nesting from the old text scan (quotes with escapes, `#` in and out of comments,
    //! block scalars, plain scalars with `'`, flow and block collections, aliases), a source
    //! that `serde_yaml_ng` reads as a value nested more than 32 deep is refused for its depth,
    //! and one nested at most 32 deep is not.

    use proptest::prelude::*;
    use serde_yaml_ng::Value;
    use tollgate::Profile;

    /// Nesting of the value, aliases expanded (as the deserializer replays them).
    fn depth(v: &Value) -> usize {
        match v {
            Value::Sequence(s) => 1 + s.iter().map(depth).max().unwrap_or(0),
            Value::Mapping(m) => {
                1 + m
                    .iter()
                    .map(|(k, v)| depth(k).max(depth(v)))
                    .max()
                    .unwrap_or(0)
            }
            Value::Tagged(t) => depth(&t.value),
            _ => 0,
        }
    }

    /// Lines that precede the nesting, each a trap for a text scan.
    const TRAPS: &[&str] = &[
        "name: Bob's\n",
        "q: 'it''s [{'\n",
        "d: \"a\\\"[{ #\"\n",
        "h: a#b [\n",
        "c: x # ' \" [ {\n",
        "# ' \" [[[ {{{\n",
        "b: |\n  [[[ {{{ '\n  \"\n",
        "f: >-\n  ]]] }}}\n",
        "p: a'b\n  'c [\n",
        "e: ]]]\n",
        "t: !!str '['\n",
        "a: &a [[[x]]]\n",
    ];

    /// The nesting itself: flow sequences and mappings, block sequences, maybe an alias.
    fn nesting() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(0u8..3, 1..40),
            prop::collection::vec(0u8..4, 0..12),
            any::<bool>(),
        )
            .prop_map(|(kinds, blocks, alias)| {
                let mut s = String::from("n: ");
                for _ in &blocks {
                    s.push_str("\n  - ");
                }
                let mut close = String::new();
                for k in &kinds {
                    match k {
                        0 => {
                            s.push('[');
                            close.insert(0, ']');
                        }
                        1 => {
                            s.push_str("{k: ");
                            close.insert(0, '}');
                        }
                        _ => {
                            s.push_str("[a#b, 'x]', \"y}\", ");
                            close.insert(0, ']');
                        }
                    }
                }
                s.push_str(if alias { "*a" } else { "z" });
                s.push_str(&close);
                s.push('\n');
                s
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn refused_for_depth_exactly_when_nested_more_than_32(
            traps in prop::collection::vec(0..TRAPS.len(), 0..5),
            body in nesting(),
        ) {
            let mut src = String::from("a: &a [[[x]]]\n");
            for t in traps {
                src.push_str(TRAPS[t]);
            }
            src.push_str(&body);
            let Ok(value) = serde_yaml_ng::from_str::<Value>(&src) else {
                // Not YAML (a repeated key, say): nothing to compare.
                return Ok(());
            };
            let deep = depth(&value) > 32;
            let refused_for_depth = Profile::from_yaml(&src)
                .is_err_and(|e| e.message().contains("nested more than 32 deep"));
            prop_assert_eq!(refused_for_depth, deep, "depth {} of\n{}", depth(&value), src);
        }
    }
}
