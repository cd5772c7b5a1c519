//! What the C ABI costs over the Rust API: `Limiter::admit` and `tg_admit` on the same hot key,
//! in one group so that the difference is read off one run (target: at most 5 ns).
//!
//! `cargo bench --bench ffi`. Both sides admit every call (the quotas are too
//! large to run out), so both take the write path; `tg_admit` adds the handle, pointer and
//! length checks, UTF-8 validation, the class check and the `tg_decision` conversion.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tollgate::{Key, Limiter, Profile};
use tollgate_ffi::{tg_admit, tg_decision, tg_limiter, tg_limiter_free, tg_limiter_new_from_yaml};

const PROFILE: &str = "name: bench\nidentities: { capacity: 1024 }\nroute_classes:\n  read:\n    \
     burst: { tokens: 4000000000, per: 1s }\n    sustained: { tokens: 4000000000, per: 1s }\n";

fn hot_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("ffi_hot_key");
    g.throughput(Throughput::Elements(1));

    let limiter = Limiter::builder(Profile::from_yaml(PROFILE).unwrap())
        .build()
        .unwrap();
    let read = limiter.route_class("read").unwrap();
    let (tenant, principal) = ("tenant-001", "user-000000001");
    g.bench_function("rust_admit", |b| {
        b.iter(|| {
            let key = Key::authenticated(black_box(tenant), black_box(principal), read).unwrap();
            black_box(limiter.admit(&key))
        })
    });

    let mut handle: *mut tg_limiter = std::ptr::null_mut();
    // SAFETY: 1. `PROFILE` is valid for its length. 2. `handle` is a valid place for the pointer.
    let r =
        unsafe { tg_limiter_new_from_yaml(PROFILE.as_ptr().cast(), PROFILE.len(), &mut handle) };
    assert_eq!(r as u32, 0);
    let mut out: tg_decision = unsafe_zeroed_decision();
    g.bench_function("tg_admit", |b| {
        b.iter(|| {
            // SAFETY: 1. `handle` is live until freed below. 2. The strings are valid for their
            // lengths. 3. `out` is a valid place for a decision.
            let r = unsafe {
                tg_admit(
                    black_box(handle),
                    black_box(tenant).as_ptr().cast(),
                    tenant.len(),
                    black_box(principal).as_ptr().cast(),
                    principal.len(),
                    read.index(),
                    &mut out,
                )
            };
            black_box((r, out.kind))
        })
    });
    g.finish();
    // SAFETY: 1. `handle` came from `tg_limiter_new_from_yaml`; nothing uses it after this.
    unsafe { tg_limiter_free(handle) };
}

/// A decision to overwrite (`tg_decision` has no `Default`: C callers declare it uninitialized).
fn unsafe_zeroed_decision() -> tg_decision {
    tg_decision {
        kind: tollgate_ffi::tg_decision_kind::Admit,
        http_status: 0,
        bucket: tollgate_ffi::tg_bucket_kind::None,
        cause: tollgate_ffi::tg_cause::None,
        retry_after_ms: 0,
        code: std::ptr::null(),
    }
}

criterion_group!(benches, hot_key);
criterion_main!(benches);
