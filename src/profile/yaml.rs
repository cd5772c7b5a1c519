//! Reading a profile from YAML: the size and nesting guard, parsing, and the positions
//! (line and column) that point users at the offending value.

use std::io::Read;
use std::path::Path;

use super::error::{watching_values, ProfileError, ProfileErrorKind};
use super::schema::{Profile, RawProfile};

impl Profile {
    /// Parses and validates a profile.
    ///
    /// A UTF-8 byte-order mark at the start is skipped (YAML allows one there, and editors
    /// on Windows write it); positions count from after it, as editors show them.
    pub fn from_yaml(src: &str) -> Result<Profile, ProfileError> {
        let src = src.strip_prefix('\u{feff}').unwrap_or(src);
        Profile::from_yaml_unstripped(src).map_err(ProfileError::shortened)
    }

    fn from_yaml_unstripped(src: &str) -> Result<Profile, ProfileError> {
        check_shape(src)?;
        let de = serde_yaml_ng::Deserializer::from_str(src);
        // The raw form, so that the checks across fields run here, where the source is at
        // hand to give them a position.
        let (parsed, value_refused) =
            watching_values(|| serde_path_to_error::deserialize::<_, RawProfile>(de));
        let raw = parsed.map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            // serde_yaml_ng puts its own (shorter) path in front and the position at the end;
            // both are replaced by the full field path and the position of the field itself.
            let mut msg = inner.to_string();
            if let Some(i) = msg.rfind(" at line ") {
                msg.truncate(i);
            }
            if let Some((head, rest)) = msg.split_once(": ") {
                if !head.contains(' ') {
                    msg = rest.to_owned();
                }
            }
            let pos = inner.location().map(|l| {
                let last = path.rsplit('.').next().unwrap_or("");
                let at = (l.line(), l.column());
                sequence_item(src, at, last).unwrap_or_else(|| refine_position(src, at, last))
            });
            let msg = if path == "." {
                msg
            } else {
                format!("{path}: {msg}")
            };
            let kind = if value_refused {
                ProfileErrorKind::Invalid
            } else {
                ProfileErrorKind::Syntax
            };
            ProfileError::new(kind, msg).at(pos)
        })?;
        let profile = raw.unchecked();
        profile.check().map_err(|r| {
            // The value as printed may be written otherwise in the source (`1e-5`, `0.00001`):
            // then the key alone.
            let at =
                find_key_value(src, r.key, &r.value).or_else(|| find_key_value(src, r.key, ""));
            ProfileError::invalid(r.message).at(at)
        })?;
        Ok(profile)
    }

    /// Reads, parses and validates a profile file. Errors name the file. At most one byte
    /// more than [`MAX_PROFILE_BYTES`] is read: a larger file is refused unread.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Profile, ProfileError> {
        let path = path.as_ref();
        let cannot_read =
            |e: std::io::Error| ProfileError::io(format!("cannot read {}: {e}", path.display()), e);
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_PROFILE_BYTES as u64 + 1).read_to_end(&mut bytes))
            .map_err(cannot_read)?;
        if bytes.len() > MAX_PROFILE_BYTES {
            return Err(ProfileError::new(
                ProfileErrorKind::Syntax,
                format!(
                    "{}: the profile is more than the {MAX_PROFILE_BYTES} bytes allowed",
                    path.display()
                ),
            ));
        }
        let src = String::from_utf8(bytes)
            .map_err(|e| cannot_read(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        Profile::from_yaml(&src).map_err(|e| {
            let message = format!("{}: {}", path.display(), e.message());
            e.with_message(message)
        })
    }
}

/// The largest profile source, in bytes.
pub const MAX_PROFILE_BYTES: usize = 4 << 20;

/// Refuses, before anything is deserialized, a source too large, nested too deep or whose
/// aliases repeat too much ([`shape::check_shape`](super::shape), which says why nothing can
/// hide from it): libyaml takes time quadratic in the flow-nesting depth (64 KiB of `{a: ` took
/// seconds), and an alias replays its anchor's whole node.
fn check_shape(src: &str) -> Result<(), ProfileError> {
    if src.len() > MAX_PROFILE_BYTES {
        return Err(ProfileError::new(
            ProfileErrorKind::Syntax,
            format!(
                "the profile is {} bytes, more than the {MAX_PROFILE_BYTES} allowed",
                src.len()
            ),
        ));
    }
    super::shape::check_shape(src)
}

/// serde_yaml_ng reports a bad scalar at the mapping that holds it; the value of `key` at or
/// after that position is where the user should look.
fn refine_position(src: &str, (line, column): (usize, usize), key: &str) -> (usize, usize) {
    let at = src
        .lines()
        .nth(line.saturating_sub(1))
        .and_then(|l| l.get(column.saturating_sub(1)..));
    let is_mapping = at.is_some_and(|t| {
        let name = t
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        t.starts_with('{') || (name > 0 && t[name..].trim_start().starts_with(':'))
    });
    if !is_mapping || key.is_empty() || key.contains('[') {
        return (line, column);
    }
    let tail: String = src
        .lines()
        .skip(line.saturating_sub(1))
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                // Blank out what precedes the mapping on its first line, keeping columns.
                let cut = column.saturating_sub(1).min(l.len());
                format!("{}{}\n", " ".repeat(cut), &l[cut..])
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    match find_key_value(&tail, key, "") {
        Some((l, _)) => {
            let text = tail.lines().nth(l - 1).unwrap_or("");
            let at = text
                .find(&format!("{key}:"))
                .or_else(|| text.find(key))
                .unwrap_or(0);
            let after = &text[at + key.len()..];
            let value = after.trim_start_matches([':', ' ', '\t']);
            (line + l - 1, text.len() - value.len() + 1)
        }
        None => (line, column),
    }
}

/// serde_yaml_ng reports a bad entry of a list of scalars (`sdk_versions[2]`) at the list's
/// start; this is the position of entry `N` itself, in a block (`- a`) or flow (`[a, b]`) list.
/// `None` when `key` names no entry or the source there is not a list.
fn sequence_item(src: &str, (line, column): (usize, usize), key: &str) -> Option<(usize, usize)> {
    let n: usize = key.strip_suffix(']')?.rsplit_once('[')?.1.parse().ok()?;
    let lines: Vec<&str> = src.lines().collect();
    let first = lines.get(line.checked_sub(1)?)?;
    let col = column.checked_sub(1)?;
    let at = first.get(col..)?;
    if at.starts_with('-') {
        // Block: the entries are the lines with `-` at this column and only spaces before it.
        let mut seen = 0;
        for (i, l) in lines.iter().enumerate().skip(line - 1) {
            let body = l.trim_start();
            if body.is_empty() || body.starts_with('#') {
                continue;
            }
            let indent = l.len() - body.len();
            if indent < col || (indent == col && !body.starts_with('-')) {
                return None;
            }
            if indent == col {
                if seen == n {
                    let value = body[1..].trim_start();
                    return Some((i + 1, l.len() - value.len() + 1));
                }
                seen += 1;
            }
        }
        return None;
    }
    if !at.starts_with('[') {
        return None;
    }
    // Flow: entries are separated by commas at depth 1, outside quotes.
    let (mut depth, mut seen, mut quote, mut escaped) = (0usize, 0usize, None::<char>, false);
    let mut want_start = false;
    for (i, l) in lines.iter().enumerate().skip(line - 1) {
        let from = if i == line - 1 { col } else { 0 };
        let mut after_space = true;
        for (j, c) in l.char_indices().filter(|(j, _)| *j >= from) {
            if want_start && !c.is_whitespace() {
                if seen == n {
                    return Some((i + 1, j + 1));
                }
                want_start = false;
            }
            match (quote, c) {
                (Some(_), _) if escaped => escaped = false,
                (Some('"'), '\\') => escaped = true,
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '[' | '{') => {
                    depth += 1;
                    want_start |= depth == 1;
                }
                (None, ']' | '}') => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        return None;
                    }
                }
                (None, ',') if depth == 1 => {
                    seen += 1;
                    want_start = true;
                }
                // A comment starts after a space; `a#b` is a scalar.
                (None, '#') if after_space => break,
                _ => {}
            }
            after_space = c.is_whitespace();
        }
    }
    None
}

/// Finds `key: value` (block or flow style, value optionally quoted) in the source, for a
/// position on checks that run after parsing. `value` empty matches the key alone.
fn find_key_value(src: &str, key: &str, value: &str) -> Option<(usize, usize)> {
    for (ln, line) in src.lines().enumerate() {
        let mut from = 0;
        while let Some(i) = line[from..].find(key) {
            let start = from + i;
            from = start + key.len();
            let before_ok = start == 0
                || matches!(
                    line.as_bytes()[start - 1],
                    b' ' | b'{' | b',' | b'-' | b'\t'
                );
            let rest = line[from..].trim_start();
            let Some(rest) = rest.strip_prefix(':') else {
                continue;
            };
            if !before_ok {
                continue;
            }
            let rest = rest.trim_start();
            let rest = rest.trim_start_matches(['"', '\'']);
            if value.is_empty() || rest.starts_with(value) {
                let col = if value.is_empty() {
                    start
                } else {
                    line.len() - rest.len()
                };
                return Some((ln + 1, col + 1));
            }
        }
    }
    None
}
