//! `--watch-profile NAME` (with `--redis`): the server follows the profile published to Redis
//! under `NAME` (`tollgate-server publish`, or the engine's `FleetProfile::publish`), limits
//! and descriptor rules together, as a reload from the file would. A published profile whose
//! `descriptors:` section does not compile, or that the limiter refuses, leaves the profile in
//! force and is counted (`tollgate_fleet_profile_errors_total{kind="refused"}`). With
//! `--fleet-public-key`, a version not signed by one of the keys is refused too
//! (`kind="signature"`).

use std::sync::Arc;

use tollgate::redis::{FleetTarget, FleetVerifyingKey, FleetWatch, RedisLimiter};
use tollgate::Profile;

use crate::decide::RateLimiter;

impl FleetTarget for RateLimiter<RedisLimiter> {
    fn apply(&self, version: u64, profile: Profile) -> Result<(), String> {
        self.reload_by(profile, |limiter, p| limiter.reload_version(p, version))
            .map_err(|e| e.to_string())
    }

    fn version_in_force(&self) -> Option<u64> {
        self.backend().profile_version()
    }
}

/// Starts following the fleet profile `name`: the version published now is in force when
/// this returns; dropping the handle stops the watcher. With `keys` (hex Ed25519 public keys),
/// only versions signed by one of them are put in force; without, any valid one is, and a
/// warning says so.
pub async fn watch(
    limiter: &Arc<RateLimiter<RedisLimiter>>,
    name: &str,
    keys: &[String],
) -> Result<FleetWatch, String> {
    let keys = keys
        .iter()
        .map(|k| FleetVerifyingKey::from_hex(k).map_err(|e| format!("--fleet-public-key: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        tracing::warn!(
            name,
            "fleet profile: any valid profile written to the fleet key is put in force; give \
             --fleet-public-key to accept only signed ones (tollgate-server fleet-key)"
        );
    }
    let fleet = limiter
        .backend()
        .fleet_profile(name)
        .map_err(|e| format!("--watch-profile: {e}"))?
        .trusting(keys);
    Ok(fleet.watch(limiter).await)
}
