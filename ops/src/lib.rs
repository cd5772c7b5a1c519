//! What a service built on tollgate runs beside its handlers, written once for the demo gateway
//! and `tollgate-server` alike.
//!
//! - [`listener`]: every TCP listener under one [`Policy`]: caps on connections in all and per
//!   peer address with a clear refusal, a deadline for the first request head (or HTTP/2
//!   preface and first request) and for idle connections, idle connections evicted first when a
//!   cap or the file-descriptor limit is reached, back-off instead of a hot loop on `EMFILE`,
//!   bounded request bodies, and HTTP/2 stream and keep-alive settings.
//! - [`flags`]: the command-line flags both binaries share (`clap`), so that a flag means the
//!   same in each.
//! - [`admin`]: the admin routes (`GET`/`PUT /admin/profile`) on axum.
//! - [`watch`]: reloading a profile on `SIGHUP` and when its file changes.
//! - [`state`]: `--state`, quotas across restarts.
//! - [`shutdown`]: when to stop.
#![warn(missing_docs, unsafe_op_in_unsafe_fn)]

pub mod admin;
pub mod flags;
pub mod listener;
pub mod shutdown;
pub mod state;
pub mod watch;

pub use listener::{serve, Policy, Protocol};
