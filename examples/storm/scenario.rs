//! Six retry storms, each run once with the naive
//! client and once with the SDK client, each run against fresh servers from one synchronised
//! start.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::middleware;
use tokio::time::Instant;
use tollgate::{Limiter, Profile};

use crate::curve::{spike_ratio, Curve};
use crate::faults::{fault_layer, Faults};
use crate::proxy::{start_proxy, ConnectionFaults, ProxyStats};
use crate::storm::{run, sdk_amplification_bound, Mix, Report, Storm};

/// One storm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Many clients at once on one identity, no faults.
    Baseline,
    /// Half the refusals' `Retry-After` garbled: garbage, negative, huge, a past and a
    /// far-future HTTP-date, in turn.
    InvalidRetryAfter,
    /// `Retry-After` as an HTTP-date, to clients whose wall clocks are 30 s fast or slow.
    ClockSkew,
    /// Reads and writes through a TCP proxy that resets 10 % of the connections and leaves 10 %
    /// silent, both after the request was executed.
    ConnectionFaults,
    /// Steady traffic; shared capacity at zero for a while (the fault layer's outage mode),
    /// then back.
    Recovery,
    /// The recovery storm over three servers, each with its own `RedisLimiter` on one Redis,
    /// with one global limit below the offered load.
    MultiServer,
    /// [`Scenario::MultiServer`] with leased tokens: each server spends leases of its
    /// `RedisLimiter` locally, with the same global limit.
    MultiServerLeased,
}

impl Scenario {
    /// Every scenario, in the seed's order.
    pub const ALL: [Scenario; 7] = [
        Scenario::Baseline,
        Scenario::InvalidRetryAfter,
        Scenario::ClockSkew,
        Scenario::ConnectionFaults,
        Scenario::Recovery,
        Scenario::MultiServer,
        Scenario::MultiServerLeased,
    ];

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Baseline => "baseline",
            Scenario::InvalidRetryAfter => "invalid-retry-after",
            Scenario::ClockSkew => "clock-skew",
            Scenario::ConnectionFaults => "connection-faults",
            Scenario::Recovery => "recovery",
            Scenario::MultiServer => "multi-server",
            Scenario::MultiServerLeased => "multi-server-leased",
        }
    }

    /// The scenario called `name`.
    pub fn from_name(name: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether it needs a Redis (the `redis` feature and a `redis-server`).
    pub fn needs_redis(self) -> bool {
        matches!(self, Scenario::MultiServer | Scenario::MultiServerLeased)
    }
}

/// How big the storms are: `full` for the example, `quick` for the tests.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// Clients of the storms at the start (scenarios 1 to 4), one logical request each.
    pub burst_clients: usize,
    /// Clients of the steady storms (5 and 6), one logical request every 250 ms each.
    pub steady_clients: usize,
    /// Steady traffic before the outage.
    pub before: Duration,
    /// How long capacity is at zero.
    pub outage: Duration,
    /// Steady traffic after the outage.
    pub after: Duration,
}

impl Size {
    /// The example's: 200 clients at once; 40 steady clients, 1.5 s, a 5 s outage, 2.5 s.
    pub fn full() -> Size {
        Size {
            burst_clients: 200,
            steady_clients: 40,
            before: Duration::from_millis(1500),
            outage: Duration::from_secs(5),
            after: Duration::from_millis(2500),
        }
    }

    /// The tests': 100 clients at once; 24 steady clients, 1 s, a 2 s outage, 1.5 s.
    pub fn quick() -> Size {
        Size {
            burst_clients: 100,
            steady_clients: 24,
            before: Duration::from_secs(1),
            outage: Duration::from_secs(2),
            after: Duration::from_millis(1500),
        }
    }
}

/// Each steady client starts a logical request this often.
pub const PERIOD: Duration = Duration::from_millis(250);

/// The token of acme / alice in `examples/tokens.yaml`.
const TOKEN: &str = "acme-alice-token";

/// One scenario's two runs and what they are measured against.
#[derive(Debug)]
pub struct Run {
    /// Which.
    pub scenario: Scenario,
    /// The naive client's run.
    pub naive: Report,
    /// The SDK client's run.
    pub sdk: Report,
    /// The no-jitter control's run (steady scenarios).
    pub control: Option<Report>,
    /// Normal operation before the fault (steady scenarios).
    pub steady: Option<Range<Duration>>,
    /// Vertical marks for the curves.
    pub marks: Vec<(Duration, &'static str)>,
    /// The most admissions the one global limit allows over each run (multi-server), naive
    /// then SDK.
    pub global_bound: Option<(u64, u64)>,
    /// What the connection-fault proxy did (connections passed, reset, silent), naive then SDK.
    pub proxy: Option<([u64; 3], [u64; 3])>,
    /// What the fault layer garbled, naive then SDK.
    pub garbled: (u64, u64),
}

impl Run {
    /// The recovery spike (see [`spike_ratio`]) of `report`, for the steady scenarios.
    pub fn spike(&self, report: &Report) -> Option<f64> {
        let steady = self.steady.clone()?;
        let curve = Curve::of(report, Curve::bins_for(report));
        Some(spike_ratio(&curve, steady, report.recovery_at))
    }

    /// [`sdk_amplification_bound`] for the SDK's run.
    pub fn sdk_bound(&self) -> f64 {
        sdk_amplification_bound(self.sdk.logical.len() as u64, self.sdk.elapsed)
    }

    /// Notes printed under the table.
    pub fn notes(&self) -> Vec<String> {
        let mut out = vec![format!(
            "SDK amplification {:.2}, budget bound {:.2} (1 + ratio 0.2 + floor 10/s x 10 s over the logical requests)",
            self.sdk.amplification(),
            self.sdk_bound()
        )];
        if self.garbled != (0, 0) {
            out.push(format!(
                "Retry-After garbled: naive {}, SDK {} (SDK could not parse {}; it used its backoff)",
                self.garbled.0, self.garbled.1, self.sdk.retry_after_invalid
            ));
        }
        if let Some((n, s)) = self.proxy {
            out.push(format!(
                "connections passed / reset / silent: naive {} / {} / {}, SDK {} / {} / {}",
                n[0], n[1], n[2], s[0], s[1], s[2]
            ));
            out.push(format!(
                "POSTs repeated after a lost response: without a key naive {}, SDK {}; with a key naive {}, SDK {}",
                self.naive.unkeyed_replays,
                self.sdk.unkeyed_replays,
                self.naive.keyed_replays,
                self.sdk.keyed_replays
            ));
        }
        if let (Some(n), Some(s)) = (self.spike(&self.naive), self.spike(&self.sdk)) {
            let c = self
                .control
                .as_ref()
                .and_then(|c| self.spike(c))
                .unwrap_or(f64::NAN);
            out.push(format!(
                "recovery spike (attempts in the busiest 50 ms of the second after capacity returns / in the busiest 50 ms before the outage): naive {n:.2}, SDK {s:.2}, SDK without jitter {c:.2}"
            ));
        }
        if let Some((bn, bs)) = self.global_bound {
            out.push(format!(
                "admitted across the three servers / global bound (burst + rate x run time): naive {} / {bn}, SDK {} / {bs}",
                self.naive.count(crate::storm::Outcome::Admitted),
                self.sdk.count(crate::storm::Outcome::Admitted)
            ));
        }
        out
    }
}

/// A profile with one class, `read` (every `/v1` route), of `per_second` tokens per second.
pub fn storm_profile(per_second: u32) -> Profile {
    Profile::from_yaml(&format!(
        "name: storm\n\
         identities: {{ capacity: 1024 }}\n\
         route_classes:\n  \
           read:\n    \
             burst: {{ tokens: {per_second}, per: 1s }}\n    \
             sustained: {{ tokens: {}, per: 1h }}\n\
         routes:\n  \
           - {{ method: \"*\", path: \"/v1/**\", class: read }}\n",
        u64::from(per_second) * 3600
    ))
    .expect("the storm profile")
}

/// [`storm_profile`] with leases of up to an eighth of a second's tokens, spent for at most
/// 250 ms.
pub fn storm_profile_leased(per_second: u32) -> Profile {
    let mut p = storm_profile(per_second);
    let mut read = *p.route_class("read").expect("read");
    read.lease = Some(tollgate::profile::LeasePolicy {
        max_tokens: tollgate::profile::Tokens::new(u64::from(per_second / 8).max(1))
            .expect("tokens"),
        ttl: tollgate::profile::Period::from_millis(250).expect("250ms"),
    });
    p.route_classes.remove("read");
    p.route_classes.insert("read", read).expect("read");
    p.name = "storm-leased".into();
    p.validate().expect("the leased storm profile");
    p
}

/// Serves the gateway's router on `127.0.0.1:0`, behind `faults`; returns its address.
pub async fn start_gateway(profile: Profile, faults: Arc<Faults>) -> SocketAddr {
    let limiter = Arc::new(Limiter::builder(profile).build().expect("limiter"));
    let tokens =
        tollgate_gateway::app::Tokens::from_yaml(include_str!("../tokens.yaml")).expect("tokens");
    let router = tollgate_gateway::app::router(limiter, tokens, Vec::new())
        .layer(middleware::from_fn_with_state(faults, fault_layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve")
    });
    addr
}

fn burst_storm(clients: usize, sdk: bool, target: SocketAddr) -> Storm {
    Storm {
        clients,
        sdk,
        targets: vec![target],
        token: TOKEN,
        mix: Mix::Reads,
        max_attempts: 10,
        deadline: Duration::from_secs(5),
        attempt_timeout: Duration::from_secs(2),
        run_for: None,
        period: PERIOD,
        wall_skews: Vec::new(),
        retry_after_jitter: true,
        fresh_connections: false,
        recovery_at: Duration::ZERO,
    }
}

/// What one run needs besides the storm.
struct Setup {
    storm: Storm,
    faults: Arc<Faults>,
    proxy: Option<Arc<ProxyStats>>,
}

/// Which client a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// Retries at once.
    Naive,
    /// The SDK as shipped.
    Sdk,
    /// The SDK honouring Retry-After exactly, without its jitter: the control that shows what
    /// the jitter prevents (steady scenarios only).
    SdkNoJitter,
}

impl Client {
    /// The table's name.
    pub fn name(self) -> &'static str {
        match self {
            Client::Naive => "naive",
            Client::Sdk => "SDK",
            Client::SdkNoJitter => "SDK, no jitter (control)",
        }
    }
}

/// Runs `scenario` at `size`: the naive client, the SDK client and, for the steady scenarios,
/// the no-jitter control, one after the other, each against fresh servers. `redis` is the Redis
/// of the multi-server scenario (`redis://127.0.0.1:PORT/`).
pub async fn run_scenario(scenario: Scenario, size: Size, redis: Option<&str>) -> Run {
    let steady = matches!(
        scenario,
        Scenario::Recovery | Scenario::MultiServer | Scenario::MultiServerLeased
    );
    let clients: &[Client] = if steady {
        &[Client::Naive, Client::Sdk, Client::SdkNoJitter]
    } else {
        &[Client::Naive, Client::Sdk]
    };
    let mut reports = Vec::new();
    let mut proxies = Vec::new();
    let mut garbled = Vec::new();
    let mut bounds = Vec::new();
    for &client in clients {
        let setup = setup(scenario, size, client, redis).await;
        // Everyone starts at once, a moment after the servers are up. With an outage, its end
        // falls just before a whole second of the wall clock, so that the HTTP-date the servers
        // announce it with (rounded up to the second) is a few ms after it.
        let mut start = Instant::now() + Duration::from_millis(100);
        if steady {
            let wall_end =
                SystemTime::now() + Duration::from_millis(100) + size.before + size.outage;
            let frac = wall_end
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos();
            // 5 ms before the whole second, so that the two clocks' sampling moments cannot
            // push the rounded-up date one second late.
            let to_second = Duration::from_secs(1) - Duration::from_nanos(u64::from(frac));
            start += to_second.saturating_sub(Duration::from_millis(5));
            let from = start + size.before;
            setup.faults.set_outage(from, from + size.outage);
        }
        let report = run(&setup.storm, start).await;
        if let Some(p) = &setup.proxy {
            use std::sync::atomic::Ordering::Relaxed;
            proxies.push([
                p.passed.load(Relaxed),
                p.reset.load(Relaxed),
                p.silent.load(Relaxed),
            ]);
        }
        garbled.push(setup.faults.garbled());
        if scenario.needs_redis() {
            // GCRA: at most the burst at once, then the rate, over the whole run.
            let rate = global_limit(size);
            bounds.push(
                u64::from(rate) + (report.elapsed.as_secs_f64() * f64::from(rate)).ceil() as u64,
            );
        }
        reports.push(report);
    }
    let mut reports = reports.into_iter();
    let naive = reports.next().expect("naive run");
    let sdk = reports.next().expect("SDK run");
    let control = reports.next();
    let marks = if steady {
        vec![
            (size.before, "capacity to zero"),
            (size.before + size.outage, "capacity back"),
        ]
    } else {
        Vec::new()
    };
    Run {
        scenario,
        naive,
        sdk,
        control,
        // The first 250 ms are the synchronised start, not normal operation.
        steady: steady.then_some(PERIOD..size.before),
        marks,
        global_bound: (bounds.len() >= 2).then(|| (bounds[0], bounds[1])),
        proxy: (proxies.len() == 2).then(|| (proxies[0], proxies[1])),
        garbled: (garbled[0], garbled[1]),
    }
}

/// The multi-server scenario's one limit, tokens per second (and its burst): 3/8 of the
/// offered load, so that it is reached, and three limiters that did not share it would admit
/// more than its bound.
pub fn global_limit(size: Size) -> u32 {
    let offered = size.steady_clients as f64 / PERIOD.as_secs_f64();
    (offered * 3.0 / 8.0) as u32
}

async fn setup(scenario: Scenario, size: Size, client: Client, redis: Option<&str>) -> Setup {
    let sdk = client != Client::Naive;
    let example = || Profile::from_path("examples/profiles/example.yaml").expect("example profile");
    let clients = size.burst_clients;
    let steady = |targets: Vec<SocketAddr>| Storm {
        clients: size.steady_clients,
        sdk,
        targets,
        token: TOKEN,
        mix: Mix::Reads,
        max_attempts: 10,
        // Long enough to wait out the outage.
        deadline: size.outage + Duration::from_secs(3),
        attempt_timeout: Duration::from_secs(2),
        run_for: Some(size.before + size.outage + size.after),
        period: PERIOD,
        wall_skews: Vec::new(),
        retry_after_jitter: client != Client::SdkNoJitter,
        fresh_connections: false,
        recovery_at: size.before + size.outage,
    };
    match scenario {
        Scenario::Baseline => {
            let faults = Arc::new(Faults::new());
            let addr = start_gateway(example(), faults.clone()).await;
            Setup {
                storm: burst_storm(clients, sdk, addr),
                faults,
                proxy: None,
            }
        }
        Scenario::InvalidRetryAfter => {
            let faults = Arc::new(Faults::new().garble(0.5));
            let addr = start_gateway(example(), faults.clone()).await;
            Setup {
                storm: burst_storm(clients, sdk, addr),
                faults,
                proxy: None,
            }
        }
        Scenario::ClockSkew => {
            let faults = Arc::new(Faults::new().http_date());
            let addr = start_gateway(example(), faults.clone()).await;
            let mut storm = burst_storm(clients, sdk, addr);
            storm.wall_skews = vec![30, -30];
            Setup {
                storm,
                faults,
                proxy: None,
            }
        }
        Scenario::ConnectionFaults => {
            let faults = Arc::new(Faults::new());
            let addr = start_gateway(example(), faults.clone()).await;
            let conn = ConnectionFaults {
                reset: 0.1,
                silent: 0.1,
                hold: Duration::from_secs(4),
            };
            let (proxy, stats) = start_proxy(addr, conn, 16).await;
            let mut storm = burst_storm(clients, sdk, proxy);
            storm.mix = Mix::ReadsAndWrites;
            storm.fresh_connections = true;
            // Above what a loaded machine takes to open 200 connections at once.
            storm.attempt_timeout = Duration::from_secs(1);
            Setup {
                storm,
                faults,
                proxy: Some(stats),
            }
        }
        Scenario::Recovery => {
            // The outage's Retry-After is the known recovery point, as an HTTP-date.
            let faults = Arc::new(Faults::new().http_date());
            // Capacity well above the offered load: only the outage refuses.
            let per_second = (size.steady_clients as f64 / PERIOD.as_secs_f64() * 2.5) as u32;
            let addr = start_gateway(storm_profile(per_second), faults.clone()).await;
            Setup {
                storm: steady(vec![addr]),
                faults,
                proxy: None,
            }
        }
        Scenario::MultiServer | Scenario::MultiServerLeased => {
            let faults = Arc::new(Faults::new().http_date());
            let mut profile = storm_profile(global_limit(size));
            if scenario == Scenario::MultiServerLeased {
                profile = storm_profile_leased(global_limit(size));
            }
            let targets = multi_servers(redis, &profile, client, faults.clone()).await;
            Setup {
                storm: steady(targets),
                faults,
                proxy: None,
            }
        }
    }
}

#[cfg(feature = "redis")]
async fn multi_servers(
    redis: Option<&str>,
    profile: &Profile,
    client: Client,
    faults: Arc<Faults>,
) -> Vec<SocketAddr> {
    let url = redis.expect("the multi-server scenario needs a Redis URL");
    // Fresh buckets for every run.
    let prefix = format!("storm-{}-{:?}-{}", std::process::id(), client, profile.name);
    crate::multi::start_servers(url, &prefix, profile, 3, faults).await
}

#[cfg(not(feature = "redis"))]
async fn multi_servers(
    _redis: Option<&str>,
    _profile: &Profile,
    _client: Client,
    _faults: Arc<Faults>,
) -> Vec<SocketAddr> {
    panic!("the multi-server scenario needs the `redis` feature: --features redis")
}
