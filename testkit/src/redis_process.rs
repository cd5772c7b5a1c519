//! Starting one `redis-server` process on a loopback port and waiting until it answers `PING`:
//! the one way both [`crate::redis_server::RedisServer`] and [`crate::redis_node::Node`]
//! start (and restart) theirs.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::resp::{cmd_at, missing};

/// The arguments every harness server gets: `port` on 127.0.0.1, no persistence.
pub(crate) fn loopback_args(port: u16) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Starts `redis-server ARGS` (which bind it to `port`) and waits up to 10 s for its `PONG`.
/// With `tied`, on Linux the server is killed when the thread that started it exits. Panics,
/// saying how to install it, without a `redis-server`; panics (the process killed) when it
/// exits or does not answer.
pub(crate) fn spawn(args: &[String], port: u16, tied: bool) -> Child {
    let mut cmd = Command::new("redis-server");
    cmd.args(args).stdout(Stdio::null()).stderr(Stdio::null());
    #[cfg(target_os = "linux")]
    if tied {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the child between fork and exec, where only
        // async-signal-safe calls are allowed: it makes one system call (prctl), allocates
        // nothing and touches no lock or state of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = tied;
    let mut child = cmd.spawn().unwrap_or_else(|e| missing("redis-server", e));
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if cmd_at(port, &["PING"]).is_ok_and(|r| r == "PONG") {
            return child;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("redis-server on port {port} exited: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill(&mut Some(child));
    panic!("redis-server on port {port} did not answer PING");
}

/// Kills the process (SIGKILL), if there is one, and waits for it to be gone.
pub(crate) fn kill(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}
