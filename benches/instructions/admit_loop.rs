//! The loop `benches/instructions.sh` counts with callgrind: `admit_loop MODE N` admits N
//! requests (a hot key; `capacity`: with shared capacity; `keys`: 64k keys round robin) on
//! quotas too large to refuse, so that every call takes the admit path.
use std::hint::black_box;
use tollgate::{Key, Limiter, Profile};
fn limiter(extra: &str) -> Limiter {
    let p = Profile::from_yaml(&format!("name: ir\nidentities: {{ capacity: 131072 }}\nroute_classes:\n  read:\n    burst: {{ tokens: 4000000000, per: 1s }}\n    sustained: {{ tokens: 4000000000, per: 1s }}\n{extra}")).unwrap();
    Limiter::builder(p).key_secret(b"ir").build().unwrap()
}
fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let n: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(1_000_000);
    let extra = if mode == "capacity" { "shared_capacity: { shards: 8, window: 1s, slots_per_window: 16000000, tenant_share: 1.0 }\n" } else { "" };
    let l = limiter(extra);
    let c = l.route_class("read").unwrap();
    let names: Vec<String> = (0..65536).map(|i| format!("user-{i:09}")).collect();
    let mut admitted = 0usize;
    for i in 0..n {
        let principal = if mode == "keys" { &names[i & 65535] } else { &names[0] };
        let key = Key::authenticated("tenant-001", principal, c).unwrap();
        admitted += black_box(l.admit(black_box(&key))).is_admit() as usize;
    }
    println!("{mode}: {admitted} of {n}");
}
