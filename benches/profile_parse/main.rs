//! `Profile::from_yaml` on adversarial 4 MiB sources: each must be refused or parsed in
//! well under a second, whatever its shape.
//!
//! `cargo bench --bench profile_parse -- --measurement-time 3 --warm-up-time 1`; the inputs
//! are in `inputs.rs`, and the figures in `benches/README.md`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tollgate::profile::MAX_PROFILE_BYTES;
use tollgate::Profile;

mod inputs;

fn profile_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("profile_parse");
    g.sample_size(10);
    for (name, src) in inputs::adversarial(MAX_PROFILE_BYTES) {
        g.throughput(Throughput::Bytes(src.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| Profile::from_yaml(black_box(&src)).is_ok())
        });
    }
    let example = std::fs::read_to_string("examples/profiles/example.yaml").unwrap();
    g.throughput(Throughput::Bytes(example.len() as u64));
    g.bench_function("example", |b| {
        b.iter(|| Profile::from_yaml(black_box(&example)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, profile_parse);
criterion_main!(benches);
