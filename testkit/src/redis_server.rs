//! A `redis-server` of the test's own on a free loopback port, killed on drop (the tiny RESP
//! client that looks at what the limiter left in it is `resp`).

use std::process::{Child, Command};

use crate::redis_process::{self, loopback_args};
pub use crate::resp::{bytes_at, cmd_at, free_port, missing, time_micros_at};

/// A running `redis-server` (no persistence), bound to 127.0.0.1.
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// Killed by the kernel when this process exits (see [`RedisServer::start_tied`]).
    tied: bool,
    extra: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free port. Panics, saying how to install it, if there is no
    /// `redis-server` on PATH: the redis tests never pass without a server.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// [`RedisServer::start`] with more command-line arguments (e.g. `--loadmodule PATH`).
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::launch(extra, false)
    }

    /// [`RedisServer::start`] for a process that never drops it (a fuzz target keeps its server
    /// in a static, and libFuzzer ends by `exit` or, on a crash, `abort`): on Linux the server
    /// is killed when the thread that started it exits, so start it from the main thread.
    pub fn start_tied() -> RedisServer {
        RedisServer::launch(&[], true)
    }

    /// [`RedisServer::start_tied`] with more command-line arguments.
    pub fn start_tied_with(extra: &[&str]) -> RedisServer {
        RedisServer::launch(extra, true)
    }

    fn launch(extra: &[&str], tied: bool) -> RedisServer {
        let mut extra: Vec<String> = extra.iter().map(|a| (*a).to_owned()).collect();
        // `TOLLGATE_TEST_REDIS_MODULE=1`: every server has tollgate's module.
        if crate::module_build::everywhere() && !extra.iter().any(|a| a == "--loadmodule") {
            extra.extend(["--loadmodule".to_owned(), crate::module_build::path()]);
        }
        let mut s = RedisServer {
            port: free_port(),
            child: None,
            tied,
            extra,
        };
        s.spawn();
        s
    }

    /// `redis://127.0.0.1:PORT/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    fn spawn(&mut self) {
        let mut args = loopback_args(self.port);
        args.extend(self.extra.iter().cloned());
        self.child = Some(redis_process::spawn(&args, self.port, self.tied));
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        redis_process::kill(&mut self.child);
    }

    /// Starts the server again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Freezes (SIGSTOP) or thaws (SIGCONT) the server: it keeps its connections but answers
    /// nothing while frozen.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let sig = if frozen { "-STOP" } else { "-CONT" };
        let ok = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(ok.success());
    }

    /// Runs one command; the reply flattened to strings (arrays one element a line).
    pub fn cmd(&self, args: &[&str]) -> String {
        self.try_cmd(args).expect("redis command")
    }

    fn try_cmd(&self, args: &[&str]) -> std::io::Result<String> {
        cmd_at(self.port, args)
    }

    /// Every key in the server.
    pub fn keys(&self) -> Vec<String> {
        let all = self.cmd(&["KEYS", "*"]);
        all.lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// The server's clock (`TIME`), in microseconds since the Unix epoch.
    pub fn time_micros(&self) -> u64 {
        time_micros_at(self.port)
    }

    /// The tokens the store has charged the identity that a decision's command names and not
    /// had back (see [`charged_at`]).
    pub fn charged(&self, command: &[String]) -> u64 {
        charged_at(self.port, command)
    }

    /// Calls of one command since the server started (`INFO commandstats`), e.g. "evalsha".
    pub fn calls(&self, command: &str) -> u64 {
        let info = self.cmd(&["INFO", "commandstats"]);
        let tag = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&tag))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_ref() {
            // A frozen server ignores SIGKILL only until it is continued; SIGKILL works anyway,
            // but continue first so that nothing is left stopped.
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
        }
        self.kill();
    }
}

/// The tokens the server on `port` has charged the identity that a decision's command names (the
/// `:i:` key of `RedisLimiter::store_command`) and not had back: its sustained TAT ahead
/// of the server's clock, in whole tokens (a charge within the last emission interval
/// counts whole). 0 for an identity the store does not hold.
pub fn charged_at(port: u16, command: &[String]) -> u64 {
    let name = command
        .iter()
        .find(|w| w.contains(":i:"))
        .expect("a decision's command names its identity's key");
    let reply = bytes_at(port, &["GET", name]).expect("redis GET");
    let Some(v) = reply.first() else { return 0 };
    assert_eq!(v.len(), 48, "a packed identity (six doubles)");
    let f = |i: usize| f64::from_le_bytes(v[i * 8..i * 8 + 8].try_into().unwrap());
    // The sustained TAT and the sustained emission interval, in microseconds.
    let (tat, interval) = (f(1), f(4));
    let now = time_micros_at(port) as f64;
    ((tat - now).max(0.0) / interval).ceil() as u64
}
