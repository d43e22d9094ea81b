//! Per-request overhead of the weir layer against tower_governor, through
//! `tower::ServiceExt::oneshot` on an in-memory service (no network, no runtime: every future
//! here completes on its first poll). Each iteration builds the same request (a path with a
//! query, four headers, `ConnectInfo`), calls the layered service and drops the response.
//! Both limiters key on the peer IP and are configured never to refuse, so the passing path is
//! what is measured. `inner only` is the same without a layer; subtract it for the overhead.
//!
//! cargo bench -p weir-tower --bench layer -- --warm-up-time 1 --measurement-time 3

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use criterion::{criterion_group, criterion_main, Criterion};
use futures_util::FutureExt;
use http::{Request, Response};
use tower::{Layer, Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::WeirLayer;

/// One per-IP GCRA limit over every request, generous enough never to refuse.
const RATE: &str = r#"
[zones.per_ip]
size = "1m"
algorithm = "gcra"
rate = "1000000r/s"
[[limit]]
class = "*"
zone = "per_ip"
burst = 1000000
nodelay = true
"#;

/// The same plus a concurrency limit (permits taken, carried by the body, released on drop).
const RATE_AND_CONCURRENCY: &str = r#"
[zones.per_ip]
size = "1m"
algorithm = "gcra"
rate = "1000000r/s"
[zones.inflight]
size = "64k"
algorithm = "concurrency"
max = 1000
[[limit]]
class = "*"
zone = "per_ip"
burst = 1000000
nodelay = true
[[limit]]
class = "*"
zone = "inflight"
"#;

fn request() -> Request<Body> {
    let mut req = Request::get("/api/items?page=2&sort=name")
        .header("host", "example.com")
        .header("user-agent", "bench/1.0")
        .header("accept", "application/json")
        .header("cookie", "session=abc; theme=dark")
        .body(Body::empty())
        .unwrap();
    let peer: SocketAddr = "192.0.2.7:40000".parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    req
}

fn run<S, B>(svc: &S) -> http::StatusCode
where
    S: Service<Request<Body>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    let resp = svc
        .clone()
        .oneshot(request())
        .now_or_never()
        .expect("completes on first poll")
        .unwrap();
    std::hint::black_box(resp).status()
}

fn bench(c: &mut Criterion) {
    let inner = tower::service_fn(|_req: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Body::empty()))
    });
    let engine = |p: &str| Arc::new(Engine::new(CompiledPolicy::parse(p, None).unwrap()).unwrap());
    let weir = WeirLayer::new(engine(RATE)).layer(inner);
    let weir_conc = WeirLayer::new(engine(RATE_AND_CONCURRENCY)).layer(inner);
    let config = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .finish()
        .unwrap();
    let governor = GovernorLayer::new(config).layer(inner);

    // Every one of them passes (a refusal would be measuring another path).
    for _ in 0..10_000 {
        assert_eq!(run(&governor), 200);
        assert_eq!(run(&weir), 200);
        assert_eq!(run(&weir_conc), 200);
    }
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
