//! Taking a snapshot while the limiter serves: one pass over the table, slot by slot, with
//! the table's own atomic loads; no lock, no pause of admits.

use std::io::{self, Write};
use std::sync::Arc;

use super::format::{Header, Output, Record, NO_CLASS, VERSION};
use super::SnapshotStats;
use crate::limiter::Limiter;
use crate::table::Occupant;

impl Limiter {
    /// Writes the state of every identity whose buckets are not full to `writer` (format in
    /// [`crate::snapshot`]), while admits go on. Each identity's state is one it really had at
    /// the instant its slot was read; what each bucket owes is counted from the *reference
    /// instant*, read before the first slot, so a state read later is written as owing at
    /// least what it did (never fuller). Shared-capacity windows are not written (see the
    /// module doc). `writer` is buffered here; pass a `File` as it is.
    pub fn snapshot(&self, writer: impl Write) -> io::Result<SnapshotStats> {
        let cfg = self.engine.config.load();
        // The reference instant: the monotonic reading first, then the wall clock, so that the
        // wall time written is never earlier than the instant the debts are counted from.
        let reference = self.now();
        let wall = self.wall.unix_nanos();
        let anon = cfg.profile.anonymous;
        let header = Header {
            version: VERSION,
            slots: self.table.capacity() as u64,
            fingerprint: self.engine.hasher.fingerprint(),
            prefixes: (anon.ipv4_prefix.get(), anon.ipv6_prefix.get()),
            classes: cfg.classes.iter().map(|c| c.name.to_string()).collect(),
            intervals: cfg
                .classes
                .iter()
                .map(|c| [c.limits.burst.t, c.limits.sustained.t])
                .collect(),
            wall,
        };
        // The debts are written in the intervals of the header's profile, `first`.
        let first = Arc::clone(&cfg);
        let mut cfg = cfg;
        let mut out = Output::new(writer);
        out.header(&header)?;
        let mut identities = 0u64;
        for i in 0..self.table.capacity() {
            // The debts counted in the profile in force: a word of an older epoch is converted
            // (so the format needs no epoch); one of a newer epoch than `cfg` (a reload during
            // the snapshot, seen by the load of the generation after the word) is read again
            // under the newer config.
            let o = loop {
                let Some(o) = self.table.read_slot(i) else {
                    break None;
                };
                if self.engine.config.latest() > cfg.epoch {
                    cfg = self.engine.config.load();
                    continue;
                }
                break Some(Occupant {
                    tats: cfg.convert(o.class, o.tats, o.tag),
                    ..o
                });
            };
            let Some(o) = o else {
                continue;
            };
            if o.tats.is_full(reference) {
                // Indistinguishable from a new identity: nothing to keep.
                continue;
            }
            // A reload while the snapshot is taken: the debt is counted back in the header's
            // intervals, in tokens as of the reference instant (rounded up: never fuller). A
            // class the header does not have is written as not known.
            let class = o
                .class
                .filter(|&c| c < first.classes.len() && c < usize::from(NO_CLASS));
            let tats = match class {
                Some(c) if cfg.epoch != first.epoch => {
                    let to = first.classes[c].limits;
                    cfg.classes[c].limits.convert(to, o.tats, reference)
                }
                _ => o.tats,
            };
            out.record(&Record {
                slot: i as u32,
                class: class.map(|c| c as u16),
                digest: o.digest,
                partition: o.partition,
                burst: tats.burst.saturating_sub(reference),
                sustained: tats.sustained.saturating_sub(reference),
            })?;
            identities += 1;
        }
        let bytes = out.finish(identities)?;
        Ok(SnapshotStats { identities, bytes })
    }
}
