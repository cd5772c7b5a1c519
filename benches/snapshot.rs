//! Snapshot time and size at 1,000,000 identities, with and without admits going on in another
//! thread, and the admits per second that thread makes alone and while snapshots run.
//!
//! `nice cargo bench --bench snapshot`. The admitting thread works on 10,000 identities of
//! their own (quotas never refused); the snapshot writes to a `Vec` (`to_vec`) or, crash-safely,
//! to a file in the system's temporary directory (`save_fsync`). The admit rates are printed,
//! measured by the admitting thread itself over each benchmark's whole run.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tollgate::{Key, Limiter, Profile};

const IDENTITIES: usize = 1_000_000;

/// 2^21 slots (128 MiB); 1,000 tenants with 1,000 principals each in `slow` (10 a day, so
/// every one of them still owes when the snapshot is taken); `hot` never refuses.
fn limiter() -> Arc<Limiter> {
    let profile = Profile::from_yaml(
        "name: snapshot-bench\nidentities: { capacity: 2097152 }\nroute_classes:\n  \
         slow:\n    burst: { tokens: 10, per: 1h }\n    sustained: { tokens: 10, per: 1d }\n  \
         hot:\n    burst: { tokens: 4000000000, per: 1s }\n    sustained: { tokens: 4000000000, per: 1s }\n",
    )
    .unwrap();
    let l = Limiter::builder(profile)
        .key_secret(b"bench")
        .build()
        .unwrap();
    let slow = l.route_class("slow").unwrap();
    for i in 0..IDENTITIES {
        let (t, p) = (format!("tenant-{:03}", i % 1000), format!("user-{i:09}"));
        assert!(l
            .admit(&Key::authenticated(&t, &p, slow).unwrap())
            .is_admit());
    }
    Arc::new(l)
}

/// Admits on `hot` until stopped; returns (admits, seconds).
fn admitting(l: Arc<Limiter>, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, f64)> {
    std::thread::spawn(move || {
        let hot = l.route_class("hot").unwrap();
        let names: Vec<String> = (0..10_000).map(|i| format!("hot-{i:05}")).collect();
        let start = Instant::now();
        let n = AtomicU64::new(0);
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..1024 {
                let k = Key::authenticated("tenant-hot", &names[i % names.len()], hot).unwrap();
                black_box(l.admit(&k));
                i += 1;
            }
            n.fetch_add(1024, Ordering::Relaxed);
        }
        (n.load(Ordering::Relaxed), start.elapsed().as_secs_f64())
    })
}

fn report(what: &str, (admits, secs): (u64, f64)) {
    eprintln!(
        "snapshot bench: {what}: {:.2} M admits/s ({admits} in {secs:.1} s)",
        admits as f64 / secs / 1e6
    );
}

fn snapshot(c: &mut Criterion) {
    let l = limiter();
    let mut probe = Vec::new();
    let s = l.snapshot(&mut probe).unwrap();
    eprintln!(
        "snapshot bench: {} identities, {} bytes ({:.1} bytes an identity; table {} MiB)",
        s.identities,
        s.bytes,
        s.bytes as f64 / s.identities as f64,
        l.memory_bytes() >> 20
    );

    // The admitting thread alone, for a baseline.
    let stop = Arc::new(AtomicBool::new(false));
    let t = admitting(Arc::clone(&l), Arc::clone(&stop));
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    report("admits alone", t.join().unwrap());

    let mut g = c.benchmark_group("snapshot_1m");
    g.sample_size(10)
        .measurement_time(Duration::from_secs(8))
        .throughput(Throughput::Elements(IDENTITIES as u64));
    let mut buf = Vec::with_capacity(probe.len());
    g.bench_function(BenchmarkId::new("to_vec", "quiet"), |b| {
        b.iter(|| {
            buf.clear();
            black_box(l.snapshot(&mut buf).unwrap())
        })
    });
    for (name, to_file) in [("to_vec", false), ("save_fsync", true)] {
        let stop = Arc::new(AtomicBool::new(false));
        let t = admitting(Arc::clone(&l), Arc::clone(&stop));
        let path =
            std::env::temp_dir().join(format!("tollgate-bench-{}.tgsnap", std::process::id()));
        g.bench_function(BenchmarkId::new(name, "while_admitting"), |b| {
            b.iter(|| {
                if to_file {
                    black_box(l.save(&path).unwrap())
                } else {
                    buf.clear();
                    black_box(l.snapshot(&mut buf).unwrap())
                }
            })
        });
        stop.store(true, Ordering::Relaxed);
        report(
            &format!("admits during {name} snapshots"),
            t.join().unwrap(),
        );
        let _ = std::fs::remove_file(&path);
    }
    g.finish();
}

criterion_group!(benches, snapshot);
criterion_main!(benches);
