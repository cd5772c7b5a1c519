//! A Sentinel set-up of the test's own: a primary, a replica and three Sentinels watching it
//! (quorum 2, a primary is down after 1s without answering), on free loopback ports, in a temp
//! dir, killed on drop and the dir removed.

use std::time::Duration;

use crate::redis_node::{wait_until, Node, TempRoot};
use crate::resp::free_port;

/// The name the Sentinels monitor the primary under.
pub const MASTER: &str = "tollgate";

/// A running set-up. `data(0)` is the first primary, `data(1)` its replica; after a failover
/// [`RedisSentinel::primary_port`] tells which is primary.
pub struct RedisSentinel {
    data: Vec<Node>,
    sentinels: Vec<Node>,
    _root: TempRoot,
}

impl RedisSentinel {
    /// Starts the primary and the replica, waits until the replica is in sync, starts three
    /// Sentinels and waits until each knows the replica and the two other Sentinels.
    pub fn start() -> RedisSentinel {
        let root = TempRoot::new("sentinel");
        let primary = Node::start(root.path(), free_port(), &[]);
        let replica = Node::start(
            root.path(),
            free_port(),
            &["--replicaof", "127.0.0.1", &primary.port().to_string()].map(str::to_owned),
        );
        wait_until(Duration::from_secs(10), "replica in sync", || {
            replica
                .try_cmd(&["INFO", "replication"])
                .is_ok_and(|i| i.contains("master_link_status:up"))
        });
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let conf_dir = root.path().join(format!("s{port}"));
            std::fs::create_dir_all(&conf_dir).unwrap();
            let conf = conf_dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "sentinel monitor {MASTER} 127.0.0.1 {p} 2\n\
                     sentinel down-after-milliseconds {MASTER} 1000\n\
                     sentinel failover-timeout {MASTER} 5000\n\
                     sentinel parallel-syncs {MASTER} 1\n",
                    p = primary.port()
                ),
            )
            .unwrap();
            let args = [conf.to_str().unwrap(), "--sentinel"].map(str::to_owned);
            sentinels.push(Node::start(root.path(), port, &args));
        }
        let s = RedisSentinel {
            data: vec![primary, replica],
            sentinels,
            _root: root,
        };
        s.wait_watching();
        s
    }

    /// `redis+sentinel://127.0.0.1:S0,127.0.0.1:S1,127.0.0.1:S2/tollgate`
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+sentinel://{}/{MASTER}", hosts.join(","))
    }

    /// Data node `i` (0: the first primary, 1: the first replica).
    pub fn data(&self, i: usize) -> &Node {
        &self.data[i]
    }

    /// Kills data node `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        self.data[i].kill();
    }

    /// Starts data node `i` again (with its original arguments: the Sentinels then reconfigure
    /// it as a replica of the primary in force).
    pub fn restart(&mut self, i: usize) {
        self.data[i].restart();
    }

    /// The primary's port, as the first answering Sentinel names it.
    pub fn primary_port(&self) -> u16 {
        for s in &self.sentinels {
            if let Ok(r) = s.try_cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]) {
                if let Some(port) = r.lines().nth(1) {
                    return port.parse().unwrap();
                }
            }
        }
        panic!("no Sentinel names a primary");
    }

    /// `SENTINEL FAILOVER`: the first Sentinel promotes the replica without asking the others.
    pub fn force_failover(&self) {
        self.sentinels[0].cmd(&["SENTINEL", "FAILOVER", MASTER]);
    }

    /// Waits until every Sentinel sees a replica and the two other Sentinels (what a failover
    /// needs).
    pub fn wait_watching(&self) {
        wait_until(Duration::from_secs(30), "sentinels watching", || {
            self.sentinels.iter().all(|s| {
                let master = s
                    .try_cmd(&["SENTINEL", "MASTER", MASTER])
                    .unwrap_or_default();
                field(&master, "num-slaves").is_some_and(|n| n >= 1)
                    && field(&master, "num-other-sentinels").is_some_and(|n| n >= 2)
            })
        });
    }
}

/// A numeric field of a flattened `SENTINEL MASTER` reply (name and value on alternate lines).
fn field(reply: &str, name: &str) -> Option<u64> {
    let mut lines = reply.lines();
    while let Some(l) = lines.next() {
        if l == name {
            return lines.next()?.parse().ok();
        }
    }
    None
}
