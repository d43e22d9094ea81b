//! Capacity through the layer: the permits go back with the inner service's time (not the
//! time the body stays open), a learned limit (`max = "auto"`) finds the slots of a handler
//! that serves N requests at a time, lanes keep the reserve for critical requests, a
//! queued request is woken by a release rather than by its next poll, and once the queue
//! stands the newest waiter is woken first.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::{held_response, serve, Conn, End, Held};
use http_body_util::Full;
use serde_json::Value;
use tokio::sync::Semaphore;
use tower::{Layer, ServiceExt};
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::{StatusService, WeirLayer};

const MS: u64 = 1_000_000;
const SECOND: Duration = Duration::from_secs(1);

fn engine(policy: &str) -> Arc<Engine> {
    Arc::new(Engine::new(CompiledPolicy::parse(policy, Some("test.toml")).unwrap()).unwrap())
}

fn get_req() -> http::Request<()> {
    http::Request::get("/").body(()).unwrap()
}

const FIXED: &str = r#"
[zones.backend]
size = "64k"
algorithm = "concurrency"
max = 4

[[limit]]
name = "backend"
class = "*"
zone = "backend"
key = "global"
"#;

/// On an injected clock: the inner service takes 30 ms, the client then takes 300 ms to read
/// the body. The sample the permits go back with is the 30 ms, and an inner-service error
/// gives none.
#[tokio::test]
async fn the_sample_is_the_inner_services_time_not_the_bodys() {
    let clock = Arc::new(AtomicU64::new(1_000_000 * MS));
    let fail = Arc::new(AtomicBool::new(false));
    let inner = tower::service_fn({
        let (clock, fail) = (clock.clone(), fail.clone());
        move |_req: http::Request<()>| {
            let (clock, fail) = (clock.clone(), fail.clone());
            async move {
                clock.fetch_add(30 * MS, SeqCst);
                if fail.load(SeqCst) {
                    return Err("inner failed");
                }
                Ok(http::Response::new(Full::new(Bytes::from("ok"))))
            }
        }
    });
    let e = engine(FIXED);
    let now = {
        let clock = clock.clone();
        move || clock.load(SeqCst)
    };
    let svc = WeirLayer::new(e.clone()).with_clock(now).layer(inner);
    for _ in 0..20 {
        let resp = svc.clone().oneshot(get_req()).await.unwrap();
        assert!(resp.body().holds_permits());
        clock.fetch_add(300 * MS, SeqCst);
        drop(resp);
    }
    let s = e.saturation(0, clock.load(SeqCst)).unwrap();
    assert_eq!(s.in_flight, 0);
    // Latencies are kept in 16.384 µs units.
    assert!(s.latency_ns.abs_diff(30 * MS) < MS / 10, "{}", s.latency_ns);

    // 20 failed calls of 2 s each: no sample, the figure stays.
    fail.store(true, SeqCst);
    for _ in 0..20 {
        clock.fetch_add(2000 * MS, SeqCst);
        assert!(svc.clone().oneshot(get_req()).await.is_err());
    }
    let s = e.saturation(0, clock.load(SeqCst)).unwrap();
    assert!(s.latency_ns.abs_diff(30 * MS) < MS / 10, "{}", s.latency_ns);
}

const QUEUE: &str = r#"
[zones.c]
size = "64k"
algorithm = "concurrency"
max = 1

[[limit]]
name = "one"
class = "*"
zone = "c"
key = "global"
queue = 5
timeout = "5s"
"#;

/// On tokio's paused clock (it moves only when every task waits): a request queued behind a
/// held permit is served as soon as the permit goes back, without the clock moving on to
/// its next poll.
#[tokio::test(start_paused = true)]
async fn a_release_wakes_the_queued_request_at_once() {
    let inner = tower::service_fn(|_req: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
    });
    let svc = WeirLayer::new(engine(QUEUE)).layer(inner);
    let first = svc.clone().oneshot(get_req()).await.unwrap();
    let queued = tokio::spawn(svc.clone().oneshot(get_req()));
    // Five polls (10 ms apart) later it still waits.
    tokio::time::sleep(Duration::from_millis(55)).await;
    assert!(!queued.is_finished(), "the slot is held");
    let released = tokio::time::Instant::now();
    drop(first);
    let resp = queued.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        tokio::time::Instant::now() - released,
        Duration::ZERO,
        "served at the release, not at its next poll"
    );
}

/// Once the queue stands (every waiter served for more than an interval waited over 5 ms),
/// a freed slot goes to the newest waiter: of three lined up while the slot is taken, the
/// third reaches the inner service first. The inner service takes 200 ms (its no-load
/// latency, learned from eight answers first), so a standing queue's waiters are refused only
/// after 200 ms; the older two are served after it or refused (429, the limit's status).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_queue_wakes_its_newest_waiter_first() {
    let entered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = entered.clone();
    let inner = tower::service_fn(move |req: http::Request<()>| {
        log.lock().unwrap().push(req.uri().path().to_string());
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from("ok"))))
        }
    });
    let e = engine(QUEUE);
    let svc = WeirLayer::new(e.clone()).layer(inner);
    let call = |path: &str| {
        let req = http::Request::get(path).body(()).unwrap();
        tokio::spawn(svc.clone().oneshot(req))
    };
    for _ in 0..8 {
        call("/learn").await.unwrap().unwrap();
    }
    let now = || weir::clock::monotonic_ns();
    let noload = e.saturation(0, now()).unwrap().noload_ns;
    assert!(
        noload > 150 * MS,
        "no-load latency {noload} ns, want about 200 ms"
    );
    let e = &e;
    let queued = |n: u64| async move {
        let t0 = Instant::now();
        while e.saturation(0, now()).unwrap().queued != n {
            assert!(t0.elapsed() < 5 * SECOND, "never {n} queued");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    // Each waiter waits 30 ms for its slot (the holder's response is kept), over more than
    // an interval (100 ms).
    let mut holder = call("/s").await.unwrap().unwrap();
    for _ in 0..5 {
        let next = call("/s");
        queued(1).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        drop(holder);
        holder = next.await.unwrap().unwrap();
        assert_eq!(holder.status(), 200);
    }
    let mut x = Vec::new();
    for (n, path) in ["/x1", "/x2", "/x3"].into_iter().enumerate() {
        x.push(call(path));
        queued(n as u64 + 1).await;
    }
    drop(holder);
    let mut statuses = Vec::new();
    for h in x.into_iter().rev() {
        statuses.push(h.await.unwrap().unwrap().status().as_u16());
    }
    let order: Vec<String> = entered.lock().unwrap().clone();
    let xs: Vec<&str> = order
        .iter()
        .filter(|p| p.starts_with("/x"))
        .map(|p| p.as_str())
        .collect();
    assert_eq!(
        xs.first(),
        Some(&"/x3"),
        "the waiters reached the service as {xs:?}"
    );
    assert!(
        statuses[0] == 200 && statuses[1..].iter().all(|s| [200, 429].contains(s)),
        "x3, x2, x1 answered {statuses:?}"
    );
}

async fn held(State(held): State<Arc<Held>>, req: Request) -> Response {
    let id = common::step_id(&req).expect("x-test-step");
    held_response(&held, id)
}

/// `/` (any path) holds its body open until the test ends it.
async fn held_app(policy: &str) -> (SocketAddr, Arc<Held>) {
    let state = Arc::new(Held::default());
    let app = Router::new()
        .fallback(held)
        .layer(WeirLayer::new(engine(policy)))
        .with_state(state.clone());
    (serve(app).await.0, state)
}

async fn send(addr: SocketAddr, path: &str, id: u64) -> Conn {
    let id = id.to_string();
    Conn::send(addr, "GET", path, &[("x-test-step", &id)]).await
}

async fn status(conn: &mut Conn, wait: Duration) -> Option<u16> {
    conn.head(wait).await.map(|h| h.status)
}

/// Over HTTP: b waits behind a; once a's body ends b is served, and c, sent while b runs,
/// queues behind it (it does not pass), then is served when b ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queued_request_gets_the_slot_and_a_later_one_queues_behind() {
    let (addr, held) = held_app(QUEUE).await;
    let mut a = send(addr, "/", 1).await;
    assert_eq!(status(&mut a, SECOND).await, Some(200));
    let mut b = send(addr, "/", 2).await;
    assert_eq!(status(&mut b, SECOND / 10).await, None, "b is queued");
    held.end(1, End::Finish);
    a.body(SECOND).await.unwrap();
    assert_eq!(
        status(&mut b, 5 * SECOND).await,
        Some(200),
        "b got a's slot"
    );
    let mut c = send(addr, "/", 3).await;
    assert_eq!(status(&mut c, SECOND / 10).await, None, "c queues behind b");
    held.end(2, End::Finish);
    b.body(SECOND).await.unwrap();
    assert_eq!(
        status(&mut c, 5 * SECOND).await,
        Some(200),
        "c got b's slot"
    );
    held.end(3, End::Finish);
    c.body(SECOND).await.unwrap();
}

const LANES: &str = r#"
[zones.backend]
size = "64k"
algorithm = "concurrency"
max = 3
reserve = 1

[classes.health]
match = [{ path = "/healthz" }]
lane = "critical"

[classes.tools]
match = [{ path_prefix = "/tools/" }]
lane = "sheddable"

[[limit]]
name = "backend"
class = "*"
zone = "backend"
key = "global"
"#;

/// max 3, reserve 1: sheddable requests get 90 % of the 2 unreserved slots (1), normal
/// requests both, a critical request the reserved one too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critical_request_passes_while_normal_traffic_is_full() {
    let (addr, held) = held_app(LANES).await;
    let mut open = Vec::new();
    for (id, path, want) in [
        (1, "/tools/a", 200),
        (2, "/tools/b", 429),
        (3, "/page", 200),
        (4, "/page", 429),
        (5, "/healthz", 200),
        (6, "/healthz", 429),
    ] {
        let mut c = send(addr, path, id).await;
        assert_eq!(
            status(&mut c, SECOND).await,
            Some(want),
            "request {id} {path}"
        );
        if want == 200 {
            open.push((id, c));
        }
    }
    for (id, mut c) in open {
        held.end(id, End::Finish);
        c.body(SECOND).await.unwrap();
    }
    let mut c = send(addr, "/page", 7).await;
    assert_eq!(
        status(&mut c, SECOND).await,
        Some(200),
        "the slots came back"
    );
    held.end(7, End::Finish);
}

const SLOTS: usize = 4;
const SERVICE: Duration = Duration::from_millis(20);

const AUTO: &str = r#"
[zones.backend]
size = "64k"
algorithm = "concurrency"
max = "auto"
bounds = [1, 100]

[[limit]]
name = "backend"
class = "*"
zone = "backend"
key = "global"
"#;

/// A handler that serves SLOTS requests at a time, SERVICE each (the others wait for a slot
/// inside it); the most it has served at once.
async fn slotted(
    State((slots, busy, most)): State<(Arc<Semaphore>, Arc<AtomicUsize>, Arc<AtomicUsize>)>,
) -> &'static str {
    let _slot = slots.acquire().await.unwrap();
    let now = busy.fetch_add(1, SeqCst) + 1;
    most.fetch_max(now, SeqCst);
    tokio::time::sleep(SERVICE).await;
    busy.fetch_sub(1, SeqCst);
    "ok"
}

/// Clients that keep sending (pausing 50 ms after a refusal) for `run`; (served, refused).
async fn load(addr: SocketAddr, clients: usize, run: Duration) -> (u64, u64) {
    let served = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + run;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (served, refused) = (served.clone(), refused.clone());
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let mut c = Conn::send(addr, "GET", "/", &[]).await;
                match c.head(5 * SECOND).await.map(|h| h.status) {
                    Some(200) => {
                        c.body(5 * SECOND).await.expect("a body");
                        served.fetch_add(1, SeqCst);
                    }
                    Some(429) => {
                        refused.fetch_add(1, SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    other => panic!("unexpected answer {other:?}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (served.load(SeqCst), refused.load(SeqCst))
}

/// The JSON status's `capacity` object of limit 0, through `StatusService`.
async fn capacity(addr: SocketAddr) -> Value {
    let mut c = Conn::send(addr, "GET", "/status?format=json", &[]).await;
    let body = c.body(5 * SECOND).await.expect("the status");
    let json: Value = serde_json::from_slice(&body).unwrap();
    json["limits"][0]["capacity"].clone()
}

/// Six times more clients than the handler has slots, and more than the learned limit starts
/// with (20), for a few seconds: the learned limit ends near the slots, and the latency the
/// status shows is near the handler's service time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learned_limit_finds_the_handlers_slots() {
    let e = engine(AUTO);
    let state = (
        Arc::new(Semaphore::new(SLOTS)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let app = Router::new()
        .route("/", get(slotted))
        .layer(WeirLayer::new(e.clone()))
        .with_state(state.clone())
        .route_service("/status", StatusService::new(e));
    let (addr, _server) = serve(app).await;
    // A few quiet requests first: the no-load latency.
    let (served, _) = load(addr, 1, SECOND / 2).await;
    assert!(served > 0);
    let (served, refused) = load(addr, 6 * SLOTS, 5 * SECOND).await;
    let cap = capacity(addr).await;
    println!("served {served}, refused {refused}, capacity {cap}");
    assert_eq!(cap["auto"], true);
    let limit = cap["limit"].as_u64().unwrap();
    assert!(
        (2..=2 * SLOTS as u64).contains(&limit),
        "learned {limit}: {cap}"
    );
    let service_ms = SERVICE.as_millis() as f64;
    let latency = cap["latency_ms"].as_f64().unwrap();
    assert!(
        (0.8 * service_ms..=2.5 * service_ms).contains(&latency),
        "latency {latency} ms: {cap}"
    );
    let noload = cap["noload_latency_ms"].as_f64().unwrap();
    assert!(
        (0.8 * service_ms..=1.5 * service_ms).contains(&noload),
        "no-load latency {noload} ms: {cap}"
    );
    assert!(refused > 0, "the load was more than the limit admits");
}
