//! The command-line flags both binaries share, as `clap` argument groups: the same flag means
//! the same thing in the gateway and in `tollgate-server`, and `--help` says so once.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tollgate::http::Cidr;
use tollgate::profile::Period;
use tollgate::snapshot::StateFile;

use crate::listener::Policy;

/// A duration flag: `250ms`, `10s`, `5m`, `1h`, `1d` (as in profiles), or a number of seconds.
pub fn duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>() {
        return if secs.is_finite() && secs > 0.0 && secs <= 366.0 * 86_400.0 {
            Ok(Duration::from_secs_f64(secs))
        } else {
            Err(format!("{s:?}: more than 0 and at most 366 days"))
        };
    }
    Period::parse(s).map(Period::get).map_err(|e| e.to_string())
}

/// An address flag that may be `off` (no such listener).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listen(pub Option<std::net::SocketAddr>);

/// Parses a [`Listen`]: an address, or `off`.
pub fn listen(s: &str) -> Result<Listen, String> {
    match s {
        "off" => Ok(Listen(None)),
        a => a
            .parse()
            .map(|a| Listen(Some(a)))
            .map_err(|e| format!("{a}: {e}")),
    }
}

/// A count flag: a whole number of at least 1.
fn count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?}: a whole number is needed")),
    }
}

/// How much of each listener clients may hold ([`Policy`]); the operators' listener (metrics,
/// admin) keeps its own tighter caps ([`Policy::operator`]) with the same deadlines.
#[derive(Args, Clone, Debug)]
pub struct ListenerFlags {
    /// Open connections per listener, all peers together (lowered to the open-file limit). At
    /// the cap the connection idle the longest is closed for a new one.
    #[arg(long, value_name = "N", default_value = "4096", value_parser = count)]
    pub max_connections: usize,
    /// Open connections per listener from one peer address (trusted proxies are not counted).
    #[arg(long, value_name = "N", default_value = "256", value_parser = count)]
    pub max_per_peer: usize,
    /// Time to send a complete request head (HTTP/2: the first request), from the accept or
    /// from the previous response.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration)]
    pub header_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration)]
    pub idle_timeout: Duration,
    /// The largest request body, in bytes.
    #[arg(long, value_name = "BYTES", default_value = "65536", value_parser = count)]
    pub max_body: usize,
    /// HTTP/2 streams one connection may have open at once (gRPC).
    #[arg(long, value_name = "N", default_value = "256", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_streams: u32,
    /// HTTP/2 keep-alive: a PING to an idle peer this often (closed if unanswered in 10 s).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub keepalive_interval: Duration,
    /// A proxy network whose connections are exempt from the per-peer cap (and, in the
    /// gateway, whose X-Forwarded-For is believed); repeatable.
    #[arg(long = "trust-proxy", value_name = "CIDR")]
    pub trusted: Vec<Cidr>,
}

impl ListenerFlags {
    /// The policy of a public listener (the gateway's API, the server's gRPC and HTTP sides),
    /// its connection cap within the open-file limit.
    pub fn policy(&self) -> Policy {
        Policy {
            max_connections: self.max_connections,
            max_per_peer: self.max_per_peer,
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
            max_body: self.max_body,
            max_concurrent_streams: self.max_concurrent_streams,
            keepalive_interval: Some(self.keepalive_interval),
            trusted: self.trusted.clone(),
            ..Policy::default()
        }
        .within_file_limit()
    }

    /// The policy of an operators' listener: [`Policy::operator`]'s caps and body limit, these
    /// deadlines.
    pub fn operator_policy(&self) -> Policy {
        Policy {
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
            ..Policy::operator()
        }
    }
}

/// `--state PATH`: quotas that survive a restart (the embedded limiter's snapshot file).
#[derive(Args, Clone, Debug)]
pub struct StateFlags {
    /// Restore the quotas from this snapshot at start, checkpoint them to it, and save them on
    /// shutdown (needs TOLLGATE_KEY_SECRET).
    #[arg(long = "state", value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// How often the checkpoint rewrites the snapshot.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration, requires = "path")]
    pub state_every: Duration,
    /// Start with full buckets when the snapshot is refused (another secret or capacity, a
    /// corrupt file) instead of stopping.
    #[arg(long, requires = "path")]
    pub state_start_empty_on_refusal: bool,
}

impl StateFlags {
    /// The state file asked for, if any.
    pub fn state_file(&self) -> Option<StateFile> {
        self.path.as_ref().map(|p| {
            let mut s = StateFile::new(p);
            s.every = self.state_every;
            s.start_empty_on_refusal = self.state_start_empty_on_refusal;
            s
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units_or_seconds() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(duration("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["0", "-1", "nan", "1x", "", "1 s", "367d"] {
            assert!(duration(bad).is_err(), "{bad:?}");
        }
    }
}
