//! The loop `benches/instructions.sh` counts with callgrind: `admit_loop MODE N` admits N
//! requests (`hot`: one key, built and admitted each time; `capacity`: with shared capacity and
//! tenant fair share; `keys`: 64k keys round robin; `pinned`: one pinned key; `ffi`,
//! `ffi-pinned`: `hot` and `pinned` through the C ABI) on quotas too large to refuse, so that
//! every call takes the admit path.
use std::hint::black_box;
use tollgate::{Key, Limiter, Profile};
fn limiter(extra: &str) -> Limiter {
    let p = Profile::from_yaml(&format!("name: ir\nidentities: {{ capacity: 131072 }}\nroute_classes:\n  read:\n    burst: {{ tokens: 4000000000, per: 1s }}\n    sustained: {{ tokens: 4000000000, per: 1s }}\n{extra}")).unwrap();
    Limiter::builder(p).key_secret(b"ir").build().unwrap()
}
fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    if mode.starts_with("ffi") {
        return ffi(&mode, std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(1_000_000));
    }
    let n: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(1_000_000);
    let extra = if mode == "capacity" { "shared_capacity: { shards: 8, window: 1s, slots_per_window: 16000000, tenant_share: 0.5 }\n" } else { "" };
    let l = limiter(extra);
    let c = l.route_class("read").unwrap();
    let names: Vec<String> = (0..65536).map(|i| format!("user-{i:09}")).collect();
    let mut admitted = 0usize;
    if mode == "pinned" {
        let pin = l.pin(&Key::authenticated("tenant-001", &names[0], c).unwrap());
        for _ in 0..n {
            admitted += black_box(l.admit_pinned(black_box(&pin))).is_admit() as usize;
        }
        println!("{mode}: {admitted} of {n}");
        return;
    }
    for i in 0..n {
        let principal = if mode == "keys" { &names[i & 65535] } else { &names[0] };
        let key = Key::authenticated("tenant-001", principal, c).unwrap();
        admitted += black_box(l.admit(black_box(&key))).is_admit() as usize;
    }
    println!("{mode}: {admitted} of {n}");
}

/// `hot` and `pinned` through `tg_admit` and `tg_admit_pinned`.
fn ffi(mode: &str, n: usize) {
    use tollgate_ffi::*;
    let yaml = "name: ir\nidentities: { capacity: 131072 }\nroute_classes:\n  read:\n    burst: { tokens: 4000000000, per: 1s }\n    sustained: { tokens: 4000000000, per: 1s }\n";
    let (mut l, mut p) = (std::ptr::null_mut(), std::ptr::null_mut());
    let (tenant, principal) = ("tenant-001", "user-000000000");
    let mut d = std::mem::MaybeUninit::<tg_decision>::uninit();
    let mut admitted = 0usize;
    // SAFETY: every pointer is to a live local or a live handle made here; lengths are the
    // strings' own.
    unsafe {
        assert_eq!(tg_limiter_new_from_yaml(yaml.as_ptr().cast(), yaml.len(), &mut l), tg_result::Ok);
        let t = (tenant.as_ptr().cast(), tenant.len(), principal.as_ptr().cast(), principal.len());
        if mode == "ffi-pinned" {
            assert_eq!(tg_pin(l, t.0, t.1, t.2, t.3, 0, &mut p), tg_result::Ok);
        }
        for _ in 0..n {
            let r = if mode == "ffi-pinned" {
                tg_admit_pinned(black_box(l), black_box(p), d.as_mut_ptr())
            } else {
                tg_admit(black_box(l), t.0, t.1, t.2, t.3, 0, d.as_mut_ptr())
            };
            admitted += (r == tg_result::Ok && d.assume_init_ref().kind == tg_decision_kind::Admit) as usize;
        }
        tg_pinned_free(p);
        tg_limiter_free(l);
    }
    println!("{mode}: {admitted} of {n}");
}
