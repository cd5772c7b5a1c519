//! A reload's walk over the table: before a profile epoch reuses a tag (the word keeps the
//! epoch mod 4), every word still tagged with it is converted to the current epoch, so that no
//! word's tag can name two epochs. Cold: once per reload, while admits go on.

use super::{Kind, Table, Tag};
use crate::bucket::Tats;
use crate::sync::{Ordering, SpinWait};

impl<K: Kind> Table<K> {
    /// Converts every word tagged `from` with `convert(tats, class)` and tags it `to`, with the
    /// next generation ([`SlotState::retagged`](super::SlotState::retagged)); waits out claims
    /// in progress, whose word (or the one they leave if they give the slot up) may be tagged
    /// `from`.
    ///
    /// The caller (the reload, under its lock) has published the config generation that makes
    /// every decision still holding an older config than `to`'s retry. A decision holding
    /// `from`'s config read the word, then that generation, and writes only by a CAS against
    /// the word it read: if it read a `from` word before this walk converted it, its CAS fails
    /// (the generation moved); if after, it sees the tag `to` and a newer generation, and
    /// retries under the current config. A claim writes its own tag into the word it takes:
    /// its SeqCst CAS, then its SeqCst load of the generation (in `f`), against the reload's
    /// SeqCst generation bump, then this walk's SeqCst load of the word: if the claim saw no
    /// newer generation, this walk sees the claim (and waits for its publish).
    #[cold]
    pub(crate) fn retag(&self, from: Tag, to: Tag, convert: impl Fn(Tats, Option<usize>) -> Tats) {
        for slot in self.slots.iter() {
            let spin = SpinWait::new();
            loop {
                // SeqCst: see the doc above (it also acquires the publish of the claim that
                // wrote the class read below, as `scan`'s Acquire does for the digest).
                let seen = slot.state.load(Ordering::SeqCst);
                if seen.is_empty() {
                    break;
                }
                if seen.is_busy() {
                    spin.snooze();
                    continue;
                }
                if seen.tag() != from {
                    break;
                }
                let next = seen.retagged(convert(seen.tats(), slot.class()), to);
                // Release, as an admit's CAS (`Table::cas_loop`): the word now carries the tag
                // `to`, and a decision that reads it must then see the generation our caller
                // bumped before this walk (`ConfigCell::latest`; without it
                // `a_word_the_walk_retagged_is_never_read_as_an_older_epochs` in
                // `loom-tests/tests/reload.rs` fails). No Acquire: nothing is read
                // after a success. Failure Relaxed: the slot is read again (SeqCst). A class
                // read for an occupant that a claim replaced meanwhile is harmless: the claim
                // changed the word first, so this CAS fails and the slot is read again.
                if slot
                    .state
                    .compare_exchange(seen, next, Ordering::Release, Ordering::Relaxed)
                    .is_ok()
                {
                    break;
                }
            }
        }
    }
}
