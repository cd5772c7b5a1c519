//! How much of a listener one client, or all of them, may hold, and for how long.

use std::time::Duration;

use tollgate::http::Cidr;

/// One listener's limits. [`Policy::default`] is for a public listener; [`Policy::operator`]
/// for one that operators and scrapers use.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Open connections at once, all peers together. When it is reached, the connection idle
    /// the longest is closed for the new one; with none idle, the new one is refused.
    pub max_connections: usize,
    /// Open connections at once from one peer address (`trusted` networks are not counted):
    /// one address can never take the whole listener. Over it: refused.
    pub max_per_peer: usize,
    /// From the accept (or, HTTP/1, the previous response) to a complete request head; for
    /// HTTP/2, to the first request. A connection that sends nothing, or trickles its head, is
    /// closed after it.
    pub header_timeout: Duration,
    /// A connection with no request in flight for this long is closed (HTTP/2: `GOAWAY`).
    pub idle_timeout: Duration,
    /// The largest request body, in bytes (HTTP/1 routers; `413` before it is read).
    pub max_body: usize,
    /// HTTP/2: streams a connection may have open at once (advertised in `SETTINGS`; a client
    /// that opens more gets `REFUSED_STREAM` for those, the connection stays).
    pub max_concurrent_streams: u32,
    /// HTTP/2: a `PING` to an idle peer this often, closed if unanswered within
    /// [`Policy::keepalive_timeout`]; `None` for none.
    pub keepalive_interval: Option<Duration>,
    /// HTTP/2: how long a keep-alive `PING` may go unanswered.
    pub keepalive_timeout: Duration,
    /// Networks exempt from the per-peer cap (proxies many callers share an address through).
    pub trusted: Vec<Cidr>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_connections: 4096,
            max_per_peer: 256,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_body: 64 * 1024,
            max_concurrent_streams: 256,
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(10),
            trusted: Vec::new(),
        }
    }
}

impl Policy {
    /// For an operators' listener (metrics, admin): few connections, a few per peer, so that a
    /// flood from one address leaves room for the scraper; bodies up to a profile's size.
    pub fn operator() -> Policy {
        Policy {
            max_connections: 64,
            max_per_peer: 8,
            max_body: tollgate::profile::MAX_PROFILE_BYTES,
            ..Policy::default()
        }
    }

    /// This policy with `max_connections` lowered to what the process's open-file limit
    /// allows (less a reserve for files, logs and the listeners), so that the cap, not
    /// `EMFILE`, is what meets the next connection.
    pub fn within_file_limit(mut self) -> Self {
        if let Some(files) = open_file_limit() {
            let usable = files.saturating_sub(64).max(1) as usize;
            self.max_connections = self.max_connections.min(usable);
        }
        self
    }

    /// Why this policy cannot be used, if it cannot (a zero cap or timeout).
    pub fn check(&self) -> Result<(), String> {
        let zero = [
            ("max_connections", self.max_connections == 0),
            ("max_per_peer", self.max_per_peer == 0),
            ("header_timeout", self.header_timeout.is_zero()),
            ("idle_timeout", self.idle_timeout.is_zero()),
            ("max_concurrent_streams", self.max_concurrent_streams == 0),
            ("keepalive_timeout", self.keepalive_timeout.is_zero()),
        ];
        match zero.iter().find(|(_, z)| *z) {
            Some((name, _)) => Err(format!("listener {name}: must be more than 0")),
            None => Ok(()),
        }
    }
}

#[cfg(unix)]
fn open_file_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` only writes the struct we pass, which is valid and exclusively ours.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    (r == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

#[cfg(not(unix))]
fn open_file_limit() -> Option<u64> {
    None
}
