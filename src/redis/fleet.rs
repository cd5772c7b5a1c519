//! One profile for the fleet: publish a profile to Redis once, and every [`RedisLimiter`]
//! watching its name switches to it (see [`super::fleet_watch`]) without a deploy.
//!
//! # Keys
//! A published profile is one hash, `<prefix>:{fleet}:profile:<name>`, with two fields:
//! `version` (an integer bumped by each publish, from 1), `body` (the YAML as published) and
//! `id` (random, new with each publish: after Redis loses its data the count starts again at
//! 1, and a worker that had version 1 in force still sees that this is another publish).
//! The prefix is the builder's ([`RedisBuilder::key_prefix`], default `tollgate`); the name is
//! the operator's, never tenant data. A publish is one Lua script, `HINCRBY` then `HSET` then
//! `PUBLISH` on the channel of the same name, so a reader (one `HMGET`) never sees a body
//! without its version, nor a version whose body is not there yet.
//!
//! # Redis Cluster and Sentinel
//! Every fleet key carries the hash tag `{fleet}`: all of them sit in one slot, on one primary,
//! and a publish is one script on it. Announcements go out with `PUBLISH`, which a Cluster
//! broadcasts to every node; watchers of a Cluster or of a Sentinel-managed primary do not
//! subscribe, though, and rely on polling the version (through the limiter's own connection,
//! so they follow `MOVED` and failovers as decisions do). On one node they subscribe too, and
//! switch within milliseconds.
//!
//! [`RedisBuilder::key_prefix`]: super::RedisBuilder::key_prefix

use core::fmt;
use core::time::Duration;
use std::sync::Arc;

use ::redis::{RedisError, Script};

use super::connect_error::ConnectError;
use super::connection::Connection;
use super::fleet_message::{decode, decode_version, FleetMessage, MessageError};
use super::fleet_message::{BODY_FIELD, ID_FIELD, SIGNED_AT_FIELD, SIG_FIELD, VERSION_FIELD};
use super::fleet_signature::{self, FleetSigningKey, FleetVerifyingKey, SignatureError};

/// A publish's id as read back (absent if the hash was written by hand).
pub(super) type Id = Option<Vec<u8>>;
use super::topology::Topology;
use super::RedisLimiter;
use crate::profile::{Profile, ProfileError};

/// How long a publish, or one read of a watcher, may take before it counts as failed: fleet
/// calls are rare and not on a request's path, so this is not the profile's `store.timeout`.
pub(super) const FLEET_TIMEOUT: Duration = Duration::from_secs(2);

/// Bump, store, announce: one atomic step (KEYS[1] the hash; ARGV[1] the body, ARGV[2] the
/// publish's id). The channel is the key's name; the message is the new version. An unsigned
/// publish removes an earlier one's signature, so that none sits beside another body.
const PUBLISH_LUA: &str = "local v = redis.call('HINCRBY', KEYS[1], 'version', 1)\n\
     redis.call('HSET', KEYS[1], 'body', ARGV[1], 'id', ARGV[2])\n\
     redis.call('HDEL', KEYS[1], 'sig', 'signed_at')\n\
     redis.call('PUBLISH', KEYS[1], v)\n\
     return v\n";

/// A signed publish: the same step for the version the signature names (ARGV[3]), only if it
/// is the next one (else `false`: another publish came between, sign again); ARGV[4] the
/// signature, ARGV[5] when it was made.
const PUBLISH_SIGNED_LUA: &str =
    "local v = (tonumber(redis.call('HGET', KEYS[1], 'version')) or 0) + 1\n\
     if v ~= tonumber(ARGV[3]) then return false end\n\
     redis.call('HSET', KEYS[1], 'version', v, 'body', ARGV[1], 'id', ARGV[2], 'sig', ARGV[4], \
     'signed_at', ARGV[5])\n\
     redis.call('PUBLISH', KEYS[1], v)\n\
     return v\n";

/// A fleet profile's name in Redis: where it is kept and announced.
#[derive(Clone)]
pub struct FleetProfile {
    pub(super) conn: Connection,
    /// The hash's key, also the announcement channel.
    pub(super) key: String,
    pub(super) name: String,
    /// The node to subscribe on (one-node topologies); `None`: poll only.
    pub(super) subscribe_url: Option<String>,
    /// The keys a version must be signed by to be put in force; `None`: any valid profile.
    pub(super) trusted: Option<Arc<[FleetVerifyingKey]>>,
}

impl fmt::Debug for FleetProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetProfile")
            .field("key", &self.key)
            .field("subscribes", &self.subscribe_url.is_some())
            .field("signed_only", &self.trusted.is_some())
            .finish_non_exhaustive()
    }
}

/// Why [`FleetProfile::publish`] refused or failed. Nothing was written in either case.
#[derive(Debug)]
pub enum PublishError {
    /// The profile does not validate (line and column where known): refused before Redis
    /// was asked anything.
    Invalid(ProfileError),
    /// Redis refused or failed the publish.
    Store(RedisError),
    /// Redis did not answer within 2 seconds (the publish may or may not have happened:
    /// [`FleetProfile::published_version`] tells).
    Timeout,
    /// Other publishes kept coming between reading the version and signing the next one.
    Contended,
}

impl fmt::Display for PublishError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PublishError::Invalid(e) => write!(f, "profile refused, nothing published: {e}"),
            PublishError::Store(e) => write!(f, "redis: {e}"),
            PublishError::Timeout => write!(f, "redis did not answer within {FLEET_TIMEOUT:?}"),
            PublishError::Contended => {
                f.write_str("other publishes kept coming between reading and signing a version")
            }
        }
    }
}

impl std::error::Error for PublishError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PublishError::Invalid(e) => Some(e),
            PublishError::Store(e) => Some(e),
            PublishError::Timeout | PublishError::Contended => None,
        }
    }
}

/// Why a fleet read failed: the store, or what it held.
#[derive(Debug)]
pub enum ReadError {
    /// Redis failed or did not answer in time.
    Store(RedisError),
    /// The key holds something that is not a published profile.
    Message(MessageError),
    /// The profile is not signed as the watcher requires ([`FleetProfile::trusting`]).
    Signature(SignatureError),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Store(e) => write!(f, "redis: {e}"),
            ReadError::Message(e) => fmt::Display::fmt(e, f),
            ReadError::Signature(e) => write!(f, "fleet profile refused: {e}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// A name is an operator's word: not empty, at most 128 bytes of visible ASCII, no braces
/// (they would change the key's hash tag, and so its Cluster slot).
pub(super) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "fleet profile name {name:?}: 1 to 128 bytes of visible ASCII, no braces"
        ))
    }
}

impl FleetProfile {
    /// Connects to the Redis at `url` (any URL [`RedisLimiter::builder`] takes) for the fleet
    /// profile `name` under `prefix` (the workers' [`super::RedisBuilder::key_prefix`],
    /// `tollgate` unless they set one): what a publisher needs, no limiter and no profile.
    pub async fn connect(
        url: &str,
        prefix: &str,
        name: &str,
    ) -> Result<FleetProfile, ConnectError> {
        check_name(name).map_err(|m| {
            ConnectError::Store(RedisError::from((
                ::redis::ErrorKind::InvalidClientConfig,
                "bad fleet profile name",
                m,
            )))
        })?;
        let topology = Topology::parse(url)?;
        let open = Connection::open(
            &topology,
            Duration::from_secs(1),
            0,
            Duration::from_millis(1),
        );
        let conn = match tokio::time::timeout(FLEET_TIMEOUT, open).await {
            Ok(c) => c?,
            Err(_) => return Err(ConnectError::Timeout(FLEET_TIMEOUT)),
        };
        Ok(FleetProfile::new(
            conn,
            topology.subscribe_url(),
            prefix,
            name,
        ))
    }

    /// The fleet profile `name` on an open connection (`name` checked by the caller).
    pub(super) fn new(
        conn: Connection,
        subscribe_url: Option<String>,
        prefix: &str,
        name: &str,
    ) -> FleetProfile {
        FleetProfile {
            conn,
            key: format!("{prefix}:{{fleet}}:profile:{name}"),
            name: name.to_owned(),
            subscribe_url,
            trusted: None,
        }
    }

    /// The profile's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key that holds the published profile (a hash: `version`, `body`), which is also
    /// the channel its announcements go out on.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Validates `yaml` as [`Profile::from_yaml`] does and, only if it is valid, publishes it:
    /// the next version, stored with its body and announced to watchers in one atomic step.
    /// Returns the new version. A profile that does not validate is refused with its line and
    /// column and never written, so it cannot reach a worker. (Whether each worker's limiter
    /// may reload into it, e.g. with an unchanged `identities.capacity`, only the worker can
    /// tell: one that refuses keeps its profile and counts the refusal.)
    pub async fn publish(&self, yaml: &str) -> Result<u64, PublishError> {
        Profile::from_yaml(yaml).map_err(PublishError::Invalid)?;
        let mut conn = self.conn.clone();
        let script = Script::new(PUBLISH_LUA);
        let mut call = script.key(&self.key);
        call.arg(yaml).arg(publish_id());
        match tokio::time::timeout(FLEET_TIMEOUT, call.invoke_async::<u64>(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(PublishError::Store(e)),
            Err(_) => Err(PublishError::Timeout),
        }
    }

    /// [`FleetProfile::publish`], signed with `key` ([`FleetSigningKey`]): watchers
    /// that trust its public key put it in force, and refuse what is not signed by a key they
    /// trust. The signature names the version, so the version is read first and the write
    /// happens only if no other publish came between (else it is signed again, up to five
    /// times).
    pub async fn publish_signed(
        &self,
        yaml: &str,
        key: &FleetSigningKey,
    ) -> Result<u64, PublishError> {
        Profile::from_yaml(yaml).map_err(PublishError::Invalid)?;
        let script = Script::new(PUBLISH_SIGNED_LUA);
        for _ in 0..5 {
            let version = match self.published_version().await {
                Ok(v) => v.unwrap_or(0) + 1,
                // A corrupt version field: the next publish starts again at 1.
                Err(ReadError::Message(_) | ReadError::Signature(_)) => 1,
                Err(ReadError::Store(e)) => return Err(PublishError::Store(e)),
            };
            let signed_at = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let sig = key.sign(&self.name, version, signed_at, yaml.as_bytes());
            let mut conn = self.conn.clone();
            let mut call = script.key(&self.key);
            call.arg(yaml)
                .arg(publish_id())
                .arg(version)
                .arg(fleet_signature::encode(&sig))
                .arg(signed_at);
            let done =
                tokio::time::timeout(FLEET_TIMEOUT, call.invoke_async::<Option<u64>>(&mut conn));
            match done.await {
                Ok(Ok(Some(v))) => return Ok(v),
                Ok(Ok(None)) => continue,
                Ok(Err(e)) => return Err(PublishError::Store(e)),
                Err(_) => return Err(PublishError::Timeout),
            }
        }
        Err(PublishError::Contended)
    }

    /// Trust only versions signed by one of `keys` ([`FleetProfile::publish_signed`]): a
    /// watcher started from this refuses an unsigned version, a bad signature, and one signed
    /// before the version it has in force, each counted
    /// (`tollgate_fleet_profile_errors_total{kind="signature"}`) and logged. Without keys
    /// (the default) any valid profile is put in force.
    pub fn trusting(mut self, keys: Vec<FleetVerifyingKey>) -> FleetProfile {
        self.trusted = (!keys.is_empty()).then(|| Arc::from(keys));
        self
    }

    /// The version published under this name, `None` if none is. One `HGET`.
    pub async fn published_version(&self) -> Result<Option<u64>, ReadError> {
        let mut conn = self.conn.clone();
        let mut cmd = ::redis::cmd("HGET");
        cmd.arg(&self.key).arg(VERSION_FIELD);
        let raw: Option<Vec<u8>> = within(cmd.query_async(&mut conn)).await?;
        decode_version(raw.as_deref()).map_err(ReadError::Message)
    }

    /// The published version and its profile, read together (one `HMGET`) and validated
    /// (with [`FleetProfile::trusting`], its signature too); `None` if nothing is published
    /// under this name.
    pub async fn fetch(&self) -> Result<Option<FleetMessage>, ReadError> {
        self.fetch_stamped(None).await.map(|(m, _)| m)
    }

    /// [`FleetProfile::fetch`] and the publish's id read with it (one `HMGET`); with trusted
    /// keys, the signature checked too (`in_force`: when the version in force was signed).
    pub(super) async fn fetch_stamped(
        &self,
        in_force: Option<u64>,
    ) -> Result<(Option<FleetMessage>, Id), ReadError> {
        let mut conn = self.conn.clone();
        let mut cmd = ::redis::cmd("HMGET");
        cmd.arg(&self.key)
            .arg(VERSION_FIELD)
            .arg(BODY_FIELD)
            .arg(ID_FIELD)
            .arg(SIG_FIELD)
            .arg(SIGNED_AT_FIELD);
        type Fields = (
            Option<Vec<u8>>,
            Option<Vec<u8>>,
            Id,
            Option<Vec<u8>>,
            Option<Vec<u8>>,
        );
        let (version, body, id, sig, signed_at): Fields =
            within(cmd.query_async(&mut conn)).await?;
        let Some(mut m) =
            decode(version.as_deref(), body.as_deref()).map_err(ReadError::Message)?
        else {
            return Ok((None, id));
        };
        m.signed = fleet_signature::decode(sig.as_deref(), signed_at.as_deref());
        if let Some(keys) = &self.trusted {
            let body = body.as_deref().unwrap_or_default();
            fleet_signature::verify(keys, &self.name, m.version, body, m.signed, in_force)
                .map_err(ReadError::Signature)?;
        }
        Ok((Some(m), id))
    }

    /// The published version and the publish's id (one `HMGET`): what watchers poll.
    pub(super) async fn stamp(&self) -> Result<Option<(u64, Id)>, ReadError> {
        let mut conn = self.conn.clone();
        let mut cmd = ::redis::cmd("HMGET");
        cmd.arg(&self.key).arg(VERSION_FIELD).arg(ID_FIELD);
        let (raw, id): (Option<Vec<u8>>, Id) = within(cmd.query_async(&mut conn)).await?;
        let version = decode_version(raw.as_deref()).map_err(ReadError::Message)?;
        Ok(version.map(|v| (v, id)))
    }
}

/// A publish's random id (16 hex digits).
fn publish_id() -> String {
    crate::engine::random_secret()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A fleet call bounded by [`FLEET_TIMEOUT`].
async fn within<T>(
    call: impl core::future::Future<Output = Result<T, RedisError>>,
) -> Result<T, ReadError> {
    match tokio::time::timeout(FLEET_TIMEOUT, call).await {
        Ok(r) => r.map_err(ReadError::Store),
        Err(_) => Err(ReadError::Store(RedisError::from((
            ::redis::ErrorKind::Io,
            "fleet read timed out",
        )))),
    }
}

/// The fleet profile on a limiter: its version in force, and following it.
impl RedisLimiter {
    /// Swaps in `profile` as [`RedisLimiter::reload`] does (the same refusals), marking it as
    /// version `version` of a fleet profile: the discovery document and
    /// [`RedisLimiter::profile_version`] show it. What a [`FleetWatch`](super::FleetWatch) calls.
    pub fn reload_version(&self, profile: Profile, version: u64) -> Result<(), ProfileError> {
        self.engine.reload_as(profile, Some(version))?;
        if let Some(deny) = &self.deny {
            deny.clear();
        }
        Ok(())
    }

    /// The fleet profile's version in force; `None` when the profile in force is the one
    /// this worker was built or reloaded with.
    pub fn profile_version(&self) -> Option<u64> {
        self.engine.profile_version()
    }

    /// The fleet profile `name` on this limiter's connection and key prefix: to publish or
    /// read it. Refused if `name` is empty, over 128 bytes, or has braces or spaces.
    pub fn fleet_profile(&self, name: &str) -> Result<FleetProfile, String> {
        check_name(name)?;
        Ok(FleetProfile::new(
            self.store.connection().clone(),
            self.subscribe_url.clone(),
            &self.store.prefix,
            name,
        ))
    }
}
