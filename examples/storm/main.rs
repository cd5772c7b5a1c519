//! Retry storms on loopback, with and without the client SDK, under faults:
//! invalid Retry-After, clock skew, lost connections, a capacity outage, and three servers on
//! one Redis. Prints a table per scenario and writes its arrival curves as SVG.
//!
//! `cargo run --release --example storm -- --help`

mod curve;
mod faults;
#[cfg(feature = "redis")]
mod multi;
mod proxy;
mod scenario;
mod storm;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use scenario::{run_scenario, Scenario, Size};

const HELP: &str = "\
Retry storms on loopback: the naive client (retries at once) and the tollgate SDK client, each
from one synchronised start against fresh servers; a table per scenario, and its arrival curves
(attempts per 50 ms, admitted and refused) as an SVG.

USAGE:
    cargo run --release --example storm -- [OPTIONS]
    cargo run --release --example storm --features redis -- --scenario multi-server

OPTIONS:
    --scenario NAME   one of: baseline, invalid-retry-after, clock-skew, connection-faults,
                      recovery, multi-server, all (default: all; multi-server only with the
                      `redis` feature). May be given more than once.
    --out DIR         write DIR/NAME.svg for each scenario (created if missing)
    --quick           the tests' sizes (100 clients, a 2 s outage) instead of the full ones
                      (200 clients, a 5 s outage)
    --redis URL       the Redis of multi-server (default: start a redis-server of its own on a
                      free loopback port)
    -h, --help        this text
";

struct Args {
    scenarios: Vec<Scenario>,
    out: Option<PathBuf>,
    quick: bool,
    redis: Option<String>,
}

fn parse_args() -> Result<Option<Args>, String> {
    let mut args = Args {
        scenarios: Vec::new(),
        out: None,
        quick: false,
        redis: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().ok_or(format!("{flag} needs a value"));
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--quick" => args.quick = true,
            "--out" => args.out = Some(PathBuf::from(value("--out")?)),
            "--redis" => args.redis = Some(value("--redis")?),
            "--scenario" => {
                let name = value("--scenario")?;
                if name == "all" {
                    args.scenarios.extend(
                        Scenario::ALL
                            .into_iter()
                            .filter(|s| cfg!(feature = "redis") || !s.needs_redis()),
                    );
                } else {
                    let s = Scenario::from_name(&name).ok_or(format!(
                        "unknown scenario {name:?}; one of: {}, all",
                        Scenario::ALL.map(Scenario::name).join(", ")
                    ))?;
                    if s.needs_redis() && !cfg!(feature = "redis") {
                        return Err(format!(
                            "{name} needs the redis feature: cargo run --release --example storm \
                             --features redis -- --scenario {name}"
                        ));
                    }
                    args.scenarios.push(s);
                }
            }
            other => return Err(format!("unknown argument {other:?} (see --help)")),
        }
    }
    if args.scenarios.is_empty() {
        args.scenarios.extend(
            Scenario::ALL
                .into_iter()
                .filter(|s| cfg!(feature = "redis") || !s.needs_redis()),
        );
    }
    Ok(Some(args))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("storm: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(dir) = &args.out {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("storm: cannot create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    }
    let size = if args.quick {
        Size::quick()
    } else {
        Size::full()
    };
    let redis = redis_url(&args);
    for s in &args.scenarios {
        let run = run_scenario(*s, size, redis.as_ref().map(|r| r.url.as_str())).await;
        let name = run.scenario.name();
        println!("## {name}\n\n{}", table::table(&run));
        if let Some(dir) = &args.out {
            let path = dir.join(format!("{name}.svg"));
            let title = format!("{name}: attempts per 50 ms by the time they were sent");
            let mut runs = vec![
                (scenario::Client::Naive.name(), &run.naive),
                (scenario::Client::Sdk.name(), &run.sdk),
            ];
            if let Some(c) = &run.control {
                runs.push((scenario::Client::SdkNoJitter.name(), c));
            }
            if let Err(e) = curve::write_svg(&path, &title, &runs, &run.marks) {
                eprintln!("storm: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
            println!("(curves: {})\n", path.display());
        }
    }
    ExitCode::SUCCESS
}

/// The Redis of the multi-server scenario: `--redis URL`, or one started here (killed on drop).
struct Redis {
    url: String,
    #[cfg(feature = "redis")]
    _server: Option<tollgate_testkit::redis_server::RedisServer>,
}

fn redis_url(args: &Args) -> Option<Redis> {
    if !args.scenarios.iter().any(|s| s.needs_redis()) {
        return None;
    }
    #[cfg(feature = "redis")]
    {
        if let Some(url) = &args.redis {
            return Some(Redis {
                url: url.clone(),
                _server: None,
            });
        }
        let server = tollgate_testkit::redis_server::RedisServer::start();
        Some(Redis {
            url: server.url(),
            _server: Some(server),
        })
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = &args.redis;
        None
    }
}
