//! Which identity names a step uses: a generation of names moved on after an `admit_all`
//! charged, and per class a count of the renames after reloads (see the reload step), with what
//! each identity was charged since, so that a reload knows whether the class must move on.

use std::collections::HashMap;

use super::KEYS;

#[derive(Default)]
pub(super) struct Names {
    /// Moved on after an `admit_all` charged (the charged state depends on instants the server
    /// did not report).
    generation: u32,
    /// Per class, the renames so far.
    renamed: [u32; 2],
    /// Per class, the reloads so far that changed its emission intervals.
    changes: [u32; 2],
    /// Per identity and class, how many such reloads there had been at its first charge.
    charged: HashMap<(String, usize), u32>,
}

impl Names {
    /// The name of identity `k` of class `c` now.
    pub(super) fn of(&self, k: usize, c: usize) -> String {
        format!("{}-{}-{}", KEYS[k], self.generation, self.renamed[c])
    }

    /// `who` of class `c` was charged (the first charge counts).
    pub(super) fn charged(&mut self, who: &str, c: usize) {
        let changes = self.changes[c];
        self.charged.entry((who.to_owned(), c)).or_insert(changes);
    }

    /// Every identity moves to a fresh name.
    pub(super) fn next_generation(&mut self) {
        self.generation += 1;
    }

    /// A reload changed class `c`'s emission intervals: if an identity of it (of the current
    /// names) was charged before the previous such reload, the class moves to fresh names
    /// (`true`); either way the reload is counted.
    pub(super) fn intervals_changed(&mut self, c: usize) -> bool {
        let converted_before = (0..KEYS.len()).any(|k| {
            self.charged
                .get(&(self.of(k, c), c))
                .is_some_and(|&at| at < self.changes[c])
        });
        if converted_before {
            self.renamed[c] += 1;
        }
        self.changes[c] += 1;
        converted_before
    }
}
