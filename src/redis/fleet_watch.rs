//! Following a fleet profile: a task that switches a limiter (or anything that reloads, see
//! [`FleetTarget`]) to each version published under a name.
//!
//! It reacts to two things: an announcement on the key's channel (one-node topologies, within
//! milliseconds of the publish), and a poll of the version (`HGET`, every half second by
//! default), because pub/sub messages sent while a subscriber reconnects are lost, and on a
//! Cluster or with Sentinels it does not subscribe at all. On a version other than the one in
//! force it reads version and body together, parses, and hands the profile over. A body that
//! does not parse, or a profile the target refuses (e.g. a changed `identities.capacity`),
//! leaves the profile in force as it is: it is logged (`tracing` warning) and counted once per
//! version, and the next publish is tried afresh. Nothing here panics on what Redis holds.
//!
//! | metric (feature `metrics`) | kind | labels |
//! | --- | --- | --- |
//! | `tollgate_fleet_profile_version` | gauge | `name`: the version in force (0: none published yet, or the local profile) |
//! | `tollgate_fleet_profile_errors_total` | counter | `name`, `kind` (invalid: the key holds no valid profile; refused: the limiter refused it; store: Redis failed a read; signature: not signed by a trusted key, or signed before the version in force, see [`FleetProfile::trusting`]) |

use core::future::Future;
use core::pin::Pin;
use core::task::Poll;
use core::time::Duration;
use std::sync::{Arc, Weak};

use ::redis::aio::PubSubStream;
use futures_core::Stream;

use super::fleet::{FleetProfile, Id, ReadError, FLEET_TIMEOUT};
use super::RedisLimiter;
use crate::profile::Profile;

/// How often a watcher polls the version unless told otherwise.
pub const DEFAULT_POLL: Duration = Duration::from_millis(500);

/// What a fleet watcher switches: [`RedisLimiter`] itself, or a wrapper that keeps derived
/// state (routing rules, say) in step with the limiter's profile.
pub trait FleetTarget: Send + Sync + 'static {
    /// Puts `profile`, published as `version`, in force; or refuses it, leaving the profile in
    /// force as it was.
    fn apply(&self, version: u64, profile: Profile) -> Result<(), String>;
    /// The published version in force, `None` when the profile in force is not a published one.
    fn version_in_force(&self) -> Option<u64>;
}

impl FleetTarget for RedisLimiter {
    fn apply(&self, version: u64, profile: Profile) -> Result<(), String> {
        self.reload_version(profile, version)
            .map_err(|e| e.to_string())
    }

    fn version_in_force(&self) -> Option<u64> {
        self.profile_version()
    }
}

/// A running watcher. Dropping it (or [`FleetWatch::stop`]) stops it; it also stops by itself
/// once its target is dropped.
#[derive(Debug)]
pub struct FleetWatch {
    task: tokio::task::JoinHandle<()>,
}

impl FleetWatch {
    /// Stops watching; the profile in force stays.
    pub fn stop(self) {}
}

impl Drop for FleetWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watcher's metric handles, registered when it starts (install the recorder first).
struct FleetMetrics {
    #[cfg(feature = "metrics")]
    version: metrics::Gauge,
    /// invalid, refused, store, signature.
    #[cfg(feature = "metrics")]
    errors: [metrics::Counter; 4],
}

#[derive(Clone, Copy)]
enum ErrorKind {
    Invalid = 0,
    Refused = 1,
    Store = 2,
    Signature = 3,
}

impl FleetMetrics {
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn new(name: &str) -> FleetMetrics {
        FleetMetrics {
            #[cfg(feature = "metrics")]
            version: metrics::gauge!("tollgate_fleet_profile_version", "name" => name.to_owned()),
            #[cfg(feature = "metrics")]
            errors: ["invalid", "refused", "store", "signature"].map(|kind| {
                metrics::counter!("tollgate_fleet_profile_errors_total", "name" => name.to_owned(), "kind" => kind)
            }),
        }
    }

    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn in_force(&self, version: Option<u64>) {
        #[cfg(feature = "metrics")]
        self.version.set(version.unwrap_or(0) as f64);
    }

    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    fn error(&self, kind: ErrorKind) {
        #[cfg(feature = "metrics")]
        self.errors[kind as usize].increment(1);
    }
}

/// What a watcher remembers between looks.
struct Watcher {
    fleet: FleetProfile,
    metrics: FleetMetrics,
    /// The publish (version, id) last put in force by this watcher, and when it was signed.
    applied: Option<(u64, Id)>,
    applied_signed_at: Option<u64>,
    /// A publish that failed (did not parse, or was refused): not tried again, not counted again.
    rejected: Option<(u64, Id)>,
    /// The version field itself is corrupt: counted once until it changes.
    bad_version: bool,
    /// Redis is failing reads: logged once until a read succeeds.
    store_failing: bool,
}

impl RedisLimiter {
    /// Follows the fleet profile `name` (see [`FleetProfile::watch`]): the version published
    /// now is in force when this returns (if it is valid and this limiter accepts it), and
    /// each later one within milliseconds (one node) or a poll of half a second (Cluster,
    /// Sentinel, or a lost announcement). The watcher stops when the handle is dropped.
    pub async fn watch_profile(self: &Arc<Self>, name: &str) -> Result<FleetWatch, String> {
        Ok(self.fleet_profile(name)?.watch(self).await)
    }
}

impl FleetProfile {
    /// Keeps `target` on the profile published under this name: puts the published version
    /// in force now (if there is one and it is valid), then follows each new one (see the
    /// module doc). Returns once the first look is done.
    pub async fn watch<T: FleetTarget>(self, target: &Arc<T>) -> FleetWatch {
        self.watch_every(target, DEFAULT_POLL).await
    }

    /// [`FleetProfile::watch`], polling the version every `poll` (at least 10ms) besides
    /// following announcements.
    pub async fn watch_every<T: FleetTarget>(self, target: &Arc<T>, poll: Duration) -> FleetWatch {
        let metrics = FleetMetrics::new(&self.name);
        let mut watcher = Watcher {
            fleet: self,
            metrics,
            applied: None,
            applied_signed_at: None,
            rejected: None,
            bad_version: false,
            store_failing: false,
        };
        watcher.look(&**target).await;
        let target = Arc::downgrade(target);
        let task = tokio::spawn(follow(watcher, target, poll.max(Duration::from_millis(10))));
        FleetWatch { task }
    }
}

/// What woke the watcher.
enum Wake {
    Announced,
    Unsubscribed,
    Tick,
}

/// The watcher's loop, until the target is dropped.
async fn follow<T: FleetTarget>(mut w: Watcher, target: Weak<T>, poll: Duration) {
    let mut sub: Option<PubSubStream> = None;
    let mut next_subscribe = tokio::time::Instant::now();
    loop {
        let mut subscribed = false;
        if sub.is_none() && tokio::time::Instant::now() >= next_subscribe {
            if let Some(url) = w.fleet.subscribe_url.clone() {
                match subscribe(&url, &w.fleet.key).await {
                    Ok(s) => {
                        sub = Some(s);
                        subscribed = true;
                    }
                    Err(e) => {
                        tracing::debug!(name = %w.fleet.name, error = %e, "fleet profile: not subscribed; polling");
                        next_subscribe = tokio::time::Instant::now() + Duration::from_secs(1);
                    }
                }
            }
        }
        // Whatever was announced before the subscription took: look at once.
        let wake = if subscribed {
            Wake::Tick
        } else if sub.is_some() {
            next_event(&mut sub, poll).await
        } else {
            tokio::time::sleep(poll).await;
            Wake::Tick
        };
        if let Wake::Unsubscribed = wake {
            sub = None;
        }
        let Some(target) = target.upgrade() else {
            return;
        };
        w.look(&*target).await;
    }
}

/// The next announcement, the end of the subscription, or `poll` gone by.
async fn next_event(sub: &mut Option<PubSubStream>, poll: Duration) -> Wake {
    let mut sleep = core::pin::pin!(tokio::time::sleep(poll));
    core::future::poll_fn(|cx| {
        if let Some(s) = sub.as_mut() {
            match Pin::new(&mut *s).poll_next(cx) {
                Poll::Ready(Some(_)) => return Poll::Ready(Wake::Announced),
                Poll::Ready(None) => return Poll::Ready(Wake::Unsubscribed),
                Poll::Pending => {}
            }
        }
        sleep.as_mut().poll(cx).map(|()| Wake::Tick)
    })
    .await
}

/// A subscription to `channel` on its own connection (pub/sub takes a connection over).
async fn subscribe(url: &str, channel: &str) -> Result<PubSubStream, ::redis::RedisError> {
    let open = async {
        let client = ::redis::Client::open(url)?;
        let mut ps = client.get_async_pubsub().await?;
        ps.subscribe(channel).await?;
        Ok(ps.into_on_message())
    };
    match tokio::time::timeout(FLEET_TIMEOUT, open).await {
        Ok(r) => r,
        Err(_) => Err(::redis::RedisError::from((
            ::redis::ErrorKind::Io,
            "subscribe timed out",
        ))),
    }
}

impl Watcher {
    /// One look: the published version, and if it is neither in force nor known bad, the
    /// profile, handed to `target`.
    async fn look<T: FleetTarget>(&mut self, target: &T) {
        let name = self.fleet.name.as_str();
        let published = match self.fleet.stamp().await {
            Ok(v) => {
                self.store_failing = false;
                self.bad_version = false;
                v
            }
            Err(e) => return self.read_failed(e, None),
        };
        let in_force = target.version_in_force();
        self.metrics.in_force(in_force);
        let Some(stamp) = published else {
            return;
        };
        let current = in_force == Some(stamp.0) && self.applied.as_ref() == Some(&stamp);
        if current || self.rejected.as_ref() == Some(&stamp) {
            return;
        }
        let (message, id) = match self.fleet.fetch_stamped(self.applied_signed_at).await {
            Ok((Some(m), id)) => (m, id),
            Ok((None, _)) => return,
            Err(e) => return self.read_failed(e, Some(stamp)),
        };
        self.store_failing = false;
        let (version, message_signed_at) = (message.version, message.signed.map(|s| s.signed_at));
        match target.apply(version, message.profile) {
            Ok(()) => {
                self.applied = Some((version, id));
                self.applied_signed_at = message_signed_at;
                self.rejected = None;
                self.metrics.in_force(Some(version));
                tracing::info!(name, version, "fleet profile in force");
            }
            Err(e) => {
                self.rejected = Some((version, id));
                self.metrics.error(ErrorKind::Refused);
                tracing::warn!(name, version, error = %e, in_force = ?target.version_in_force(),
                    "fleet profile refused by the limiter; the profile in force stays");
            }
        }
    }

    /// A read failed: Redis (logged once per streak), or a key that holds no valid profile
    /// (counted once per version, `version` the one polled; `None`: the version field itself).
    fn read_failed(&mut self, e: ReadError, stamp: Option<(u64, Id)>) {
        let name = self.fleet.name.as_str();
        match e {
            ReadError::Store(e) => {
                self.metrics.error(ErrorKind::Store);
                if !self.store_failing {
                    tracing::warn!(name, error = %e, "fleet profile: redis read failed; the profile in force stays");
                }
                self.store_failing = true;
            }
            ReadError::Message(e) => {
                self.store_failing = false;
                let version = stamp.as_ref().map(|s| s.0);
                let new = match stamp {
                    Some(s) => self.rejected.replace(s.clone()) != Some(s),
                    None => !core::mem::replace(&mut self.bad_version, true),
                };
                if new {
                    self.metrics.error(ErrorKind::Invalid);
                    tracing::warn!(name, version, error = %e, "fleet profile: the published value is not a valid profile; the profile in force stays");
                }
            }
            ReadError::Signature(e) => {
                self.store_failing = false;
                let version = stamp.as_ref().map(|s| s.0);
                let new = stamp.is_some_and(|s| self.rejected.replace(s.clone()) != Some(s));
                if new {
                    self.metrics.error(ErrorKind::Signature);
                    tracing::warn!(name, version, error = %e, "fleet profile refused: not signed as this watcher requires; the profile in force stays");
                }
            }
        }
    }
}
