//! The one place where C pointers to opaque handles become Rust values and back.
//!
//! An opaque C type (`tg_limiter`) says, through [`Castable`], which Rust type it stands for and
//! how the C side owns it. Every conversion goes through the three functions below, so the
//! casts, and the rules for when they are sound, are written once.

use crate::tg_result;

/// How the C side owns what a handle points to.
pub(crate) trait Ownership {}

/// The handle is a `Box` given to C: made by [`into_boxed_ptr`], borrowed shared by
/// [`borrow`], given back by [`free_boxed`].
pub(crate) enum OwnershipBox {}

impl Ownership for OwnershipBox {}

/// An opaque C type that stands for a Rust one.
pub(crate) trait Castable {
    /// How C owns it.
    type Ownership: Ownership;
    /// What a pointer to `Self` really points to.
    type RustType;
}

/// Boxes `value` and gives the box to C, as a pointer to its opaque type.
pub(crate) fn into_boxed_ptr<C>(value: C::RustType) -> *mut C
where
    C: Castable<Ownership = OwnershipBox>,
{
    Box::into_raw(Box::new(value)).cast::<C>()
}

/// Borrows, shared, what a pointer from C points to; NULL is `TG_RESULT_NULL_ARGUMENT`.
///
/// # Safety
/// `ptr` is NULL or came from [`into_boxed_ptr`] for this `C` and has not been freed, and stays
/// so for `'a`.
pub(crate) unsafe fn borrow<'a, C>(ptr: *const C) -> Result<&'a C::RustType, tg_result>
where
    C: Castable<Ownership = OwnershipBox>,
    C::RustType: Sync,
{
    // SAFETY: 1. A non-NULL `ptr` came from `Box::into_raw` of a `C::RustType` (caller's
    // contract), so it is aligned and points to a live value. 2. It is only ever borrowed shared
    // (`&`), never `&mut`, so any number of threads may hold this borrow at once: the type is
    // `Sync` (bound above). 3. It is not freed during `'a` (caller's contract).
    unsafe { ptr.cast::<C::RustType>().as_ref() }.ok_or(tg_result::NullArgument)
}

/// Takes back from C, and drops, what [`into_boxed_ptr`] gave it. NULL is a no-op.
///
/// # Safety
/// `ptr` is NULL or came from [`into_boxed_ptr`] for this `C`, has not been freed, and no other
/// thread uses it.
pub(crate) unsafe fn free_boxed<C>(ptr: *mut C)
where
    C: Castable<Ownership = OwnershipBox>,
{
    if !ptr.is_null() {
        // SAFETY: 1. `ptr` came from `Box::into_raw` of a `C::RustType` and was not freed yet
        // (caller's contract), so rebuilding the box gives back the one owner. 2. No other
        // borrow of it is alive (caller's contract).
        drop(unsafe { Box::from_raw(ptr.cast::<C::RustType>()) });
    }
}
