//! Why a snapshot was refused, and the refusal a restore hands back with its builder, so that
//! starting empty is the caller's explicit choice.

use core::fmt;
use std::io;

use crate::limiter::{BuildError, Builder, Limiter};

/// Why a snapshot cannot be restored. Nothing is changed by a refusal: no limiter is returned,
/// and the file is only read.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Reading failed (other than by ending early).
    Io(io::Error),
    /// The input does not start with a tollgate snapshot's magic bytes.
    NotASnapshot,
    /// A snapshot format this build does not read.
    UnsupportedVersion {
        /// The version in the file.
        found: u32,
        /// The newest version this build reads (it reads every version from 1 to this one).
        supported: u32,
    },
    /// The input ended before the snapshot did.
    Truncated {
        /// Bytes read when it ended.
        offset: u64,
    },
    /// A checksum does not match: the bytes changed after they were written.
    Corrupt {
        /// `"header"` or `"file"`.
        part: &'static str,
        /// Where the checksum that failed is.
        offset: u64,
    },
    /// The builder has no `key_secret`: a random secret never matches a snapshot's.
    NoSecret,
    /// The snapshot was taken under another key secret (or by a build of tollgate that hashes
    /// identities differently): its digests would name nobody here.
    SecretMismatch,
    /// The snapshot's table has another size than this profile's `identities.capacity`.
    CapacityMismatch {
        /// Slots in the snapshot.
        snapshot: u64,
        /// `identities.capacity` of the profile being built.
        profile: u64,
    },
    /// The anonymous prefix lengths differ (they are part of every anonymous identity).
    AnonymousPrefixes {
        /// (IPv4, IPv6) prefix lengths in the snapshot.
        snapshot: (u8, u8),
        /// The profile's.
        profile: (u8, u8),
    },
    /// The profile's route classes do not start with the snapshot's, in its order (a class's
    /// place is part of its identities' digests, so a renamed, removed or reordered class
    /// would hand its callers' state to another class). New classes after them are fine.
    RouteClasses {
        /// The first place that differs.
        index: usize,
        /// The snapshot's class there.
        snapshot: String,
        /// The profile's class there, if it has one.
        profile: Option<String>,
    },
    /// The checksums match but the content is not one a snapshot writes.
    Malformed {
        /// Where.
        offset: u64,
        /// What.
        what: String,
    },
    /// The limiter itself could not be built (the profile, the secret, memory).
    Build(BuildError),
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io(e) => write!(f, "cannot read the snapshot: {e}"),
            SnapshotError::NotASnapshot => f.write_str("not a tollgate snapshot (wrong magic bytes)"),
            SnapshotError::UnsupportedVersion { found, supported } => write!(
                f,
                "snapshot format version {found} is not supported (this build reads versions 1 to {supported})"
            ),
            SnapshotError::Truncated { offset } => write!(
                f,
                "the snapshot is truncated: it ends after {offset} bytes, before its end marker"
            ),
            SnapshotError::Corrupt { part, offset } => write!(
                f,
                "the snapshot is corrupt: the {part} checksum at byte {offset} does not match"
            ),
            SnapshotError::NoSecret => f.write_str(
                "restoring needs the key secret the snapshot was taken with (Builder::key_secret); \
                 a random secret never matches",
            ),
            SnapshotError::SecretMismatch => f.write_str(
                "the snapshot was taken with another key secret (or by a build of tollgate that \
                 hashes identities differently); its identities would match nobody",
            ),
            SnapshotError::CapacityMismatch { snapshot, profile } => write!(
                f,
                "the snapshot is of a table of {snapshot} identity slots, the profile's \
                 identities.capacity is {profile}"
            ),
            SnapshotError::AnonymousPrefixes { snapshot, profile } => write!(
                f,
                "the snapshot groups anonymous callers by /{} (IPv4) and /{} (IPv6), the profile \
                 by /{} and /{}",
                snapshot.0, snapshot.1, profile.0, profile.1
            ),
            SnapshotError::RouteClasses {
                index,
                snapshot,
                profile,
            } => match profile {
                Some(p) => write!(
                    f,
                    "route class {index} is {snapshot:?} in the snapshot and {p:?} in the profile; \
                     the profile must keep the snapshot's classes in their order (new ones after)"
                ),
                None => write!(
                    f,
                    "the snapshot has route class {snapshot:?} (number {index}), which the profile lacks"
                ),
            },
            SnapshotError::Malformed { offset, what } => {
                write!(f, "the snapshot is malformed at byte {offset}: {what}")
            }
            SnapshotError::Build(e) => write!(f, "cannot build the limiter: {e}"),
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Io(e) => Some(e),
            SnapshotError::Build(e) => Some(e),
            _ => None,
        }
    }
}

/// A refused restore: why, and the builder back, so that the caller decides whether to start
/// empty ([`RestoreError::start_empty`]) or to stop. tollgate never starts empty on its own:
/// a refused snapshot (a rotated secret, a resized table) silently turned into fresh buckets
/// would hand every caller its quota again on every deploy.
pub struct RestoreError {
    cause: SnapshotError,
    builder: Box<Builder>,
}

impl RestoreError {
    pub(crate) fn new(cause: SnapshotError, builder: Builder) -> Self {
        RestoreError {
            cause,
            builder: Box::new(builder),
        }
    }

    /// Why the snapshot was refused.
    pub fn cause(&self) -> &SnapshotError {
        &self.cause
    }

    /// The builder as it was given to `restore`.
    pub fn into_builder(self) -> Builder {
        *self.builder
    }

    /// Why, and the builder back.
    pub(crate) fn into_parts(self) -> (SnapshotError, Builder) {
        (self.cause, *self.builder)
    }

    /// Builds the limiter without the snapshot: every caller starts with full buckets.
    pub fn start_empty(self) -> Result<Limiter, BuildError> {
        self.builder.build()
    }
}

impl fmt::Debug for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestoreError")
            .field("cause", &self.cause)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.cause, f)
    }
}

impl std::error::Error for RestoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.cause)
    }
}
