//! One connection for the three topologies ([`Topology`]), and replicas' acknowledgement of
//! each decision.
//!
//! - **One node**: a `ConnectionManager` (one multiplexed connection, re-established in the
//!   background).
//! - **Redis Cluster**: the redis crate's cluster client: one multiplexed connection per node,
//!   the slot map learnt from the seeds, `MOVED` and `ASK` followed, the map refreshed when a
//!   node fails or a slot moves. A decision's keys share one hash tag, so one slot, so one node.
//! - **Sentinel**: [`SentinelLink`], which follows the primary the Sentinels name.
//!
//! # Acknowledged writes
//! A Redis primary acknowledges a write before any replica has it; a primary that dies (or is
//! demoted by a forced failover) loses what its replicas had not yet received, and the new
//! primary would admit those requests again. With `acks` > 0 every script or function call
//! (`EVAL`, `EVALSHA`, `FCALL`, or tollgate's module: `TOLLGATE.ADMIT`, `TOLLGATE.REFUND`) is
//! followed on the same connection (so the same node) by
//! `WAIT acks timeout`, and a reply counts only once `acks` replicas hold everything written
//! before it: otherwise the call fails (the decision fails closed; its charge stands on the
//! old primary, so this errs towards refusing).
//! Other commands (loading the script or functions, reading the clock) are not waited for.

use core::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use ::redis::{Arg, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use super::sentinel::SentinelLink;
use super::topology::Topology;

/// The store's connection: cheap to clone (every clone shares the same sockets).
#[derive(Clone)]
pub(super) struct Connection {
    link: Link,
    /// Replicas that must hold a script's writes before its reply counts; 0 for none.
    acks: u32,
    /// `WAIT`'s own timeout in milliseconds (at least 1: 0 would wait forever): half the
    /// profile's `store.timeout`, so that a missing acknowledgement is seen (and, with
    /// Sentinels, acted on) before the caller gives up.
    wait_ms: u64,
}

#[derive(Clone)]
enum Link {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelLink),
}

impl Connection {
    /// Connects to `topology`; `timeout` bounds each connect. `acks`: replicas each script
    /// call waits for (0: none).
    pub(super) async fn open(
        topology: &Topology,
        timeout: Duration,
        acks: u32,
        wait: Duration,
    ) -> RedisResult<Connection> {
        let link = match topology {
            Topology::Single(url) => {
                let client = ::redis::Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    // Callers time out themselves (`store.timeout`); a slow answer still arrives.
                    .set_response_timeout(None)
                    // Reconnect soon after an outage ends: decisions resume within ~200ms of it.
                    .set_min_delay(Duration::from_millis(10))
                    .set_max_delay(Duration::from_millis(200))
                    .set_number_of_retries(4);
                let conn = client.get_connection_manager_with_config(config).await?;
                Link::Single(conn)
            }
            Topology::Cluster(nodes) => {
                let client = ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(timeout)
                    // A node that stops answering is noticed, and the slot map refreshed.
                    .response_timeout(timeout)
                    // Callers give up after `store.timeout`: retry a redirect or a failed node
                    // a few times, quickly, not for seconds.
                    .retries(3)
                    .min_retry_wait(10)
                    .max_retry_wait(100)
                    .build()?;
                Link::Cluster(client.get_async_connection().await?)
            }
            Topology::Sentinel {
                sentinels,
                master,
                node,
            } => {
                let link =
                    SentinelLink::connect(sentinels, master.clone(), node.clone(), timeout).await?;
                Link::Sentinel(link)
            }
        };
        Ok(Connection {
            link,
            acks,
            wait_ms: (wait.as_millis() as u64).max(1),
        })
    }

    /// Waits until `acks` replicas hold what this connection wrote (on a Cluster: on every
    /// primary this connection wrote to); an error if fewer do within the wait.
    pub(super) async fn wait_for_replicas(&mut self) -> RedisResult<()> {
        if self.acks == 0 {
            return Ok(());
        }
        let need = match &self.link {
            Link::Sentinel(s) => s.replicas().min(self.acks),
            _ => self.acks,
        };
        let mut wait = ::redis::cmd("WAIT");
        wait.arg(need).arg(self.wait_ms);
        let acked = self.link.send(&wait).await?;
        self.enough(acked, need)
    }

    /// One script call whose reply counts only once `acks` replicas hold its writes.
    async fn acknowledged(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        if let Link::Sentinel(s) = &self.link {
            let (reply, acked, need) = s.send_acknowledged(cmd, self.acks, self.wait_ms).await?;
            self.enough(Value::Int(acked), need)?;
            return Ok(reply);
        }
        let reply = self.link.send(cmd).await?;
        if let Value::ServerError(_) = reply {
            // Nothing was written (NOSCRIPT, a script error): the caller sees the error.
            return Ok(reply);
        }
        let mut wait = ::redis::cmd("WAIT");
        wait.arg(self.acks).arg(self.wait_ms);
        let acked = match &mut self.link {
            // To the node that ran the script: the primary of its first key's slot.
            Link::Cluster(c) => {
                let route =
                    first_key(cmd).map(|k| Route::with_slot(Slot::for_key(k), SlotAddr::Master));
                match route {
                    Some(route) => {
                        c.route_command(
                            wait,
                            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                        )
                        .await?
                    }
                    None => return Ok(reply),
                }
            }
            link => link.send(&wait).await?,
        };
        self.enough(acked, self.acks)?;
        Ok(reply)
    }

    /// `acked` (`WAIT`'s reply) is at least `need`, or an error (and, with Sentinels, a look
    /// at who is primary now).
    fn enough(&self, acked: Value, need: u32) -> RedisResult<()> {
        let n = match acked {
            Value::Int(n) => n,
            Value::ServerError(e) => return Err(e.into()),
            _ => -1,
        };
        if n >= i64::from(need) {
            return Ok(());
        }
        if let Link::Sentinel(s) = &self.link {
            // The primary may have been replaced by a forced failover: look now.
            s.suspect();
        }
        Err(RedisError::from((
            ErrorKind::Io,
            "writes not acknowledged",
            format!(
                "{n} of {need} replicas acknowledged within {}ms",
                self.wait_ms
            ),
        )))
    }
}

/// `EVALSHA sha numkeys key ...`, `FCALL name numkeys key ...` or (tollgate's Redis module)
/// `TOLLGATE.ADMIT key ...`: the first key, if any.
fn first_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter();
    if let Some(Arg::Simple(name)) = args.next() {
        if is_module_command(name) {
            return match args.next() {
                Some(Arg::Simple(k)) => Some(k),
                _ => None,
            };
        }
    }
    let (Some(_), Some(Arg::Simple(n))) = (args.next(), args.next()) else {
        return None;
    };
    if n == b"0" {
        return None;
    }
    match args.next() {
        Some(Arg::Simple(k)) => Some(k),
        _ => None,
    }
}

/// A script or function call (`EVAL`, `EVALSHA` or `FCALL`) or a command of tollgate's Redis
/// module: the only writes decisions make.
fn is_script(cmd: &Cmd) -> bool {
    match cmd.args_iter().next() {
        Some(Arg::Simple(name)) => {
            is_module_command(name)
                || [&b"EVALSHA"[..], b"EVAL", b"FCALL"]
                    .iter()
                    .any(|verb| name.eq_ignore_ascii_case(verb))
        }
        _ => false,
    }
}

/// `TOLLGATE.ADMIT` or `TOLLGATE.REFUND` (the module's commands: keys first).
fn is_module_command(name: &[u8]) -> bool {
    [&b"TOLLGATE.ADMIT"[..], b"TOLLGATE.REFUND"]
        .iter()
        .any(|verb| name.eq_ignore_ascii_case(verb))
}

impl Link {
    async fn send(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Link::Single(c) => c.req_packed_command(cmd).await,
            Link::Cluster(c) => c.req_packed_command(cmd).await,
            Link::Sentinel(s) => s.send(cmd).await,
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            if self.acks > 0 && is_script(cmd) {
                self.acknowledged(cmd).await
            } else {
                self.link.send(cmd).await
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            match &mut self.link {
                Link::Single(c) => c.req_packed_commands(pipeline, offset, count).await,
                Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count).await,
                Link::Sentinel(s) => s.send_pipeline(pipeline, offset, count).await,
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
            Link::Sentinel(s) => s.db(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_goes_to_the_slot_of_the_scripts_first_key() {
        let mut eval = ::redis::cmd("EVALSHA");
        eval.arg("abc")
            .arg(2)
            .arg("t:{42}:i:x")
            .arg("t:{42}:s")
            .arg("1");
        assert!(is_script(&eval));
        assert_eq!(first_key(&eval), Some(&b"t:{42}:i:x"[..]));
        let mut keyless = ::redis::cmd("EVAL");
        keyless.arg("return 1").arg(0);
        assert!(is_script(&keyless));
        assert_eq!(first_key(&keyless), None);
        let mut fcall = ::redis::cmd("FCALL");
        fcall
            .arg("tollgate_abc")
            .arg(2)
            .arg("t:{7}:i:y")
            .arg("t:{7}:c");
        assert!(is_script(&fcall));
        assert_eq!(first_key(&fcall), Some(&b"t:{7}:i:y"[..]));
        let mut module = ::redis::cmd("tollgate.admit");
        module
            .arg("t:{9}:i:z")
            .arg("t:{9}:c")
            .arg("1 2 3 4 5 6 7 8");
        assert!(is_script(&module));
        assert_eq!(first_key(&module), Some(&b"t:{9}:i:z"[..]));
        let mut get = ::redis::cmd("GET");
        get.arg("k");
        assert!(!is_script(&get));
    }
}
