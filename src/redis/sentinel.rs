//! Following the primary that a set of Sentinels names, across failovers.
//!
//! Requests go to one multiplexed connection to the current primary. A background task (one per
//! limiter, ended when the limiter is dropped) asks the Sentinels who the primary is every
//! [`POLL`], and at once when a request saw the connection fail, saw `READONLY` (the node it
//! talks to was demoted) or could not get its writes onto a replica; it connects to the named
//! node, checks with `ROLE` that the node is a primary, and swaps the connection in. While there
//! is no primary every request fails at once, so decisions fail closed until the new primary
//! answers: recovery takes the Sentinels' failover plus at most one [`RETRY`].

use core::time::Duration;
use std::sync::{Arc, Weak};

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind,
    IntoConnectionInfo, Pipeline, RedisConnectionInfo, RedisError, RedisResult, ServerErrorKind,
    Value,
};
use arc_swap::ArcSwapOption;
use tokio::sync::Notify;

/// How often the Sentinels are asked who the primary is, while there is one.
const POLL: Duration = Duration::from_millis(250);
/// How soon they are asked again while there is none.
const RETRY: Duration = Duration::from_millis(50);

/// The requests' side: cheap to clone, shared with the resolver task.
#[derive(Clone)]
pub(super) struct SentinelLink {
    shared: Arc<Shared>,
}

struct Shared {
    /// The primary requests go to; `None` after its connection failed, until the resolver
    /// finds one.
    primary: ArcSwapOption<Primary>,
    /// Wakes the resolver before its next poll.
    poke: Notify,
    db: i64,
}

struct Primary {
    addr: (String, u16),
    conn: MultiplexedConnection,
    /// Replicas this primary has been seen with (`ROLE`): at connect, then only ever raised
    /// while it stays the primary. Acknowledged writes wait for at most this many (see
    /// [`SentinelLink::send_acknowledged`]).
    replicas: u32,
}

/// The resolver's side: the Sentinels and how to reach the primary they name.
struct Resolver {
    sentinels: Vec<(Client, Option<MultiplexedConnection>)>,
    master: String,
    node: RedisConnectionInfo,
    /// Bounds each connect and each question to a Sentinel.
    timeout: Duration,
}

impl SentinelLink {
    /// Finds and connects to the primary (failing if no Sentinel names a reachable primary),
    /// then starts the resolver task on the current tokio runtime.
    pub(super) async fn connect(
        sentinels: &[String],
        master: String,
        node: RedisConnectionInfo,
        timeout: Duration,
    ) -> RedisResult<SentinelLink> {
        let sentinels = sentinels
            .iter()
            .map(|u| Ok((Client::open(u.as_str())?, None)))
            .collect::<RedisResult<Vec<_>>>()?;
        let db = node.db();
        let mut resolver = Resolver {
            sentinels,
            master,
            node,
            timeout,
        };
        let primary = resolver.find().await?;
        let shared = Arc::new(Shared {
            primary: ArcSwapOption::from_pointee(primary),
            poke: Notify::new(),
            db,
        });
        tokio::spawn(resolve_forever(Arc::downgrade(&shared), resolver));
        Ok(SentinelLink { shared })
    }

    /// Asks the resolver to check with the Sentinels now (a write did not reach a replica: the
    /// primary may have lost it to a failover).
    pub(super) fn suspect(&self) {
        self.shared.poke.notify_one();
    }

    /// `cmd`, then `WAIT` on the same primary for `min(acks, replicas it was seen with)`
    /// replicas: the number of replicas acknowledged and the number required.
    ///
    /// Why not simply `acks`: after a failover the new primary has no replica until the old one
    /// rejoins (seconds to minutes); it holds every write its replica acknowledged before, so
    /// serving from it at once forgets nothing. The old primary, though, keeps the count it
    /// had: once its replica is promoted its writes are refused, not lost.
    pub(super) async fn send_acknowledged(
        &self,
        cmd: &Cmd,
        acks: u32,
        wait_ms: u64,
    ) -> RedisResult<(Value, i64, u32)> {
        let primary = self.current()?;
        let mut conn = primary.conn.clone();
        let r = conn.req_packed_command(cmd).await;
        self.check(&primary, r.as_ref().map(core::slice::from_ref));
        let reply = r?;
        let need = acks.min(primary.replicas);
        if need == 0 || matches!(reply, Value::ServerError(_)) {
            return Ok((reply, 0, 0));
        }
        let mut wait = ::redis::cmd("WAIT");
        wait.arg(need).arg(wait_ms);
        let r = conn.req_packed_command(&wait).await;
        self.check(&primary, r.as_ref().map(core::slice::from_ref));
        let acked = match r? {
            Value::Int(n) => n,
            Value::ServerError(e) => return Err(e.into()),
            _ => -1,
        };
        Ok((reply, acked, need))
    }

    pub(super) async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        let primary = self.current()?;
        let mut conn = primary.conn.clone();
        let r = conn.req_packed_command(cmd).await;
        self.check(&primary, r.as_ref().map(core::slice::from_ref));
        r
    }

    pub(super) async fn send_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let primary = self.current()?;
        let mut conn = primary.conn.clone();
        let r = conn.req_packed_commands(pipeline, offset, count).await;
        self.check(&primary, r.as_ref().map(Vec::as_slice));
        r
    }

    /// Replicas the current primary has been seen with (0 while there is none).
    pub(super) fn replicas(&self) -> u32 {
        self.shared
            .primary
            .load()
            .as_ref()
            .map_or(0, |p| p.replicas)
    }

    pub(super) fn db(&self) -> i64 {
        self.shared.db
    }

    fn current(&self) -> RedisResult<Arc<Primary>> {
        match self.shared.primary.load_full() {
            Some(p) => Ok(p),
            None => {
                self.shared.poke.notify_one();
                Err(RedisError::from((
                    ErrorKind::Io,
                    "no primary",
                    "the Sentinels' primary is being looked up".to_owned(),
                )))
            }
        }
    }

    /// Drops the connection to `used` (unless already replaced) and wakes the resolver if the
    /// reply shows it lost or demoted.
    fn check(&self, used: &Arc<Primary>, reply: Result<&[Value], &RedisError>) {
        let lost = match reply {
            Err(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                    || demoted(e.kind())
            }
            Ok(values) => values.iter().any(|v| match v {
                Value::ServerError(e) => e.kind().is_some_and(|k| demoted(ErrorKind::Server(k))),
                _ => false,
            }),
        };
        if lost {
            // Only the connection this request used: a fresh one swapped in meanwhile stays.
            self.shared
                .primary
                .compare_and_swap(used, None::<Arc<Primary>>);
            self.shared.poke.notify_one();
        }
    }
}

fn demoted(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    )
}

impl Resolver {
    /// The primary the first answering Sentinel names, connected and checked.
    async fn find(&mut self) -> RedisResult<Primary> {
        let addr = self.ask().await?;
        self.open(addr).await
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` of the first Sentinel that answers.
    async fn ask(&mut self) -> RedisResult<(String, u16)> {
        let mut last = None;
        for (client, cached) in &mut self.sentinels {
            let conn = match cached {
                Some(c) => c,
                None => {
                    match bounded(self.timeout, client.get_multiplexed_async_connection()).await {
                        Ok(c) => cached.insert(c),
                        Err(e) => {
                            last = Some(e);
                            continue;
                        }
                    }
                }
            };
            let mut q = ::redis::cmd("SENTINEL");
            q.arg("GET-MASTER-ADDR-BY-NAME").arg(&self.master);
            match bounded(self.timeout, q.query_async::<Option<(String, u16)>>(conn)).await {
                Ok(Some(addr)) => return Ok(addr),
                Ok(None) => {
                    last = Some(RedisError::from((
                        ErrorKind::MasterNameNotFoundBySentinel,
                        "no such primary",
                        format!("the Sentinels do not monitor `{}`", self.master),
                    )))
                }
                Err(e) => {
                    *cached = None;
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            RedisError::from((ErrorKind::InvalidClientConfig, "no Sentinel given"))
        }))
    }

    /// Connects to `addr` and checks that it is a primary (`ROLE`).
    async fn open(&self, addr: (String, u16)) -> RedisResult<Primary> {
        let info: ConnectionInfo = ConnectionAddr::Tcp(addr.0.clone(), addr.1)
            .into_connection_info()?
            .set_redis_settings(self.node.clone());
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            // Callers bound their own calls (`store.timeout`).
            .set_response_timeout(None);
        let client = Client::open(info)?;
        let mut conn = bounded(
            self.timeout,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await?;
        match self.replicas(&mut conn).await? {
            Some(replicas) => Ok(Primary {
                addr,
                conn,
                replicas,
            }),
            None => Err(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ReadOnly),
                "not a primary",
                format!("{}:{} is not a primary yet", addr.0, addr.1),
            ))),
        }
    }

    /// `ROLE`: the number of replicas connected if the node is a primary, `None` if it is not.
    async fn replicas(&self, conn: &mut MultiplexedConnection) -> RedisResult<Option<u32>> {
        let role: Vec<Value> =
            bounded(self.timeout, ::redis::cmd("ROLE").query_async(conn)).await?;
        Ok(match (role.first(), role.get(2)) {
            (Some(Value::BulkString(b)), Some(Value::Array(replicas))) if b == b"master" => {
                Some(replicas.len() as u32)
            }
            (Some(Value::BulkString(b)), _) if b == b"master" => Some(0),
            _ => None,
        })
    }
}

/// Keeps `shared.primary` on the primary the Sentinels name until the limiter is gone.
async fn resolve_forever(shared: Weak<Shared>, mut resolver: Resolver) {
    loop {
        {
            // Held only for one wait (at most POLL): the task ends within POLL of the drop.
            let Some(s) = shared.upgrade() else { return };
            let wait = if s.primary.load().is_some() {
                POLL
            } else {
                RETRY
            };
            let _ = tokio::time::timeout(wait, s.poke.notified()).await;
        }
        let Ok(addr) = resolver.ask().await else {
            continue;
        };
        let Some(s) = shared.upgrade() else { return };
        let current = s.primary.load_full();
        drop(s);
        if let Some(p) = current.filter(|p| p.addr == addr) {
            // Still the primary: learn of replicas that joined (never forget one that left:
            // it may have been promoted elsewhere).
            let mut conn = p.conn.clone();
            if let Ok(Some(n)) = resolver.replicas(&mut conn).await {
                if n > p.replicas {
                    let Some(s) = shared.upgrade() else { return };
                    let raised = Arc::new(Primary {
                        addr: p.addr.clone(),
                        conn,
                        replicas: n,
                    });
                    s.primary.compare_and_swap(&p, Some(raised));
                }
            }
            continue;
        }
        if let Ok(fresh) = resolver.open(addr).await {
            let Some(s) = shared.upgrade() else { return };
            s.primary.store(Some(Arc::new(fresh)));
        }
    }
}

async fn bounded<T>(
    limit: Duration,
    f: impl core::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(RedisError::from((
            ErrorKind::Io,
            "timed out",
            format!("no answer within {limit:?}"),
        ))),
    }
}
