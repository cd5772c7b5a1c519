//! Adversarial profile sources of about `size` bytes each (never more), shared by the
//! `profile_parse` bench (4 MiB, the largest source `Profile::from_yaml` reads) and the
//! regression tests (`tests/engine/profile_hostile.rs`, small sizes).

/// A valid profile head, so that what follows reaches the fields that take many entries.
pub const HEAD: &str = "name: t\nidentities: { capacity: 8 }\nroute_classes:\n  c:\n    \
                        burst: { tokens: 1, per: 1s }\n    sustained: { tokens: 1, per: 1s }\n";

/// `unit` repeated as often as fits in `size` bytes after `head` and before `tail`.
fn fill(head: &str, unit: &str, tail: &str, size: usize) -> String {
    let n = size.saturating_sub(head.len() + tail.len()) / unit.len();
    let mut s = String::with_capacity(size);
    s.push_str(head);
    for _ in 0..n {
        s.push_str(unit);
    }
    s.push_str(tail);
    s
}

/// `open` nested as deep as fits, then closed: `[[[…]]]` after `head`.
fn nested(head: &str, open: &str, close: &str, tail: &str, size: usize) -> String {
    let n = size.saturating_sub(head.len() + tail.len()) / (open.len() + close.len());
    let mut s = String::with_capacity(size);
    s.push_str(head);
    s.push_str(&open.repeat(n));
    s.push_str(&close.repeat(n));
    s.push_str(tail);
    s
}

/// `(name, source)` for each attack.
pub fn adversarial(size: usize) -> Vec<(&'static str, String)> {
    let mut v = vec![
        // A guard that carried the quote of `Bob's` to the next lines missed this.
        (
            "nesting_behind_a_quote",
            nested("name: Bob's\nx: ", "[", "]", "\n", size),
        ),
        // A guard that stopped at any `#`, also one inside a plain scalar, missed this.
        (
            "nesting_behind_a_hash",
            nested("x: [a#b, ", "[", "]", "]\n", size),
        ),
        (
            "flow_maps_behind_a_quote",
            fill("name: Bob's\nx: ", "{a: ", "", size),
        ),
        ("flow_maps", fill("", "{a: ", "", size)),
        // Block sequences nest on one line: `- - - a`.
        ("block_nesting", fill("x:\n", "- ", "a\n", size)),
        ("long_plain_key", fill("", "k", ": 1\n", size)),
        ("long_quoted_key", fill("\"", "k", "\": 1\n", size)),
        // Names are checked against the names before them.
        ("many_tenants", {
            let head = format!(
                "{HEAD}shared_capacity:\n  shards: 1\n  window: 1s\n  slots_per_window: 1\n  \
                     tenant_share: 1\n  tenants:\n"
            );
            let line = |i: usize| format!("    t{i:08}: {{}}\n");
            let n = size.saturating_sub(head.len()) / line(0).len();
            let mut s = head;
            for i in 0..n {
                s.push_str(&line(i));
            }
            s
        }),
        // Every route's class is looked up among the classes.
        ("many_classes_and_routes", {
            let class = |i: usize| {
                format!(
                    "  c{i:07}: {{burst: {{tokens: 1, per: 1s}}, sustained: {{tokens: 1, per: 1s}}}}\n"
                )
            };
            let route = "  - {method: GET, path: /, class: c0000000}\n";
            let n = size / 2 / class(0).len();
            let mut s = String::from("name: t\nidentities: { capacity: 8 }\nroute_classes:\n");
            for i in 0..n {
                s.push_str(&class(i));
            }
            s.push_str("routes:\n");
            let m = size.saturating_sub(s.len()) / route.len();
            s.push_str(&route.repeat(m));
            s
        }),
        ("many_anchors", {
            let head = format!("{HEAD}routes:\n");
            let line = |i: usize| format!("  - &a{i:07} {{method: GET, path: /, class: c}}\n");
            let n = size.saturating_sub(head.len()) / line(0).len();
            let mut s = head;
            for i in 0..n {
                s.push_str(&line(i));
            }
            s
        }),
        (
            "many_aliases",
            fill(
                &format!("{HEAD}routes:\n  - &r {{method: GET, path: /, class: c}}\n"),
                "  - *r\n",
                "",
                size,
            ),
        ),
        // One large anchored sequence repeated by aliases: the alias work is their product.
        ("large_anchor_many_aliases", {
            let mut s = format!("{HEAD}routes: [&a [");
            s.push_str(&"x, ".repeat(size / 2 / 3));
            s.push_str("x]");
            let m = size.saturating_sub(s.len() + 2) / 4;
            s.push_str(&", *a".repeat(m));
            s.push_str("]\n");
            s
        }),
        // Refusals found after parsing, whose position is searched for in the source.
        (
            "unknown_class_at_the_end",
            fill(
                &format!("{HEAD}routes:\n"),
                "  - {method: GET, path: /, class: c}\n",
                "  - {method: GET, path: /, class: nope}\n",
                size,
            ),
        ),
        (
            "bad_value_at_the_end",
            fill(
                &format!("{HEAD}routes:\n"),
                "  - {method: GET, path: /, class: c}\n",
                "retry_after: { max: 0s }\n",
                size,
            ),
        ),
    ];
    v.push(("alias_bomb", alias_bomb()));
    v.retain(|(_, s)| s.len() <= size.max(alias_bomb().len()));
    v
}

/// "Billion laughs": ten levels, each an anchored sequence of ten aliases of the one before;
/// 10^10 scalars once expanded, in under 1 KiB.
pub fn alias_bomb() -> String {
    let mut s =
        format!("{HEAD}routes:\n  - &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let prev = format!("*l{}", i - 1);
        let items = [prev.as_str(); 10].join(", ");
        s.push_str(&format!("  - &l{i} [{items}]\n"));
    }
    s
}
