//! A closed-loop load generator for any Envoy rate limit service (gRPC RLS v3): tollgate-server,
//! limitador-server, envoyproxy/ratelimit. `CONNECTIONS` HTTP/2 connections, `IN_FLIGHT` calls
//! kept in flight on each; every call is one descriptor `tenant=acme, user=u<k>` with `k` drawn
//! from `KEYS` keys. Prints decisions per second, the latency quantiles and the answers' codes,
//! so that two servers are compared with the same client in the same run
//! (`server/benches/rls_servers.sh` does that). Given the server's process id (on the same
//! machine), it also prints the server's CPU time per decision, read from `/proc`: a figure the
//! machine's load moves much less than decisions per second.
//!
//! ```text
//! cargo run --release -p tollgate-server --example rls_load -- \
//!     http://127.0.0.1:8081 [DOMAIN=edge] [SECONDS=10] [CONNECTIONS=2] [IN_FLIGHT=64] [KEYS=1] [SERVER_PID]
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{rngs::SmallRng, Rng, SeedableRng};
use tollgate_server::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    rate_limit_descriptor::Entry, RateLimitDescriptor,
};
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tollgate_server::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

/// What one caller saw: its latencies (µs) and its answers by code.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    ok: u64,
    over_limit: u64,
    errors: u64,
}

fn request(domain: &str, user: u32) -> RateLimitRequest {
    let entry = |k: &str, v: String| Entry {
        key: k.into(),
        value: v,
    };
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![
                entry("tenant", "acme".into()),
                entry("user", format!("u{user}")),
            ],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// CPU time (user + system) the process `pid` has used, in seconds; `None` off Linux or if
/// the process is gone.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // /proc counts in USER_HZ ticks, 100 a second on the Linux targets we run on.
    Some(ticks / 100.0)
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(addr) = args.first().cloned() else {
        eprintln!("usage: rls_load URL [DOMAIN] [SECONDS] [CONNECTIONS] [IN_FLIGHT] [KEYS]");
        std::process::exit(2);
    };
    let domain: String = arg(&args, 1, "edge".to_string());
    let seconds: u64 = arg(&args, 2, 10);
    let connections: usize = arg(&args, 3, 2);
    let in_flight: usize = arg(&args, 4, 64);
    let keys: u32 = arg(&args, 5, 1);
    let server_pid: Option<u32> = args.get(6).and_then(|s| s.parse().ok());

    let mut channels = Vec::new();
    for _ in 0..connections {
        let endpoint = tonic::transport::Endpoint::from_shared(addr.clone())
            .expect("a URL such as http://127.0.0.1:8081")
            .tcp_nodelay(true);
        match endpoint.connect().await {
            Ok(c) => channels.push(c),
            Err(e) => {
                eprintln!("cannot connect to {addr}: {e}");
                std::process::exit(1);
            }
        }
    }

    // A warm-up second, then the measured window: callers count only while `measuring`.
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for (c, channel) in channels.iter().enumerate() {
        for i in 0..in_flight {
            let mut client = RateLimitServiceClient::new(channel.clone());
            let (measuring, stop, domain) = (measuring.clone(), stop.clone(), domain.clone());
            let mut rng = SmallRng::seed_from_u64((c * in_flight + i) as u64);
            callers.push(tokio::spawn(async move {
                let mut t = Tally::default();
                while !stop.load(Ordering::Relaxed) {
                    let r = request(&domain, rng.gen_range(0..keys));
                    let start = Instant::now();
                    let answer = client.should_rate_limit(r).await;
                    if !measuring.load(Ordering::Relaxed) {
                        continue;
                    }
                    t.latencies_us.push(start.elapsed().as_micros() as u32);
                    match answer.map(|a| a.into_inner().overall_code) {
                        Ok(1) => t.ok += 1,
                        Ok(_) => t.over_limit += 1,
                        Err(_) => t.errors += 1,
                    }
                }
                t
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu_before = server_pid.and_then(cpu_seconds);
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let cpu_after = server_pid.and_then(cpu_seconds);
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);

    let mut all = Tally::default();
    for caller in callers {
        let t = caller.await.expect("caller");
        all.latencies_us.extend(t.latencies_us);
        all.ok += t.ok;
        all.over_limit += t.over_limit;
        all.errors += t.errors;
    }
    all.latencies_us.sort_unstable();
    let q = |p: f64| {
        let n = all.latencies_us.len();
        if n == 0 {
            0
        } else {
            all.latencies_us[((n - 1) as f64 * p) as usize]
        }
    };
    let answered = all.ok + all.over_limit;
    let cpu = match (cpu_before, cpu_after) {
        (Some(a), Some(b)) if answered > 0 => {
            format!(
                "  server CPU {:.1} us/decision",
                (b - a) * 1e6 / answered as f64
            )
        }
        _ => String::new(),
    };
    println!(
        "decisions/s {:.0}  p50 {} us  p99 {} us  p99.9 {} us  ok {}  over_limit {}  errors {}  \
         ({connections} connections x {in_flight} in flight, {keys} keys, {elapsed:.1} s){cpu}",
        answered as f64 / elapsed,
        q(0.50),
        q(0.99),
        q(0.999),
        all.ok,
        all.over_limit,
        all.errors,
    );
}
