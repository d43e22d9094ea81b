//! Policy engine: ns per `Engine::evaluate` (+ `Engine::release` when permits are held) on a
//! realistic policy and request mix, and on a minimal one-limit policy.
//!
//!   cargo bench --bench policy -- --warm-up-time 1 --measurement-time 3
//!
//! Time advances 100 ms per request, so every request passes: the measured path is the full one
//! (normalize, exemptions, classes, keys, predict, acquire, charge, release).

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_group, criterion_main, Criterion};
use weir::policy::{CompiledPolicy, Engine, OwnedRequest};

#[path = "../tests/common/engine_fixture.rs"]
mod fixture;

const STEP_NS: u64 = 100_000_000;

fn engine(src: &str) -> Engine {
    Engine::new(CompiledPolicy::parse(src, Some("bench.toml")).unwrap_or_else(|e| panic!("{e}")))
        .unwrap()
}

/// Evaluates requests in turn (cycling), releasing permits as a host would.
fn run(c: &mut Criterion, name: &str, engine: &Engine, reqs: &[OwnedRequest]) {
    let mut now = 1_000_000_000u64;
    let mut i = 0usize;
    c.bench_function(name, |b| {
        b.iter(|| {
            let r = &reqs[i % reqs.len()];
            i = i.wrapping_add(1);
            now += STEP_NS;
            let out = engine.evaluate(black_box(r), now).unwrap();
            let action = out.action;
            engine.release(out.permits, now);
            black_box(action)
        })
    });
}

fn benches(c: &mut Criterion) {
    let real = engine(fixture::REALISTIC_POLICY);
    // 16 clients of each kind, so the tables hold several keys.
    let clients = 1..=16u8;
    let wiki: Vec<_> = clients.clone().map(fixture::wiki_tool).collect();
    let stat: Vec<_> = clients.clone().map(fixture::static_asset).collect();
    let api: Vec<_> = clients.clone().map(fixture::api_call).collect();
    let mix: Vec<_> = clients
        .flat_map(|c| {
            [
                fixture::wiki_tool(c),
                fixture::static_asset(c),
                fixture::api_call(c),
            ]
        })
        .collect();
    run(c, "realistic/wiki_tool_query", &real, &wiki);
    run(c, "realistic/static_exempt", &real, &stat);
    run(c, "realistic/api_call", &real, &api);
    run(c, "realistic/mix_3", &real, &mix);

    let min = engine(fixture::MINIMAL_POLICY);
    let peers: Vec<_> = (1..=16u8)
        .map(|c| OwnedRequest::new("GET", "/", IpAddr::from([198, 51, 100, c])))
        .collect();
    run(c, "minimal_1_limit/get_root", &min, &peers);
}

criterion_group!(policy, benches);
criterion_main!(policy);
