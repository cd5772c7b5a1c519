//! The table's unit tests: one thread, no loom; the claim protocol's races are the loom
//! models' (`loom-tests/`).

use super::*;

fn d(n: u64) -> Digest {
    Digest {
        hi: n,
        lo: n << 1 | 1,
    }
}

fn charge(t: &Table, dg: Digest, now: u64, dt: u64) -> Result<Tats, TableFull> {
    t.update(dg, &Unpartitioned, now, |tats| {
        let n = Tats {
            burst: tats.burst.max(now) + dt,
            sustained: tats.sustained.max(now) + dt,
        };
        Apply::Write(n, n)
    })
}

#[test]
fn full_table_fails_closed_and_reclaims_full_slots() {
    let t: Table = Table::new(4);
    for n in 0..4 {
        charge(&t, d(n), 0, 100).unwrap();
    }
    assert_eq!(charge(&t, d(9), 50, 100), Err(TableFull));
    // An existing identity keeps its state.
    assert_eq!(charge(&t, d(0), 50, 100).unwrap().burst, 200);
    // At 100 the others are full again and may be reclaimed; identity 0 is not.
    assert!(charge(&t, d(9), 100, 100).is_ok());
    assert_eq!(
        t.peek(d(0)),
        Some(Tats {
            burst: 200,
            sustained: 200
        })
    );
    assert_eq!(
        t.peek(d(9)),
        Some(Tats {
            burst: 200,
            sustained: 200
        })
    );
}

#[test]
fn slot_is_one_line() {
    assert_eq!(core::mem::size_of::<Slot>(), 64);
    assert_eq!(core::mem::align_of::<Slot>(), 64);
    assert_eq!(
        Table::<Identities>::new(1000).memory_bytes(),
        1000 * 64 + core::mem::size_of::<Table>()
    );
}

/// A claimer with a cap per partition and the count `Claimer` asks for: the tenants'
/// table's rule, without its table.
pub(super) struct Capped<'a> {
    pub(super) partition: Digest,
    pub(super) cap: u64,
    pub(super) held: &'a std::cell::RefCell<std::collections::HashMap<Digest, u64>>,
}

impl Claimer for Capped<'_> {
    fn partition(&self) -> Digest {
        self.partition
    }
    fn reserve(&self, _: u64) -> bool {
        let mut held = self.held.borrow_mut();
        let n = held.entry(self.partition).or_default();
        *n < self.cap && {
            *n += 1;
            true
        }
    }
    fn release(&self, _: u64) {
        *self.held.borrow_mut().get_mut(&self.partition).unwrap() -= 1;
    }
    fn evict(&self, old: Digest, _: u64) {
        let mut held = self.held.borrow_mut();
        let n = held
            .get_mut(&old)
            .expect("evicts a partition that holds slots");
        *n -= 1;
    }
}

/// A partition at its cap still reuses its own reclaimable slot when another partition's
/// is there too, is refused another partition's, and every count stays the number of slots
/// that record the partition.
#[test]
fn partitions_reuse_their_own_slots_and_counts_stay_exact() {
    let t: Table = Table::new(3);
    let held = Held::default();
    let (pa, pb) = (PA, PB);
    let (a, b) = (Capped::new(pa, 2, &held), Capped::new(pb, 1, &held));
    let put = |c: &Capped, who: u64, now: u64| put(&t, c, who, now);
    let counts = || {
        let h = held.borrow();
        (h.get(&pa).copied(), h.get(&pb).copied())
    };
    put(&a, 1, 0).unwrap();
    put(&b, 2, 0).unwrap();
    put(&a, 3, 0).unwrap();
    assert_eq!(counts(), (Some(2), Some(1)));
    assert_eq!(put(&b, 4, 50), Err(TableFull), "no slot is reclaimable yet");
    // At 100 identity 1 is refreshed; 2 (B's) and 3 (A's) are full and reclaimable.
    put(&a, 1, 100).unwrap();
    assert!(
        put(&b, 4, 100).is_ok(),
        "B, at its cap, reuses its own slot"
    );
    assert_eq!((t.peek(d(2)), t.peek(d(3)).is_some()), (None, true));
    assert_eq!(counts(), (Some(2), Some(1)));
    // Only A's slot is reclaimable now: B at its cap may not take it (refused before it
    // touches the slot), and A's occupant stays as it was.
    assert_eq!(put(&b, 5, 100), Err(TableFull));
    assert_eq!(t.peek(d(3)), Some(Tats::full(100)));
    assert_eq!(counts(), (Some(2), Some(1)));
    // With room under its cap B takes it, and A has one slot less.
    let b2 = Capped { cap: 2, ..b };
    put(&b2, 5, 100).unwrap();
    assert_eq!((t.peek(d(3)), t.peek(d(5)).is_some()), (None, true));
    assert_eq!(counts(), (Some(1), Some(2)));
}

/// The two partitions of the capped tests, and the count of each.
pub(super) const PA: Digest = Digest { hi: 7, lo: 7 };
pub(super) const PB: Digest = Digest { hi: 8, lo: 8 };
pub(super) type Held = std::cell::RefCell<std::collections::HashMap<Digest, u64>>;

impl<'a> Capped<'a> {
    pub(super) fn new(partition: Digest, cap: u64, held: &'a Held) -> Capped<'a> {
        Capped {
            partition,
            cap,
            held,
        }
    }
}

/// `who` charged 100 ns of both buckets at `now`, claiming a slot for `c` if it has none.
fn put(t: &Table, c: &Capped, who: u64, now: u64) -> Result<(), TableFull> {
    t.update(d(who), c, now, |tats| {
        let n = Tats {
            burst: tats.burst.max(now) + 100,
            sustained: tats.sustained.max(now) + 100,
        };
        Apply::Write(n, ())
    })
}

/// A claim takes a never-used slot before another partition's reclaimable one, whose
/// occupant, full but perhaps a light live caller, would have to claim again.
#[test]
fn a_never_used_slot_is_taken_before_another_partitions() {
    let t: Table = Table::new(3);
    let held = Held::default();
    let (pa, pb) = (PA, PB);
    let (a, b) = (Capped::new(pa, 3, &held), Capped::new(pb, 3, &held));
    let put = |c: &Capped, who: u64, now: u64| put(&t, c, who, now);
    // Both identities have home 0: A's is in slot 0, reclaimable from 100 on.
    assert_eq!((t.home(d(1)), t.home(d(2))), (0, 0));
    put(&a, 1, 0).unwrap();
    put(&b, 2, 100).unwrap();
    assert_eq!(
        t.peek(d(1)),
        Some(Tats::full(100)),
        "A's identity keeps its slot"
    );
    assert_eq!(t.peek(d(2)), Some(Tats::full(200)));
    let h = held.borrow();
    assert_eq!((h.get(&pa), h.get(&pb)), (Some(&1), Some(&1)));
}

/// A partition at its cap, whose window has its own reclaimable slot and then a never-used
/// one, reuses its own: the never-used slot would cost one of the cap it does not have.
#[test]
fn a_partition_at_its_cap_reuses_its_own_slot_before_a_never_used_one() {
    let t: Table = Table::new(3);
    let held = Held::default();
    let a = Capped::new(PA, 1, &held);
    assert_eq!((t.home(d(1)), t.home(d(2))), (0, 0));
    put(&t, &a, 1, 0).unwrap();
    // At 100 identity 1 is full again: reclaimable, and slot 1 was never used.
    put(&t, &a, 2, 100).unwrap();
    assert_eq!((t.peek(d(1)), t.peek(d(2))), (None, Some(Tats::full(200))));
    assert_eq!(held.borrow().get(&PA), Some(&1));
    // Below its cap the never-used slot is taken, and identity 2 keeps its slot.
    let a2 = Capped::new(PA, 2, &held);
    put(&t, &a2, 1, 300).unwrap();
    assert_eq!(
        (t.peek(d(1)), t.peek(d(2))),
        (Some(Tats::full(400)), Some(Tats::full(200)))
    );
    assert_eq!(held.borrow().get(&PA), Some(&2));
}

/// An admit whose slot is reclaimed for another identity between its read and its CAS (here
/// from inside its own update: one thread standing in for two) writes nothing into the new
/// occupant's state: the new generation fails its CAS, and it looks for its identity again.
#[test]
fn an_admit_never_writes_into_a_slot_reclaimed_under_it() {
    let t: Table = Table::new(1);
    charge(&t, d(1), 0, 100).unwrap();
    // At 100 identity 1 is full, so its slot, the only one, may be reclaimed.
    let mut calls = 0;
    let r = t.update(d(1), &Unpartitioned, 100, |tats| {
        calls += 1;
        if calls == 1 {
            assert_eq!(charge(&t, d(2), 100, 100).map(|n| n.burst), Ok(200));
        }
        let n = Tats {
            burst: tats.burst.max(100) + 7,
            sustained: tats.sustained.max(100) + 7,
        };
        Apply::Write(n, n)
    });
    assert_eq!(
        r,
        Err(TableFull),
        "identity 1 lost its slot and none is free"
    );
    assert_eq!(calls, 1, "the update never ran on identity 2's TATs");
    assert_eq!(t.peek(d(1)), None);
    assert_eq!(
        t.peek(d(2)),
        Some(Tats {
            burst: 200,
            sustained: 200
        })
    );
}

/// A table holding whole 2 MiB pages asks for huge pages over all of them (advice only: on a
/// kernel without transparent huge pages `madvise` refuses and nothing changes).
#[cfg(target_os = "linux")]
#[test]
fn a_large_table_is_advised_huge_pages_over_its_whole_pages() {
    const HUGE: usize = 2 << 20;
    // 6 MiB and one slot: at least two whole huge pages inside, wherever it lands.
    let t: Table = Table::new(3 * HUGE / 64 + 1);
    let (start, len) = (t.slots.as_ptr() as usize, t.slots.len() * 64);
    let (first, end) = (start.next_multiple_of(HUGE), (start + len) / HUGE * HUGE);
    assert!(end - first >= 2 * HUGE);
    let thp = std::path::Path::new("/sys/kernel/mm/transparent_hugepage").exists();
    assert_eq!(
        (huge_page_advised(first), huge_page_advised(end - 1)),
        (thp, thp),
        "the first and the last whole page are advised where the kernel has huge pages"
    );
}

/// Whether the mapping holding `addr` has `MADV_HUGEPAGE` (`hg` in its `VmFlags` in
/// `/proc/self/smaps`).
#[cfg(target_os = "linux")]
fn huge_page_advised(addr: usize) -> bool {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut lines = smaps.lines();
    loop {
        let line = lines.next().expect("a mapping holds the address");
        let Some((lo, hi)) = line.split(' ').next().and_then(|r| r.split_once('-')) else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if lo <= addr && addr < hi {
            let flags = lines.find_map(|l| l.strip_prefix("VmFlags:"));
            return flags
                .expect("smaps lists VmFlags")
                .split_whitespace()
                .any(|f| f == "hg");
        }
    }
}
