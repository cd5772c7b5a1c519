//! `libtollgate.so` / `libtollgate.a`: every `tg_*` symbol of `tollgate-ffi`, exported.
//!
//! A separate package because a package has one library target, and the C libraries must be
//! called `tollgate` while the engine's Rust library already is: `tollgate-ffi` stays an rlib
//! (its tests, benches and fuzz target call it from Rust) and this shell only links it.

pub use tollgate_ffi::*;
