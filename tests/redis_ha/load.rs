//! Load across a failover, and the audit of what it saw: every answer an admission, a
//! throttle or a fail-closed 503, and no identity admitted more than its buckets allow.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::redis::RedisLimiter;
use tollgate::{Cause, Decision, Key, Profile};

/// Sustained tokens per identity over the whole test (1h period: no refill within a test, so
/// the bound on admissions is exactly this). The burst (10 per second) keeps identities being
/// admitted, and writing, through the failover.
pub const SUSTAINED: u64 = 60;

pub fn profile() -> Profile {
    Profile::from_yaml(&format!(
        "name: ha\nidentities: {{ capacity: 4096 }}\nstore: {{ timeout: 100ms }}\n\
         route_classes:\n  w:\n    burst: {{ tokens: 10, per: 1s }}\n    sustained: {{ tokens: {SUSTAINED}, per: 1h }}\n"
    ))
    .unwrap()
}

/// One answer: when it was asked, for which identity, what came back.
pub struct Record {
    pub at: Instant,
    pub who: usize,
    pub decision: Decision,
}

/// `tasks` callers deciding for `identities` identities (one tenant each, so they spread over
/// hash tags and cluster slots) until `stop`.
pub async fn run(
    limiter: Arc<RedisLimiter>,
    identities: usize,
    tasks: usize,
    stop: Instant,
) -> Vec<Record> {
    let w = limiter.route_class("w").unwrap();
    let mut handles = Vec::new();
    for t in 0..tasks {
        let limiter = limiter.clone();
        handles.push(tokio::spawn(async move {
            let mine: Vec<usize> = (t..identities).step_by(tasks).collect();
            let tenants: Vec<String> = mine.iter().map(|i| format!("tenant-{i}")).collect();
            let mut seen = Vec::new();
            while Instant::now() < stop {
                for (who, tenant) in mine.iter().zip(&tenants) {
                    let key = Key::authenticated(tenant, "caller", w).unwrap();
                    let at = Instant::now();
                    let decision = limiter.admit(&key).await;
                    seen.push(Record {
                        at,
                        who: *who,
                        decision,
                    });
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all.sort_by_key(|r| r.at);
    all
}

/// A run of [`run`] across one event (a kill, a failover), audited.
pub struct Across {
    pub records: Vec<Record>,
    pub audit: Audit,
    identities: usize,
    start: Instant,
}

/// The failover tests' load loop: `identities` identities over `tasks` callers for `length`;
/// 1.5 s in (identities written, buckets in the store), `event` runs on `harness` off the
/// runtime (it blocks: kills, waits for servers), and the answers are audited against the
/// instant it returned. Gives back the harness, what `event` returned, and the run.
pub async fn across<H, R>(
    limiter: Arc<RedisLimiter>,
    (identities, tasks): (usize, usize),
    length: Duration,
    mut harness: H,
    event: impl FnOnce(&mut H) -> R + Send + 'static,
) -> (H, R, Across)
where
    H: Send + 'static,
    R: Send + 'static,
{
    let start = Instant::now();
    let loader = tokio::spawn(run(limiter, identities, tasks, start + length));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (harness, out, at) = tokio::task::spawn_blocking(move || {
        let out = event(&mut harness);
        (harness, out, Instant::now())
    })
    .await
    .unwrap();
    let records = loader.await.unwrap();
    let audit = audit(&records, at);
    let run = Across {
        records,
        audit,
        identities,
        start,
    };
    (harness, out, run)
}

impl Across {
    /// The audit's figures and the timeline, for the test's output; `event` names what the
    /// outage is measured from ("the kill").
    pub fn report(&self, event: &str) -> String {
        let a = &self.audit;
        format!(
            "{} admitted, {} throttled, {} refused 503 ({} of {} identities), last 503 {:?} \
             after {event}, most admissions of one identity {} (bound {SUSTAINED})\n{}",
            a.admitted,
            a.throttled,
            a.unavailable,
            a.affected.len(),
            self.identities,
            a.outage,
            a.most,
            timeline(&self.records, self.start)
        )
    }
}

/// What the audit found.
pub struct Audit {
    pub admitted: u64,
    pub throttled: u64,
    pub unavailable: u64,
    /// Identities that saw at least one 503.
    pub affected: Vec<usize>,
    /// From `event` to the last 503 any identity saw (None: no 503 at all).
    pub outage: Option<Duration>,
    /// The most admissions any one identity got.
    pub most: u64,
}

/// Checks every answer and the bound; panics naming the first breach.
pub fn audit(records: &[Record], event: Instant) -> Audit {
    let mut per: HashMap<usize, u64> = HashMap::new();
    let mut last_503: HashMap<usize, Instant> = HashMap::new();
    let (mut admitted, mut throttled, mut unavailable) = (0, 0, 0);
    for r in records {
        match r.decision {
            Decision::Admit => {
                admitted += 1;
                *per.entry(r.who).or_default() += 1;
            }
            Decision::Throttle { .. } => throttled += 1,
            Decision::Unavailable {
                retry_after: None,
                cause: Cause::StoreUnavailable,
            } => {
                unavailable += 1;
                last_503.insert(r.who, r.at);
            }
            other => panic!("identity {}: {other:?}", r.who),
        }
    }
    for (who, n) in &per {
        assert!(
            *n <= SUSTAINED,
            "identity {who} admitted {n} times, more than its {SUSTAINED} tokens: the failover \
             forgot admissions"
        );
    }
    // Every identity that saw a 503 was answered again afterwards.
    for (who, at) in &last_503 {
        assert!(
            records.iter().any(|r| r.who == *who
                && r.at > *at
                && !matches!(r.decision, Decision::Unavailable { .. })),
            "identity {who} never recovered"
        );
    }
    let mut affected: Vec<usize> = last_503.keys().copied().collect();
    affected.sort_unstable();
    Audit {
        admitted,
        throttled,
        unavailable,
        affected,
        outage: last_503
            .values()
            .max()
            .map(|at| at.saturating_duration_since(event)),
        most: per.values().copied().max().unwrap_or(0),
    }
}

/// Decisions per second of the run: total, admitted, refused 503: the shape of the outage.
pub fn timeline(records: &[Record], start: Instant) -> String {
    let mut out = String::new();
    let end = records.last().map_or(start, |r| r.at);
    let mut sec = 0;
    while start + Duration::from_secs(sec) <= end {
        let from = start + Duration::from_secs(sec);
        let to = from + Duration::from_secs(1);
        let (mut n, mut a, mut u) = (0, 0, 0);
        for r in records.iter().filter(|r| r.at >= from && r.at < to) {
            n += 1;
            match r.decision {
                Decision::Admit => a += 1,
                Decision::Unavailable { .. } => u += 1,
                _ => {}
            }
        }
        out += &format!("  s{sec}: {n} decisions, {a} admitted, {u} refused 503\n");
        sec += 1;
    }
    out
}
