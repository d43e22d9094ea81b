//! Per-request overhead of the weir layer against tower_governor, through
//! `tower::ServiceExt::oneshot` on an in-memory service (no network, no runtime: every future
//! here completes on its first poll). Each iteration builds the same request (a path with a
//! query, four headers, `ConnectInfo`), calls the layered service and drops the response.
//! Both limiters key on the peer IP and are configured never to refuse, so the passing path is
//! what is measured. `inner only` is the same without a layer; subtract it for the overhead.
//!
//! cargo bench -p weir-tower --bench layer -- --warm-up-time 1 --measurement-time 3

mod setup;

use criterion::{criterion_group, criterion_main, Criterion};
use setup::{engine, run, services, RATE};

fn bench(c: &mut Criterion) {
    let (inner, governor, weir, weir_conc) = services();
    let mut g = c.benchmark_group("tower_layer");
    g.bench_function("inner only", |b| b.iter(|| run(&inner)));
    g.bench_function("tower_governor (per-IP GCRA)", |b| {
        b.iter(|| run(&governor))
    });
    g.bench_function("weir (per-IP GCRA)", |b| b.iter(|| run(&weir)));
    g.bench_function("weir (per-IP GCRA + concurrency)", |b| {
        b.iter(|| run(&weir_conc))
    });
    // The engine alone on an equivalent request (no http types, no layer), for reference.
    let eng = engine(RATE);
    let owned = weir::policy::OwnedRequest::new(
        "GET",
        "/api/items?page=2&sort=name",
        "192.0.2.7".parse().unwrap(),
    )
    .header("host", "example.com")
    .header("user-agent", "bench/1.0")
    .header("accept", "application/json")
    .header("cookie", "session=abc; theme=dark");
    g.bench_function("engine.evaluate only (per-IP GCRA)", |b| {
        b.iter(|| {
            let out = eng.evaluate(&owned, weir::clock::monotonic_ns()).unwrap();
            eng.release(out.permits, 0);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
