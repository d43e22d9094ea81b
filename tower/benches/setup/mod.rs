//! What both benchmarks measure: the same request through the same layered services.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use futures_util::FutureExt;
use http::{Request, Response};
use tower::{Layer, Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::WeirLayer;

/// One per-IP GCRA limit over every request, generous enough never to refuse.
pub const RATE: &str = r#"
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
pub const RATE_AND_CONCURRENCY: &str = r#"
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

pub fn request() -> Request<Body> {
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

pub fn run<S, B>(svc: &S) -> http::StatusCode
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

pub fn engine(policy: &str) -> Arc<Engine> {
    Arc::new(Engine::new(CompiledPolicy::parse(policy, None).unwrap()).unwrap())
}

/// `inner only`, `tower_governor`, `weir`, `weir + concurrency`, each checked to pass.
#[allow(clippy::type_complexity)]
pub fn services() -> (
    impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
    impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone,
    impl Service<Request<Body>, Response = Response<weir_tower::WeirBody<Body>>, Error = Infallible>
        + Clone,
    impl Service<Request<Body>, Response = Response<weir_tower::WeirBody<Body>>, Error = Infallible>
        + Clone,
) {
    let inner = tower::service_fn(|_req: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Body::empty()))
    });
    let weir = WeirLayer::new(engine(RATE)).layer(inner);
    let weir_conc = WeirLayer::new(engine(RATE_AND_CONCURRENCY)).layer(inner);
    let config = GovernorConfigBuilder::default()
        .per_nanosecond(1)
        .burst_size(1_000_000)
        .finish()
        .unwrap();
    let governor = GovernorLayer::new(config).layer(inner);
    // Every one of them passes (a refusal would be measuring another path).
    for _ in 0..1000 {
        assert_eq!(run(&governor), 200);
        assert_eq!(run(&weir), 200);
        assert_eq!(run(&weir_conc), 200);
    }
    (inner, governor, weir, weir_conc)
}
