//! Counting connections in and out under a [`Policy`]'s caps, and choosing the one to close
//! when a cap (or the file-descriptor limit) is met: the connection idle the longest.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::Policy;

/// One open connection, as its requests and the gate see it.
pub(super) struct Conn {
    /// Requests whose response (body included) is not done.
    in_flight: AtomicUsize,
    /// Nanoseconds from the gate's start to the end of the last request (or the accept).
    last_active: AtomicU64,
    /// Whether any request came: before the first, the header deadline applies.
    served: AtomicBool,
    /// Chosen to be closed for another connection.
    evicted: AtomicBool,
    /// Woken when it is evicted.
    pub(super) evict: Notify,
    base: Instant,
}

// The atomics here are statistics of one connection read by its own task and the gate's
// choice of whom to close: no decision of the rate limiter depends on them, so Relaxed does
// (a stale read closes a connection a moment early or late, never a request in flight's
// connection without the request seeing an error it could retry).
impl Conn {
    fn new(base: Instant) -> Conn {
        Conn {
            in_flight: AtomicUsize::new(0),
            last_active: AtomicU64::new(base.elapsed().as_nanos() as u64),
            served: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            evict: Notify::new(),
            base,
        }
    }

    /// A request began.
    pub(super) fn start(&self) {
        self.served.store(true, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    /// A request's response is done (or dropped).
    pub(super) fn finish(&self) {
        self.last_active
            .store(self.base.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    pub(super) fn served(&self) -> bool {
        self.served.load(Ordering::Relaxed)
    }

    /// How long it has had no request in flight; `None` while one is.
    pub(super) fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let since = Duration::from_nanos(self.last_active.load(Ordering::Relaxed));
        Some(self.base.elapsed().saturating_sub(since))
    }
}

/// Open connections, in all and per peer, by accept order.
struct Open {
    total: usize,
    /// Evicted connections still open (they go within a second).
    evicting: usize,
    per_peer: HashMap<IpAddr, usize>,
    conns: BTreeMap<u64, Arc<Conn>>,
    next: u64,
}

/// The caps of one listener.
pub(super) struct Gate {
    pub(super) policy: Policy,
    open: Mutex<Open>,
    /// Woken whenever a connection closes (the shutdown waits for the last).
    pub(super) closed: Notify,
    base: Instant,
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Full {
    /// All `max_connections` are busy with requests.
    Listener,
    /// The peer already holds `max_per_peer`.
    Peer,
}

/// One admitted connection's place; given back when dropped.
pub(super) struct Slot {
    gate: Arc<Gate>,
    id: u64,
    peer: Option<IpAddr>,
    pub(super) conn: Arc<Conn>,
}

impl Slot {
    /// The listener's policy.
    pub(super) fn policy(&self) -> &Policy {
        &self.gate.policy
    }
}

impl Gate {
    pub(super) fn new(policy: Policy) -> Arc<Gate> {
        Arc::new(Gate {
            policy,
            open: Mutex::new(Open {
                total: 0,
                evicting: 0,
                per_peer: HashMap::new(),
                conns: BTreeMap::new(),
                next: 0,
            }),
            closed: Notify::new(),
            base: Instant::now(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a connection from `peer`. At the listener's cap the connection idle the
    /// longest is evicted for it; with none idle, and over the peer's cap, it is refused.
    pub(super) fn enter(self: &Arc<Gate>, peer: IpAddr) -> Result<Slot, Full> {
        let counted = !self.policy.trusted.iter().any(|c| c.contains(peer));
        let mut open = self.lock();
        if counted && open.per_peer.get(&peer).copied().unwrap_or(0) >= self.policy.max_per_peer {
            return Err(Full::Peer);
        }
        if open.total - open.evicting >= self.policy.max_connections && !evict_idlest(&mut open) {
            return Err(Full::Listener);
        }
        if counted {
            *open.per_peer.entry(peer).or_insert(0) += 1;
        }
        open.total += 1;
        let id = open.next;
        open.next += 1;
        let conn = Arc::new(Conn::new(self.base));
        open.conns.insert(id, Arc::clone(&conn));
        Ok(Slot {
            gate: Arc::clone(self),
            id,
            peer: counted.then_some(peer),
            conn,
        })
    }

    /// Closes the connection idle the longest, if one is (the descriptors ran out).
    pub(super) fn evict_one(&self) -> bool {
        evict_idlest(&mut self.lock())
    }

    /// Open connections.
    pub(super) fn open(&self) -> usize {
        self.lock().total
    }
}

/// Marks the connection idle the longest as evicted and wakes it; `false` if none is idle.
fn evict_idlest(open: &mut Open) -> bool {
    let idlest = open
        .conns
        .values()
        .filter(|c| !c.evicted.load(Ordering::Relaxed))
        .filter_map(|c| c.idle_for().map(|d| (d, c)))
        .max_by_key(|(d, _)| *d)
        .map(|(_, c)| Arc::clone(c));
    match idlest {
        Some(c) => {
            c.evicted.store(true, Ordering::Relaxed);
            c.evict.notify_one();
            open.evicting += 1;
            true
        }
        None => false,
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.gate.lock();
        open.total -= 1;
        if self.conn.evicted.load(Ordering::Relaxed) {
            open.evicting -= 1;
        }
        open.conns.remove(&self.id);
        if let Some(peer) = self.peer {
            if let Some(n) = open.per_peer.get_mut(&peer) {
                *n -= 1;
                if *n == 0 {
                    open.per_peer.remove(&peer);
                }
            }
        }
        drop(open);
        self.gate.closed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(max: usize, per_peer: usize) -> Arc<Gate> {
        Gate::new(Policy {
            max_connections: max,
            max_per_peer: per_peer,
            ..Policy::default()
        })
    }

    #[test]
    fn a_peer_is_held_to_its_cap_and_others_are_not() {
        let g = gate(10, 2);
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let held = [g.enter(a).unwrap(), g.enter(a).unwrap()];
        assert_eq!(g.enter(a).err(), Some(Full::Peer));
        let _b = g.enter(b).unwrap();
        drop(held);
        assert!(g.enter(a).is_ok(), "places given back");
    }

    #[test]
    fn at_the_cap_the_idlest_connection_makes_room_and_busy_ones_do_not() {
        let g = gate(2, 10);
        let p = |i: u8| IpAddr::from([192, 0, 2, i]);
        let first = g.enter(p(1)).unwrap();
        let second = g.enter(p(2)).unwrap();
        first.conn.start();
        // `second` is idle: it is evicted for the third.
        let _third = g.enter(p(3)).unwrap();
        assert!(second.conn.evicted.load(Ordering::Relaxed));
        assert_eq!(g.open(), 3, "until it closes");
        // Now the others are busy or already going: refused.
        _third.conn.start();
        assert_eq!(g.enter(p(4)).err(), Some(Full::Listener));
        drop(second);
        assert_eq!(
            g.enter(p(4)).err(),
            Some(Full::Listener),
            "both left are busy"
        );
        first.conn.finish();
        assert!(g.enter(p(4)).is_ok(), "idle again, so evictable");
    }
}
