//! The server's listeners under a flood, on loopback: idle gRPC connections do not exhaust its
//! descriptors or its CPU (a process limited to 256 files, 372 silent connections), they are
//! closed at the header deadline, one address cannot take the listener (a clear
//! `UNAVAILABLE`), and 20,000 concurrent calls on one HTTP/2 connection are all answered.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tollgate::{quanta, Limiter, Profile};
use tollgate_ops::Policy;
use tollgate_server::{Policies, RateLimiter};

use super::*;

/// A roomy profile: 20,000 calls of one caller all admitted.
fn roomy() -> String {
    PROFILE
        .replace("tokens: 3, per: 1s", "tokens: 100000, per: 1s")
        .replace("tokens: 100, per: 1h", "tokens: 100000, per: 1h")
}

/// An in-process server under `policy` (both listeners), its gRPC address.
async fn serving(yaml: &str, policy: Policy) -> SocketAddr {
    let (clock, _mock) = quanta::Clock::mock();
    let profile = Profile::from_yaml(yaml).unwrap();
    let backend = Limiter::builder(profile).clock(clock).build().unwrap();
    let limiter = Arc::new(RateLimiter::new(Arc::new(backend)).unwrap());
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = grpc.local_addr().unwrap();
    tokio::spawn(tollgate_server::serve_with(
        limiter,
        grpc,
        None,
        None,
        None,
        Policies::from(policy),
        std::future::pending(),
    ));
    addr
}

async fn client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

async fn read_one(c: &mut RateLimitServiceClient<Channel>) -> Result<i32, tonic::Status> {
    c.should_rate_limit(req("edge", vec![alice("read")], 0))
        .await
        .map(|r| r.into_inner().overall_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_concurrent_calls_on_one_connection_are_all_answered() {
    let addr = serving(&roomy(), Policy::default()).await;
    let c = client(addr).await;
    let calls = (0..20_000).map(|_| {
        let mut c = c.clone();
        tokio::spawn(async move { read_one(&mut c).await })
    });
    let calls: Vec<_> = calls.collect();
    let mut ok = 0;
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), OK);
        ok += 1;
    }
    assert_eq!(ok, 20_000);
}

#[tokio::test]
async fn one_address_over_its_cap_gets_unavailable_too_many_connections() {
    let addr = serving(
        &roomy(),
        Policy {
            max_per_peer: 4,
            ..Policy::default()
        },
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut c = client(addr).await;
    let e = read_one(&mut c).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    assert_eq!(e.message(), "too_many_connections");
    drop(held);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut c = client(addr).await;
    assert_eq!(read_one(&mut c).await.unwrap(), OK);
}

#[tokio::test]
async fn silent_connections_are_closed_at_the_header_deadline() {
    let addr = serving(
        &roomy(),
        Policy {
            header_timeout: Duration::from_millis(500),
            ..Policy::default()
        },
    )
    .await;
    let mut silent = Vec::new();
    for _ in 0..50 {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    for (i, s) in silent.iter_mut().enumerate() {
        // The server's SETTINGS come first, then the end.
        let mut b = [0u8; 256];
        let end = loop {
            match tokio::time::timeout(Duration::from_millis(200), s.read(&mut b)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break true,
                Ok(Ok(_)) => continue,
                Err(_) => break false,
            }
        };
        assert!(end, "connection {i} still open");
    }
    // A caller that sends its preface and calls is served, and stays served past the deadline.
    let mut c = client(addr).await;
    assert_eq!(read_one(&mut c).await.unwrap(), OK);
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(read_one(&mut c).await.unwrap(), OK);
}

/// `tollgate-server` in a process limited to 256 open files.
struct Limited {
    child: Child,
    grpc: SocketAddr,
}

impl Drop for Limited {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// CPU time (user + system) the process has used.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = after
        .split(' ')
        .skip(11)
        .take(2)
        .map(|x| x.parse().unwrap())
        .collect();
    // SAFETY: sysconf only reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis((f[0] + f[1]) * 1000 / ticks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_past_the_file_limit_leave_callers_served_and_the_cpu_idle() {
    let path = profile_file(&roomy());
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 256 && exec {} --profile {} --grpc {grpc} --http off --header-timeout 30s",
            env!("CARGO_BIN_EXE_tollgate-server"),
            path.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Limited { child, grpc };
    let start = Instant::now();
    while TcpStream::connect(server.grpc).await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "server did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut silent = Vec::new();
    for _ in 0..372 {
        silent.push(TcpStream::connect(server.grpc).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut c = tokio::time::timeout(Duration::from_secs(5), client(server.grpc))
        .await
        .expect("a new connection within 5 s");
    let answered = tokio::time::timeout(Duration::from_secs(5), read_one(&mut c)).await;
    assert_eq!(answered.expect("answered within 5 s").unwrap(), OK);
    // Holding the flood costs the server next to no CPU: no accept loop spinning.
    let (pid, before) = (server.child.id(), cpu(server.child.id()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu(pid) - before;
    assert!(
        used < Duration::from_millis(500),
        "{used:?} of CPU in 2 s while the flood was held"
    );
    let _ = std::fs::remove_file(&path);
}
