//! Building a limiter from a snapshot: the header checked against the profile and the secret
//! before anything is allocated, then every record checked and put back at its slot, then the
//! checksum; any refusal drops the half-built limiter and hands the builder back.

use std::io::Read;

use super::bounds::{most_owed, Windows};
use super::format::{Header, Input, Record, MAX_DEBT};
use super::{RestoreError, RestoreStats, SnapshotError};
use crate::bucket::{debt_in, Tats};
use crate::config::{self, Config};
use crate::identity::Digest;
use crate::limiter::{Builder, Limiter};
use crate::table::{Occupant, Tag};

impl Builder {
    /// Builds the limiter with the state of a snapshot that [`Limiter::snapshot`] wrote (with
    /// the same key secret, `identities.capacity`, anonymous prefixes and route classes; the
    /// limits themselves may have changed, as on a reload).
    ///
    /// What each bucket owed at the snapshot, in tokens (converted to the new limits as a
    /// reload converts, rounded up), is paid down by the wall-clock time since; a wall clock
    /// that reads earlier than the snapshot counts as no time at all, so a restore never
    /// leaves a bucket fuller than it was. Shared-capacity windows start empty.
    ///
    /// A file may not ask for more than the profile allows (a crafted one, or one written
    /// under other limits): a debt larger than a full bucket is clipped to it
    /// ([`RestoreStats::clipped`]), and an identity whose tenant already holds its share of
    /// the table (`identities.tenant_share`), or of the 64-slot window around it, starts full
    /// ([`RestoreStats::over_share`]). Both are counted in `tollgate_restore_records_total`
    /// and logged (feature `metrics`).
    ///
    /// A refused snapshot changes nothing; the error says why and gives the builder back:
    ///
    /// ```no_run
    /// # use tollgate::{Limiter, Profile};
    /// # let profile = Profile::from_path("examples/profiles/example.yaml")?;
    /// let builder = Limiter::builder(profile).key_secret(b"from your secret store");
    /// let limiter = match std::fs::File::open("state.tgsnap") {
    ///     Ok(file) => match builder.restore(file) {
    ///         Ok((limiter, _stats)) => limiter,
    ///         // Your choice: stop here, or log it and start with full buckets.
    ///         Err(refused) => {
    ///             eprintln!("snapshot refused: {refused}");
    ///             refused.start_empty()?
    ///         }
    ///     },
    ///     Err(_) => builder.build()?, // no snapshot yet
    /// };
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn restore(self, reader: impl Read) -> Result<(Limiter, RestoreStats), RestoreError> {
        let fallback = self.clone();
        restore(self, reader).map_err(|cause| RestoreError::new(cause, fallback))
    }
}

fn restore(b: Builder, reader: impl Read) -> Result<(Limiter, RestoreStats), SnapshotError> {
    let secret = b.secret.clone().ok_or(SnapshotError::NoSecret)?;
    let mut input = Input::new(reader);
    let header = input.header()?;
    check_header(&b, &secret, &header)?;
    let limiter = b.build().map_err(SnapshotError::Build)?;
    let now = limiter.now();
    // The profile the debts are converted to, read once for every record.
    let cfg = arc_swap::Guard::into_inner(limiter.engine.config.load());
    let wall = limiter.wall.unix_nanos();
    // The downtime, by the wall clock; one that went back counts as none (never credit).
    let elapsed = wall.saturating_sub(header.wall);
    let mut stats = RestoreStats {
        elapsed: core::time::Duration::from_nanos(elapsed),
        wall_clock_went_back: wall < header.wall,
        ..RestoreStats::default()
    };
    let mut windows = Windows::new(limiter.table.capacity());
    let mut previous: Option<u32> = None;
    let mut seen = 0u64;
    // The first bad record; the rest is still read, so that a corrupt file is reported as
    // corrupt (its checksum) rather than by what the corruption happened to look like.
    let mut malformed: Option<SnapshotError> = None;
    loop {
        let offset = input.offset;
        let Some(r) = input.record()? else { break };
        seen += 1;
        if malformed.is_some() {
            continue;
        }
        if let Err(what) = check_record(&limiter, &header, &r, previous) {
            malformed = Some(SnapshotError::Malformed { offset, what });
            continue;
        }
        previous = Some(r.slot);
        apply(&limiter, &cfg, &header, &r, now, &mut windows, &mut stats);
    }
    let count = input.end()?;
    if let Some(e) = malformed {
        return Err(e);
    }
    if count != seen {
        return Err(SnapshotError::Malformed {
            offset: input.offset,
            what: format!("the end says {count} records, the file has {seen}"),
        });
    }
    #[cfg(feature = "metrics")]
    report(&stats);
    Ok((limiter, stats))
}

/// What a restore left out or clipped, for operators: a count per outcome
/// (`tollgate_restore_records_total{outcome}`) and a warning when the file asked for more than
/// the profile allows.
#[cfg(feature = "metrics")]
fn report(s: &RestoreStats) {
    for (outcome, n) in [
        ("restored", s.restored),
        ("expired", s.expired),
        ("duplicate", s.duplicates),
        ("over_share", s.over_share),
        ("clipped", s.clipped),
    ] {
        metrics::counter!("tollgate_restore_records_total", "outcome" => outcome).increment(n);
    }
    if s.over_share > 0 || s.clipped > 0 {
        tracing::warn!(
            over_share = s.over_share,
            clipped = s.clipped,
            "snapshot asked for more than the profile allows: identities over their tenant's \
             share started full, debts beyond a full bucket were clipped"
        );
    }
}

/// The header against what the builder would build.
fn check_header(b: &Builder, secret: &[u8], h: &Header) -> Result<(), SnapshotError> {
    let p = &b.profile;
    let capacity = p.identities.capacity.get();
    if h.slots != capacity {
        return Err(SnapshotError::CapacityMismatch {
            snapshot: h.slots,
            profile: capacity,
        });
    }
    if h.fingerprint != config::key_hasher(p, secret).fingerprint() {
        return Err(SnapshotError::SecretMismatch);
    }
    let prefixes = (p.anonymous.ipv4_prefix.get(), p.anonymous.ipv6_prefix.get());
    if h.prefixes != prefixes {
        return Err(SnapshotError::AnonymousPrefixes {
            snapshot: h.prefixes,
            profile: prefixes,
        });
    }
    // Emission intervals no profile has would make the conversion divide by zero, or say
    // nothing true.
    let max = crate::profile::MAX_PERIOD_NANOS;
    if let Some(i) = h
        .intervals
        .iter()
        .position(|t| t.iter().any(|t| !(1..=max).contains(t)))
    {
        return Err(SnapshotError::Malformed {
            offset: 0,
            what: format!(
                "the header gives class {:?} the emission intervals {:?} ns",
                h.classes[i], h.intervals[i]
            ),
        });
    }
    // A new limiter numbers its classes in profile order (`Config::new`).
    let mut names = p.route_classes.iter().map(|(n, _)| n);
    for (index, want) in h.classes.iter().enumerate() {
        match names.next() {
            Some(n) if n == want => {}
            other => {
                return Err(SnapshotError::RouteClasses {
                    index,
                    snapshot: want.clone(),
                    profile: other.map(str::to_owned),
                })
            }
        }
    }
    Ok(())
}

/// A record no snapshot of this table would write is refused.
fn check_record(l: &Limiter, h: &Header, r: &Record, previous: Option<u32>) -> Result<(), String> {
    let valid = |d: Digest| d.lo & 1 == 1;
    if let Some(c) = r.class.filter(|&c| usize::from(c) >= h.classes.len()) {
        return Err(format!(
            "slot {}: route class {c} of {} in the header",
            r.slot,
            h.classes.len()
        ));
    }
    if (r.slot as usize) >= l.table.capacity() {
        return Err(format!(
            "slot {} of a table of {}",
            r.slot,
            l.table.capacity()
        ));
    }
    if previous.is_some_and(|p| r.slot <= p) {
        return Err(format!(
            "slot {} after slot {}",
            r.slot,
            previous.unwrap_or(0)
        ));
    }
    if !valid(r.digest) || !valid(r.partition) {
        return Err(format!("slot {}: not a digest tollgate makes", r.slot));
    }
    if r.burst > MAX_DEBT || r.sustained > MAX_DEBT {
        return Err(format!("slot {}: owes more than any bucket holds", r.slot));
    }
    if !l.table.within_window(r.digest, r.slot as usize) {
        return Err(format!(
            "slot {}: too far from its identity's home slot {}",
            r.slot,
            l.table.home_of(r.digest)
        ));
    }
    Ok(())
}

/// What a record's buckets owe under the profile being restored into, in ns at the snapshot's
/// reference instant: the same tokens as in the intervals the header gives (rounded up, as a
/// reload converts), for a record of a class the snapshot does not know the most any of its
/// classes' conversions gives (never less than written), and for a version 1 snapshot, which
/// has no intervals, the time as written.
fn owed(cfg: &Config, h: &Header, r: &Record) -> (u64, u64) {
    let convert = |c: usize| {
        let ([burst, sustained], to) = (h.intervals[c], cfg.classes[c].limits);
        (
            debt_in(r.burst, burst, to.burst.t),
            debt_in(r.sustained, sustained, to.sustained.t),
        )
    };
    match r.class {
        _ if h.intervals.is_empty() => (r.burst, r.sustained),
        Some(c) => convert(usize::from(c)),
        None => (0..h.classes.len())
            .map(convert)
            .fold((r.burst, r.sustained), |(b, s), (b2, s2)| {
                (b.max(b2), s.max(s2))
            }),
    }
}

/// Puts one checked record back, converted to the profile's limits, held to what its buckets
/// can owe and paid down by the downtime, its slot counted for its partition within the
/// partition's share of the table and of the window (`bounds.rs`). `cfg` is the new limiter's
/// (no reload can come before it is returned).
fn apply(
    l: &Limiter,
    cfg: &Config,
    h: &Header,
    r: &Record,
    now: u64,
    windows: &mut Windows,
    stats: &mut RestoreStats,
) {
    // The downtime counted, in the nanoseconds it was made of.
    let elapsed = stats.elapsed.as_nanos() as u64;
    // A snapshot read while the identity moved to a later slot holds it twice: the later read
    // is the later state, so it replaces the earlier.
    if let Some(partition) = l.table.forget_restored(r.digest) {
        l.tenants.unhold(partition);
        stats.restored -= 1;
        stats.duplicates += 1;
    }
    let (burst, sustained) = owed(cfg, h, r);
    let (most_burst, most_sustained) = most_owed(cfg, r);
    let clipped = burst > most_burst || sustained > most_sustained;
    let (burst, sustained) = (
        burst.min(most_burst).saturating_sub(elapsed),
        sustained.min(most_sustained).saturating_sub(elapsed),
    );
    if burst == 0 && sustained == 0 {
        stats.expired += 1;
        return;
    }
    let (slot, cap) = (r.slot as usize, cfg.identity_caps.of(r.partition));
    if !windows.room(slot, r.partition, cap) {
        stats.over_share += 1;
        return;
    }
    if !l.tenants.hold(r.partition, cap) {
        // Not put back, so its buckets start full: with the window's share above, the only
        // case where a restore grants credit, counted, never silent. The tenant already holds
        // its share of the table: more than any claim could have taken under this profile (a
        // crafted file, or a profile with a smaller share).
        stats.over_share += 1;
        return;
    }
    stats.clipped += u64::from(clipped);
    windows.restored(slot, r.partition);
    l.table.place_restored(
        slot,
        Occupant {
            digest: r.digest,
            partition: r.partition,
            tats: Tats {
                burst: now + burst,
                sustained: now + sustained,
            },
            // A new limiter's epoch. Without a class (version 1, or not known) a reload's
            // re-tag converts with the largest debt any class would give (`Config::convert`).
            tag: Tag::of(0),
            class: r.class.map(usize::from),
        },
    );
    stats.restored += 1;
}
