//! Quotas that survive a restart: snapshots of the embedded limiter's buckets, restored into a
//! new process.
//!
//! * [`Limiter::snapshot`](crate::Limiter::snapshot) writes every identity whose buckets are
//!   not full, while admits go on (slot by slot, with the table's own atomic loads);
//!   [`Limiter::save`](crate::Limiter::save) writes it to a file crash-safely, and
//!   [`Limiter::checkpoint`](crate::Limiter::checkpoint) does so periodically on a thread.
//! * [`Builder::restore`](crate::Builder::restore) builds a limiter from one, or refuses it
//!   with a [`SnapshotError`] and hands the builder back ([`RestoreError::start_empty`]).
//! * [`StateFile`] is the three together as a service wants them: restore on start (a missing
//!   file is a first start), checkpoint periodically, save once more on shutdown.
//!
//! **Against the wall clock.** The limiter's clock is monotonic and starts again at zero in a
//! new process, so a snapshot stores what each bucket *owes* (nanoseconds until it is full)
//! at a reference instant, dated by the wall clock. A restore pays the debts down by the
//! wall-clock time since; a wall clock that reads earlier than the snapshot (NTP stepped it
//! back, another machine's clock) counts as no time: states come back as they were, never
//! fuller.
//!
//! **What is not kept.** Shared-capacity windows (a shard's and a tenant's admissions in the
//! current fixed window) start empty. They bound the load on *this* process, which a restart
//! has shed; at worst one window's slots are handed out twice across the restart, the same
//! edge a fixed window has at every boundary. Each caller's own quota, the thing a caller could
//! abuse a deploy to reset, is in the buckets, and those are kept. Which identity slots a
//! tenant holds is rebuilt from the restored slots.
//!
//! **The format** (version 2, little-endian; see `format.rs` for the byte layout): a header
//! (magic, version, table size, a 128-bit keyed fingerprint of the key secret, never the
//! secret, the anonymous prefixes, the route class names in handle order with the emission
//! intervals the debts are counted in, the wall clock, a CRC-32 of the header), then per
//! identity its slot index, route class, digest, tenant digest and both debts (54 bytes), then
//! an end marker, the record count and a CRC-32 of everything. No raw tenant or principal id
//! is in it, only the keyed digests the table holds.
//!
//! **Under other limits** (a profile changed across the restart) a debt carries over as on a
//! reload, in tokens: `d` ns owed at the reference instant under an emission interval `t` are
//! `ceil(d * t' / t)` ns under `t'`, then paid down by the downtime. Version 1 files (no
//! intervals) are still read; their debts are restored in time, as they were written.
//!
//! **Refused** (nothing changed): another key secret, no key secret, another
//! `identities.capacity`, other anonymous prefixes, route classes renamed, removed or reordered
//! (new ones after the old are fine; changed limits apply as on a reload), a failed checksum,
//! a truncated file, an unknown version, content no snapshot writes.

mod bounds;
mod checkpoint;
mod error;
mod file;
mod format;
mod restore;
mod state_file;
mod write;

pub use checkpoint::{Checkpoint, CheckpointStatus};
pub use error::{RestoreError, SnapshotError};
pub use state_file::{Opened, StateFile, StateFileError};

/// What a snapshot wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Identities written (those whose buckets were not full).
    pub identities: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// What a restore put back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// Identities restored.
    pub restored: u64,
    /// Identities whose buckets refilled during the downtime (nothing to restore).
    pub expired: u64,
    /// Identities read twice (a snapshot taken while one moved slot); the later read is kept.
    pub duplicates: u64,
    /// Identities not restored because their tenant (or the anonymous pseudo-tenant) already
    /// held its share of the table (`identities.tenant_share`), or of the 64-slot window
    /// around the record, under the profile restored into: a crafted file, or a profile with a
    /// smaller share. Their buckets start full.
    pub over_share: u64,
    /// Identities restored owing less than the file said: a debt larger than a full bucket of
    /// the profile restored into is clipped to it (a crafted file, or a snapshot taken just
    /// after a reload to smaller buckets).
    pub clipped: u64,
    /// The downtime counted: the wall-clock time since the snapshot (zero if it went back).
    pub elapsed: core::time::Duration,
    /// True if the wall clock read earlier than the snapshot's.
    pub wall_clock_went_back: bool,
}
