//! One `redis-server` process (a data node or a Sentinel) of a multi-node harness: its port, its
//! own directory, killed on drop. [`crate::redis_cluster`] and [`crate::redis_sentinel`] are
//! built from these.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use crate::redis_process::{self, loopback_args};
use crate::resp::cmd_at;

/// A running `redis-server` bound to 127.0.0.1, with no persistence, in its own directory.
pub struct Node {
    port: u16,
    dir: PathBuf,
    /// Everything after the binary, to start it again the same way.
    args: Vec<String>,
    child: Option<Child>,
}

impl Node {
    /// Starts `redis-server ARGS --port PORT --dir DIR ...` (a config file, if any, comes first
    /// in `args`) and waits until it answers `PING`.
    pub fn start(root: &Path, port: u16, args: &[String]) -> Node {
        let dir = root.join(port.to_string());
        std::fs::create_dir_all(&dir).expect("node directory");
        let mut all = args.to_vec();
        all.extend(loopback_args(port));
        all.extend([
            "--dir".to_owned(),
            dir.to_str().expect("utf-8 temp dir").to_owned(),
        ]);
        let mut node = Node {
            port,
            dir,
            args: all,
            child: None,
        };
        node.spawn();
        node
    }

    /// The node's own directory (config files, `nodes.conf`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Whether the process runs (not killed by the test).
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    fn spawn(&mut self) {
        self.child = Some(redis_process::spawn(&self.args, self.port, false));
    }

    /// Kills the process (SIGKILL) and waits for it to be gone.
    pub fn kill(&mut self) {
        redis_process::kill(&mut self.child);
    }

    /// Starts the process again, same port, same directory (a cluster node keeps its
    /// `nodes.conf`, so it rejoins as what the cluster now says it is).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// One command; panics on an error reply.
    pub fn cmd(&self, args: &[&str]) -> String {
        self.try_cmd(args)
            .unwrap_or_else(|e| panic!("port {}: {args:?}: {e}", self.port))
    }

    pub fn try_cmd(&self, args: &[&str]) -> std::io::Result<String> {
        cmd_at(self.port, args)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A directory of the harness's own under the system's temp dir, removed on drop.
pub struct TempRoot(PathBuf);

impl TempRoot {
    pub fn new(kind: &str) -> TempRoot {
        let path = std::env::temp_dir().join(format!(
            "tollgate-{kind}-{}-{}",
            std::process::id(),
            crate::resp::free_port()
        ));
        std::fs::create_dir_all(&path).expect("temp dir");
        TempRoot(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Polls `ok` every 50ms until it holds; panics with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what}: not within {limit:?}");
}
