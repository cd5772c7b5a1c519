//! Why a profile was refused: [`ProfileError`] and its [`ProfileErrorKind`].

use core::fmt;
use std::cell::Cell;
use std::sync::Arc;

/// What kind of refusal a [`ProfileError`] is, so that callers can tell a missing file from a
/// typo from a bad number from a reload that would break callers holding handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProfileErrorKind {
    /// The profile file could not be read ([`std::error::Error::source`] is the `io::Error`).
    Io,
    /// The source is not a profile: malformed or oversized YAML, an unknown or missing field,
    /// a value of the wrong type.
    Syntax,
    /// A value is out of range, or fields disagree (a route naming an unknown class, a tenant
    /// pinned to a shard that does not exist, ...).
    Invalid,
    /// A valid profile that cannot replace the one in force (it drops a route class, resizes
    /// the table, or changes the anonymous prefixes); the old profile stays.
    Reload,
}

/// The longest message of a profile error from parsing, in bytes.
const MAX_MESSAGE_LEN: usize = 1024;

/// Why a profile was refused: its kind, a message naming the field, and the position where
/// the YAML parser knows it.
#[derive(Clone, Debug)]
pub struct ProfileError {
    kind: ProfileErrorKind,
    message: String,
    line: Option<usize>,
    column: Option<usize>,
    /// Shared so that the error stays `Clone` (`io::Error` is not).
    source: Option<Arc<std::io::Error>>,
}

impl ProfileError {
    pub(super) fn new(kind: ProfileErrorKind, message: String) -> Self {
        ProfileError {
            kind,
            message,
            line: None,
            column: None,
            source: None,
        }
    }

    /// A value out of range or fields that disagree.
    pub(super) fn invalid(message: String) -> Self {
        ProfileError::new(ProfileErrorKind::Invalid, message)
    }

    /// A valid profile that cannot replace the one in force.
    pub(crate) fn refused(message: String) -> Self {
        ProfileError::new(ProfileErrorKind::Reload, message)
    }

    pub(super) fn io(message: String, source: std::io::Error) -> Self {
        ProfileError {
            source: Some(Arc::new(source)),
            ..ProfileError::new(ProfileErrorKind::Io, message)
        }
    }

    pub(super) fn at(mut self, pos: Option<(usize, usize)>) -> Self {
        self.line = pos.map(|p| p.0);
        self.column = pos.map(|p| p.1);
        self
    }

    /// The message with its middle cut out when longer than [`MAX_MESSAGE_LEN`] bytes: a
    /// message quoting a 4 MiB key says no more than one quoting its ends, and both ends
    /// matter (the value, then what was expected).
    pub(super) fn shortened(mut self) -> Self {
        let m = &self.message;
        if m.len() > MAX_MESSAGE_LEN {
            let keep = MAX_MESSAGE_LEN / 2 - 32;
            // Character boundaries at or below `keep`, at or above `len - keep` (0 and `len`
            // are boundaries).
            let head = (0..=keep)
                .rev()
                .find(|&i| m.is_char_boundary(i))
                .unwrap_or(0);
            let tail = (m.len() - keep..=m.len())
                .find(|&i| m.is_char_boundary(i))
                .unwrap_or(m.len());
            self.message = format!(
                "{}[… {} bytes cut …]{}",
                &m[..head],
                tail - head,
                &m[tail..]
            );
        }
        self
    }

    pub(super) fn with_message(mut self, message: String) -> Self {
        self.message = message;
        self
    }

    /// What kind of refusal this is.
    pub fn kind(&self) -> ProfileErrorKind {
        self.kind
    }
    /// What is wrong, naming the field.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// 1-based line of the offending value, where known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }
    /// 1-based column of the offending value, where known.
    pub fn column(&self) -> Option<usize> {
        self.column
    }
}

/// Equal when kind, message and position are; the I/O source is not compared (`io::Error`
/// has no equality), its text is already in the message.
impl PartialEq for ProfileError {
    fn eq(&self, other: &Self) -> bool {
        (self.kind, &self.message, self.line, self.column)
            == (other.kind, &other.message, other.line, other.column)
    }
}

impl Eq for ProfileError {}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(
                f,
                "invalid profile at line {l} column {c}: {}",
                self.message
            ),
            _ => write!(f, "invalid profile: {}", self.message),
        }
    }
}

impl std::error::Error for ProfileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

thread_local! {
    /// Set when a validated scalar refused its value during deserialization. Serde errors
    /// carry only text, so this is how `from_yaml` tells [`ProfileErrorKind::Invalid`] from
    /// [`ProfileErrorKind::Syntax`]; deserialization runs on the caller's thread, start to end.
    static VALUE_REFUSED: Cell<bool> = const { Cell::new(false) };
}

/// A scalar's refusal as a serde error, remembered as an invalid value.
pub(super) fn value_error<E: serde::de::Error>(e: ProfileError) -> E {
    VALUE_REFUSED.with(|c| c.set(true));
    E::custom(e.message)
}

/// Runs `f` (a deserialization) and tells whether a scalar refused a value during it.
pub(super) fn watching_values<T>(f: impl FnOnce() -> T) -> (T, bool) {
    let before = VALUE_REFUSED.with(|c| c.replace(false));
    let out = f();
    let refused = VALUE_REFUSED.with(|c| c.replace(before));
    (out, refused)
}
