//! A Redis Cluster of the test's own: 3 primaries and 3 replicas on free loopback ports
//! (`redis-server --cluster-enabled yes`, joined by `redis-cli --cluster create
//! --cluster-replicas 1`), in a temp dir, every node killed on drop and the dir removed.
//!
//! The nodes declare a failed peer after 1s (`cluster-node-timeout`), a replica may always take
//! over (`cluster-replica-validity-factor 0`), and the other slots keep serving while one
//! primary is down (`cluster-require-full-coverage no`): the settings a limiter's cluster wants.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::redis_node::{wait_until, Node, TempRoot};
use crate::resp::{free_port, missing};

/// A running cluster. Nodes are numbered 0..6 in start order; which are primaries changes with
/// failovers ([`RedisCluster::primary_of`] asks the cluster).
pub struct RedisCluster {
    nodes: Vec<Node>,
    _root: TempRoot,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    pub failed: bool,
    /// Slot ranges served (primaries), inclusive.
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts six nodes, creates the cluster and waits until every node sees it whole and every
    /// replica is in sync. Panics, saying how to install them, without `redis-server` or
    /// `redis-cli`.
    pub fn start() -> RedisCluster {
        let root = TempRoot::new("cluster");
        let mut nodes = Vec::new();
        for _ in 0..6 {
            let (port, bus) = (free_port(), free_port());
            let args = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                &bus.to_string(),
                "--cluster-node-timeout",
                "1000",
                "--cluster-replica-validity-factor",
                "0",
                "--cluster-require-full-coverage",
                "no",
            ]
            .map(str::to_owned);
            nodes.push(Node::start(root.path(), port, &args));
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| missing("redis-cli", e));
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes, _root: root };
        cluster.wait_healthy();
        cluster
    }

    /// `redis+cluster://127.0.0.1:P0,...,127.0.0.1:P5/`, every node a seed.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}/", hosts.join(","))
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &Node {
        &self.nodes[i]
    }

    /// How many nodes the harness started (6).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always false: a cluster has nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The index of the node with `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .expect("a node of this cluster")
    }

    /// `CLUSTER NODES` as seen by the first running node.
    pub fn topology(&self) -> Vec<NodeInfo> {
        let text = self.any().cmd(&["CLUSTER", "NODES"]);
        text.lines().filter_map(parse_node).collect()
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn keyslot(&self, key: &str) -> u16 {
        self.any()
            .cmd(&["CLUSTER", "KEYSLOT", key])
            .parse()
            .unwrap()
    }

    /// The index of the primary serving `slot` now (as the first running node sees it).
    pub fn primary_of(&self, slot: u16) -> usize {
        let info = self
            .topology()
            .into_iter()
            .find(|n| {
                n.primary && !n.failed && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
            })
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"));
        self.index_of(info.port)
    }

    /// Kills node `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts node `i` again; it rejoins (as a replica if it was failed over) and syncs.
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].restart();
    }

    /// Waits until every running node reports `cluster_state:ok`, all 16384 slots are served by
    /// a primary that is not failed, and every running replica's link to its primary is up.
    pub fn wait_healthy(&self) {
        wait_until(Duration::from_secs(30), "cluster healthy", || {
            self.nodes.iter().filter(|n| n.running()).all(|n| {
                let ok = n
                    .try_cmd(&["CLUSTER", "INFO"])
                    .is_ok_and(|i| i.contains("cluster_state:ok"));
                let repl = n.try_cmd(&["INFO", "replication"]).unwrap_or_default();
                let synced = repl.contains("role:master") || repl.contains("master_link_status:up");
                ok && synced
            }) && {
                let served: u32 = self
                    .topology()
                    .iter()
                    .filter(|n| n.primary && !n.failed)
                    .flat_map(|n| n.slots.iter().map(|(a, b)| u32::from(b - a) + 1))
                    .sum();
                served == 16384
            }
        });
    }

    /// Starts moving `slot` to the primary `to` as `redis-cli --cluster reshard` does: `CLUSTER
    /// SETSLOT` IMPORTING on `to` and MIGRATING on the owner, then `MIGRATE` of every key. Until
    /// [`RedisCluster::finish_move`] the owner answers `ASK` for the slot's keys.
    pub fn start_move(&self, slot: u16, to: usize) {
        let from = self.primary_of(slot);
        assert_ne!(from, to, "slot {slot} is already on node {to}");
        let s = slot.to_string();
        let (from_id, to_id) = (self.id(from), self.id(to));
        self.nodes[to].cmd(&["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]);
        self.nodes[from].cmd(&["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]);
        loop {
            let keys = self.nodes[from].cmd(&["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            let port = self.nodes[to].port().to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys);
            self.nodes[from].cmd(&args);
        }
    }

    /// Ends a move begun by [`RedisCluster::start_move`]: `SETSLOT NODE` on the new owner, the
    /// old one and every other primary. The old owner then answers `MOVED`.
    pub fn finish_move(&self, slot: u16, to: usize) {
        let s = slot.to_string();
        let to_id = self.id(to);
        self.nodes[to].cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
        for n in self.topology().iter().filter(|n| n.primary && !n.failed) {
            let i = self.index_of(n.port);
            if i != to {
                self.nodes[i].cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
            }
        }
    }

    /// The indices of the primaries that are not failed.
    pub fn primaries(&self) -> Vec<usize> {
        self.topology()
            .iter()
            .filter(|n| n.primary && !n.failed)
            .map(|n| self.index_of(n.port))
            .collect()
    }

    /// Every key on the running primaries, with the index of the primary holding it.
    pub fn keys(&self) -> Vec<(usize, String)> {
        let mut all = Vec::new();
        for i in self.primaries() {
            for k in self.nodes[i].cmd(&["KEYS", "*"]).lines() {
                if !k.is_empty() {
                    all.push((i, k.to_owned()));
                }
            }
        }
        all
    }

    /// `FLUSHALL` on every running primary.
    pub fn flush(&self) {
        for i in self.primaries() {
            self.nodes[i].cmd(&["FLUSHALL"]);
        }
    }

    fn id(&self, i: usize) -> String {
        self.nodes[i].cmd(&["CLUSTER", "MYID"])
    }

    /// `calls` of `command` in `INFO commandstats`, summed over the running nodes.
    pub fn calls(&self, command: &str) -> u64 {
        let tag = format!("cmdstat_{command}:calls=");
        self.nodes
            .iter()
            .filter(|n| n.running())
            .filter_map(|n| n.try_cmd(&["INFO", "commandstats"]).ok())
            .filter_map(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix(&tag))
                    .and_then(|rest| rest.split(',').next())
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .sum()
    }

    fn any(&self) -> &Node {
        self.nodes
            .iter()
            .find(|n| n.running())
            .expect("a running node")
    }
}

fn parse_node(line: &str) -> Option<NodeInfo> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.len() < 8 {
        return None;
    }
    let port = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
    let flags = f[2];
    let slots = f[8..]
        .iter()
        .filter(|s| !s.starts_with('['))
        .filter_map(|s| match s.split_once('-') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => s.parse().ok().map(|a| (a, a)),
        })
        .collect();
    Some(NodeInfo {
        id: f[0].to_owned(),
        port,
        primary: flags.contains("master"),
        failed: flags.contains("fail") || f[7] != "connected",
        slots,
    })
}
