//! The layer's own behaviour on a real server (axum on 127.0.0.1, real clock): permits come
//! back on handler error, handler panic and client disconnect mid-body (streaming); a body held
//! for three leases keeps its permit; without ConnectInfo the fallback peer is used. (Delays,
//! queue waits, a client leaving an idle body, ConnectInfo and unix-socket peers,
//! failure_mode: the host scenarios, tests/hosts.rs.)

mod common;

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use common::{held_response, serve, Conn, End, Held};
use http_body_util::Full;
use tower::{Layer, ServiceExt};
use tower_http::catch_panic::CatchPanicLayer;
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::WeirLayer;

const ONE_AT_A_TIME: &str = r#"
[zones.c]
size = "64k"
algorithm = "concurrency"
max = 1
[[limit]]
class = "*"
zone = "c"
name = "one"
key = "global"
"#;

const SECOND: Duration = Duration::from_secs(1);

fn engine(policy: &str) -> Arc<Engine> {
    Arc::new(Engine::new(CompiledPolicy::parse(policy, Some("test.toml")).unwrap()).unwrap())
}

async fn held(State(held): State<Arc<Held>>, req: Request) -> Response {
    let id = common::step_id(&req).expect("x-test-step");
    held_response(&held, id)
}

async fn panics() -> &'static str {
    panic!("handler panic (expected by the test)")
}

/// `/` holds its body open until the test ends it; `/panic` panics (CatchPanicLayer outside
/// the weir layer turns that into a 500).
async fn app(layer: WeirLayer) -> (SocketAddr, Arc<Held>) {
    let state = Arc::new(Held::default());
    let app = Router::new()
        .route("/", get(held))
        .route("/panic", get(panics))
        .layer(layer)
        .layer(CatchPanicLayer::new())
        .with_state(state.clone());
    (serve(app).await.0, state)
}

async fn get_held(addr: SocketAddr, id: u64) -> Conn {
    let id = id.to_string();
    Conn::send(addr, "GET", "/", &[("x-test-step", &id)]).await
}

async fn status(conn: &mut Conn, wait: Duration) -> Option<u16> {
    conn.head(wait).await.map(|h| h.status)
}

#[tokio::test]
async fn handler_panic_releases_the_permit() {
    let (addr, held) = app(WeirLayer::new(engine(ONE_AT_A_TIME))).await;
    let mut a = get_held(addr, 1).await;
    assert_eq!(status(&mut a, SECOND).await, Some(200));
    let mut b = get_held(addr, 2).await;
    assert_eq!(status(&mut b, SECOND).await, Some(429), "the limit is on");
    held.end(1, End::Finish);
    a.body(SECOND).await.unwrap();

    let mut p = Conn::send(addr, "GET", "/panic", &[]).await;
    assert_eq!(status(&mut p, SECOND).await, Some(500));
    p.body(SECOND).await;
    let mut c = get_held(addr, 3).await;
    assert_eq!(
        status(&mut c, SECOND).await,
        Some(200),
        "the panicking request gave its permit back"
    );
}

/// With a 2 s lease, a response body held open for three leases keeps its permit (the layer's
/// renewer renews it): second requests are refused throughout, and pass once it ends.
#[tokio::test]
async fn a_body_held_longer_than_two_leases_keeps_its_permit() {
    let policy = ONE_AT_A_TIME.replace("max = 1", "max = 1\nlease = \"2s\"");
    let (addr, held) = app(WeirLayer::new(engine(&policy))).await;
    let mut a = get_held(addr, 1).await;
    assert_eq!(status(&mut a, SECOND).await, Some(200));
    let start = Instant::now();
    let mut id = 2;
    while start.elapsed() < 6 * SECOND {
        let mut b = get_held(addr, id).await;
        assert_eq!(
            status(&mut b, SECOND).await,
            Some(429),
            "{:.1}s into the first request",
            start.elapsed().as_secs_f64()
        );
        id += 1;
        tokio::time::sleep(SECOND / 4).await;
    }
    held.end(1, End::Finish);
    a.body(SECOND).await.unwrap();
    let mut c = get_held(addr, id).await;
    assert_eq!(
        status(&mut c, SECOND).await,
        Some(200),
        "the permit came back"
    );
    held.end(id, End::Finish);
}

#[tokio::test]
async fn body_error_releases_the_permit() {
    let (addr, held) = app(WeirLayer::new(engine(ONE_AT_A_TIME))).await;
    let mut a = get_held(addr, 1).await;
    assert_eq!(status(&mut a, SECOND).await, Some(200));
    held.end(1, End::Fail);
    assert!(
        a.body(SECOND).await.is_none(),
        "a failed body aborts the response"
    );
    let mut b = get_held(addr, 2).await;
    assert_eq!(status(&mut b, SECOND).await, Some(200));
}

#[tokio::test]
async fn inner_service_error_releases_the_permit() {
    // No network: the inner service fails instead of answering.
    let svc = WeirLayer::new(engine(ONE_AT_A_TIME)).layer(tower::service_fn(
        |_req: http::Request<()>| async {
            Err::<http::Response<Full<bytes::Bytes>>, _>("inner failed")
        },
    ));
    let req = || http::Request::get("/").body(()).unwrap();
    assert_eq!(svc.clone().oneshot(req()).await.err(), Some("inner failed"));
    // Had the permit stayed taken, this would be the layer's 429, not the inner error.
    assert_eq!(svc.clone().oneshot(req()).await.err(), Some("inner failed"));
}

/// The client reads the head and the first chunk, then drops the connection while the
/// handler's body is still streaming; the next request must get the permit.
#[tokio::test]
async fn client_disconnect_mid_body_releases_the_permit_streaming_body() {
    let (addr, held) = app(WeirLayer::new(engine(ONE_AT_A_TIME))).await;
    *held.tick.lock().unwrap() = Some(Duration::from_millis(5));
    let mut a = get_held(addr, 1).await;
    assert_eq!(status(&mut a, SECOND).await, Some(200));
    let mut b = get_held(addr, 2).await;
    assert_eq!(
        status(&mut b, SECOND).await,
        Some(429),
        "the body holds the permit"
    );
    drop(a);
    let t0 = Instant::now();
    let mut n = 3;
    loop {
        let mut c = get_held(addr, n).await;
        match status(&mut c, SECOND).await {
            Some(200) => break,
            Some(429) if t0.elapsed() < Duration::from_secs(3) => {
                tokio::time::sleep(Duration::from_millis(10)).await
            }
            other => panic!("permit not released after the client left: {other:?}"),
        }
        n += 1;
    }
}

const LOCAL_ONLY: &str = r#"
[classes.local]
match = [{ client = "127.0.0.1/32" }]
[zones.z]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[[limit]]
class = "local"
zone = "z"
nodelay = true
"#;

#[tokio::test]
async fn without_connect_info_the_fallback_peer_is_used() {
    let inner = tower::service_fn(|_req: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(bytes::Bytes::from("ok"))))
    });
    let req = || http::Request::get("/").body(()).unwrap();
    // No address: the local client, not in 127.0.0.1/32, never limited.
    let svc = WeirLayer::new(engine(LOCAL_ONLY)).layer(inner);
    for _ in 0..3 {
        assert_eq!(svc.clone().oneshot(req()).await.unwrap().status(), 200);
    }
    let svc = WeirLayer::new(engine(LOCAL_ONLY))
        .fallback_peer(IpAddr::V4(Ipv4Addr::LOCALHOST))
        .layer(inner);
    assert_eq!(svc.clone().oneshot(req()).await.unwrap().status(), 200);
    assert_eq!(svc.clone().oneshot(req()).await.unwrap().status(), 429);
}

#[test]
fn the_future_is_send() {
    fn send<T: Send>(_: &T) {}
    let mut svc = WeirLayer::new(engine(ONE_AT_A_TIME)).layer(Router::new());
    let fut = tower::Service::call(&mut svc, Request::new(axum::body::Body::empty()));
    send(&fut);
}
