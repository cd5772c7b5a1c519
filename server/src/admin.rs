//! `GET` / `PUT /admin/profile` on the `--http` listener: read and replace the profile in force
//! without a deployment. The rules are the engine's [`tollgate::http::admin`], which the demo
//! gateway serves too; this file puts them (mounted on axum by `tollgate_ops::admin`) over [`RateLimiter`], so that limits and
//! descriptor rules change together (rules that do not compile are a 422 of their own).
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /admin/profile` | 200, `application/yaml`: the profile in force, as tollgate reads it back (comments and defaults are not kept), with an `ETag` |
//! | `PUT /admin/profile` | 200 and the profile is in force from the next request; or 422 (invalid: `line`, `column`; or descriptor rules that do not compile), 409 (valid, but a reload may not make that change, e.g. `identities.capacity`), 412 (`If-Match` names another profile than the one in force), 400 (not UTF-8), 413 (over 4 MiB), 500 (not saved); the old profile stays in force on every refusal |
//!
//! Who may call them, all required:
//! - a token: the routes exist only when [`ADMIN_TOKEN_ENV`] is set (at least
//!   [`MIN_TOKEN_LEN`] bytes) when the server starts, and every request must carry
//!   `Authorization: Bearer <token>`, compared in constant time; without it, or with another,
//!   `401` with `WWW-Authenticate: Bearer`;
//! - loopback: a peer that is not a loopback address gets `403`, unless the server was started
//!   with `--admin-remote`.
//!
//! A `PUT` that is put in force is also written to the profile file (a temporary file beside
//! it, fsync, rename), so that the file watcher, a `SIGHUP` or a restart keep it; the file is
//! renamed over the old one only once the limiter took the profile. `--admin-in-memory` keeps
//! accepted profiles in memory only. A server that follows a fleet profile
//! (`--watch-profile`) answers a `PUT` with 409 `fleet_profile`: the fleet's profile is
//! published to Redis, not put to one server.

use std::sync::Arc;

pub use tollgate::http::admin::{AdminToken, ADMIN_TOKEN_ENV, MIN_TOKEN_LEN};
use tollgate::http::admin::{ProfileAdmin, ProfileTarget, ReloadRefusal};
use tollgate::Profile;

use crate::backend::Backend;
use crate::decide::{RateLimiter, ReloadError};

/// What the admin routes need: the engine's route over the server's limiter.
pub type Admin<B> = ProfileAdmin<RateLimiter<B>>;

/// A reload through the admin route changes limits and descriptor rules together.
impl<B: Backend> ProfileTarget for RateLimiter<B> {
    fn profile(&self) -> Arc<Profile> {
        RateLimiter::profile(self)
    }

    fn reload(&self, profile: Profile) -> Result<(), ReloadRefusal> {
        RateLimiter::reload(self, profile).map_err(|e| match e {
            ReloadError::Profile(e) => ReloadRefusal::Profile(e),
            ReloadError::Rules(e) => ReloadRefusal::Invalid(format!("descriptors: {e}")),
        })
    }
}

/// The admin route of a server that follows a fleet profile (`--watch-profile`).
pub trait FollowingFleet {
    /// `PUT` answers 409 `fleet_profile`, pointing at `tollgate-server publish`, since the
    /// watcher would put the fleet's profile back at its next look; `GET` works as before.
    fn following_fleet(self, name: &str) -> Self;
}

impl<B: Backend> FollowingFleet for Admin<B> {
    fn following_fleet(self, name: &str) -> Self {
        self.refuse_puts(
            "fleet_profile",
            format!(
                "This server follows the fleet profile {name:?} in Redis: publish the profile \
                 with `tollgate-server publish --name {name}` instead; the profile in force is \
                 unchanged."
            ),
        )
    }
}

/// `GET` and `PUT /admin/profile`, to merge into the operators' router.
pub fn router<B: Backend>(admin: Arc<Admin<B>>) -> axum::Router {
    tollgate_ops::admin::router(admin)
}
