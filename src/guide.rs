//! The guide: how to use tollgate, chapter by chapter. Each chapter is a page of
//! `docs/guide/`, so its Rust snippets run as doctests with the crate's tests.
//!
//! | chapter | what |
//! | --- | --- |
//! | [`profile`] | the profile reference: every key, its default and its limits |
//! | [`http`] | the HTTP and tower contract: statuses, headers, bodies, gRPC |
//! | [`operating`] | reload, shadow mode, admin, snapshots, metrics, listeners |
//! | `redis` (feature `redis`) | sharing limits across processes with Redis |
//! | `fleet` (feature `redis`) | one profile for the fleet, signed |
//! | [`envoy`] | `tollgate-server` behind Envoy |
//! | [`client`] | calling rate-limited APIs with `tollgate-client` |
//! | [`c`] | the C ABI |
//! | [`python`] | the Python wheel: the engine, the middleware, the client |
//! | [`performance`] | what a decision costs, and pinned identities |

#[doc = include_str!("../docs/guide/profile.md")]
pub mod profile {}

#[doc = include_str!("../docs/guide/http.md")]
pub mod http {}

#[doc = include_str!("../docs/guide/operating.md")]
pub mod operating {}

#[cfg(feature = "redis")]
#[doc = include_str!("../docs/guide/redis.md")]
pub mod redis {}

#[cfg(feature = "redis")]
#[doc = include_str!("../docs/guide/fleet.md")]
pub mod fleet {}

#[doc = include_str!("../docs/guide/envoy.md")]
pub mod envoy {}

#[doc = include_str!("../docs/guide/client.md")]
pub mod client {}

#[doc = include_str!("../docs/guide/c.md")]
pub mod c {}

#[doc = include_str!("../docs/guide/python.md")]
pub mod python {}

#[doc = include_str!("../docs/guide/performance.md")]
pub mod performance {}
