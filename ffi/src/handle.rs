//! The limiter handle: the opaque [`tg_limiter`] C holds, and the [`Handle`] behind it, which
//! keeps the catalog codes C may read until the limiter is freed.

use core::ffi::c_char;
use std::ffi::{CStr, CString};
use std::sync::{Mutex, MutexGuard};

use tollgate::{CatalogEntry, Decision, Limiter, RouteClass};

use crate::args::Out;
use crate::cast::{Castable, OwnershipBox};
use crate::sync::{AtomicPtr, AtomicU32, Ordering};
use crate::{tg_decision, tg_result};

/// A limiter, as C sees it: opaque, made by `tg_limiter_new_from_yaml`, freed by
/// `tg_limiter_free`.
pub struct tg_limiter {
    _private: [u8; 0],
}

impl Castable for tg_limiter {
    type Ownership = OwnershipBox;
    type RustType = Handle;
}

/// The catalog entries, in the order of [`Handle::codes`].
const ENTRIES: [CatalogEntry; 4] = [
    CatalogEntry::Throttled,
    CatalogEntry::OverCapacity,
    CatalogEntry::LimiterUnavailable,
    CatalogEntry::CostExceeds,
];

/// The index of `entry` in [`ENTRIES`] and [`Handle::codes`].
#[inline]
fn entry_index(entry: CatalogEntry) -> usize {
    match entry {
        CatalogEntry::Throttled => 0,
        CatalogEntry::OverCapacity => 1,
        CatalogEntry::LimiterUnavailable => 2,
        CatalogEntry::CostExceeds => 3,
    }
}

/// What a `tg_limiter *` points to.
pub(crate) struct Handle {
    pub(crate) limiter: Limiter,
    /// Route classes of the profile in force: `class < classes` is checked before `admit`, which
    /// panics on a foreign class. Only grows (a reload may add classes, never remove one).
    classes: AtomicU32,
    /// The catalog code of each `CatalogEntry` (in the order of `ENTRIES`), pointing into
    /// `interned`.
    codes: [AtomicPtr<c_char>; 4],
    /// Every code handed out since the handle was made, freed with it. The lock also serializes
    /// reloads, so that `codes` and `classes` end up matching the last one.
    pub(crate) interned: Mutex<Vec<CString>>,
}

impl Handle {
    pub(crate) fn new(limiter: Limiter) -> Handle {
        let handle = Handle {
            limiter,
            classes: AtomicU32::new(0),
            codes: Default::default(),
            interned: Mutex::new(Vec::new()),
        };
        {
            let mut interned = handle.interned();
            handle.publish(&mut interned);
        }
        handle
    }

    /// Takes the `interned` lock. A panic while it was held (a bug) leaves a vector that was
    /// only ever pushed to, so its poisoning is ignored.
    pub(crate) fn interned(&self) -> MutexGuard<'_, Vec<CString>> {
        self.interned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Interns the catalog codes and the class count of the profile in force, and publishes
    /// them. Called with the `interned` lock held.
    pub(crate) fn publish(&self, interned: &mut Vec<CString>) {
        let profile = self.limiter.profile();
        for entry in ENTRIES {
            let code = profile.catalog.entry(entry).code.as_str();
            let ptr = match interned.iter().find(|c| c.as_bytes() == code.as_bytes()) {
                Some(c) => c.as_ptr(),
                None => match CString::new(code) {
                    Ok(c) => {
                        // The heap buffer of a `CString` does not move when the `Vec` grows,
                        // and nothing is removed before the handle is dropped.
                        let ptr = c.as_ptr();
                        interned.push(c);
                        ptr
                    }
                    // Profile validation allows only `[a-z0-9_]`; should a NUL ever pass, the
                    // built-in code for the entry is used.
                    Err(_) => default_code(entry).as_ptr(),
                },
            };
            // Release: a thread that loads this pointer also sees the bytes it points to.
            self.codes[entry_index(entry)].store(ptr.cast_mut(), Ordering::Release);
        }
        let classes = u32::try_from(profile.route_classes.len()).unwrap_or(u32::MAX);
        // Release, after the limiter took the profile: a thread that sees the new count also
        // sees the limits of the new classes.
        self.classes.store(classes, Ordering::Release);
    }

    /// The route class `class`, if this limiter has it.
    #[inline]
    pub(crate) fn class(&self, class: u32) -> Result<RouteClass, tg_result> {
        // Acquire pairs with the Release store in `publish`: a class counted here has its
        // limits visible to the `admit` that follows.
        if class < self.classes.load(Ordering::Acquire) {
            Ok(RouteClass::from_index(class))
        } else {
            Err(tg_result::UnknownRouteClass)
        }
    }

    /// The C form of `d`, with the catalog code of the profile in force, written to `out`. An
    /// admit, the common answer, is a constant stored in the caller; a refusal is converted out
    /// of line. Each is stored in its own branch: a value chosen by a branch and stored after
    /// it is copied through the stack first.
    #[inline(always)]
    pub(crate) fn put_decision(&self, d: Decision, out: Out<'_, tg_decision>) {
        if d.is_admit() {
            out.put(tg_decision::ADMITTED);
        } else {
            out.put(self.refusal(d));
        }
    }

    #[inline(never)]
    fn refusal(&self, d: Decision) -> tg_decision {
        let code = match d.catalog_entry() {
            None => c"".as_ptr(),
            // Acquire pairs with the Release store in `publish`: the bytes behind the pointer
            // are visible.
            Some(e) => self.codes[entry_index(e)]
                .load(Ordering::Acquire)
                .cast_const(),
        };
        tg_decision::new(d, code)
    }
}

/// The built-in code of a catalog entry (the profile's default).
fn default_code(entry: CatalogEntry) -> &'static CStr {
    match entry {
        CatalogEntry::Throttled => c"rate_limited",
        CatalogEntry::OverCapacity => c"over_capacity",
        CatalogEntry::LimiterUnavailable => c"limiter_unavailable",
        CatalogEntry::CostExceeds => c"cost_exceeds_limit",
    }
}
