//! Every shared vector (tests/vectors/*.json) through the layer, over real HTTP: an axum server
//! on 127.0.0.1 and a raw HTTP/1.1 client, one TCP connection per request.
//!
//! How the vector steps map onto HTTP:
//! * request: sent with the vector's method, target and headers (in order); the vector's peer
//!   reaches the layer as a [`PeerOverride`] (or, for `unix:`, a [`LocalPeer`]) set by a test
//!   middleware from `x-test-peer`; its `vars` reach the layer as a [`Vars`] extension set by
//!   the same middleware from `x-test-vars` (the object as JSON). Time is injected with [`WeirLayer::with_clock`]
//!   (`1_000_000_000_000 + t_ms·1e6` ns), so delays are not slept: the test clock records the
//!   sleep the layer asks for, and the test checks it equals the delay. A passed request's body
//!   stays open (permits held) until its `release`.
//! * `queue` expectations: the request must get no response (it waits in the layer).
//! * `retry` expecting pass/reject: the waiting request's response must now arrive (the layer
//!   re-evaluates with its ticket every 10 ms, as the engine says); expecting queue: still no response.
//! * `response_status`: the handler answers it (from `x-test-respond`); the layer charges
//!   `charge_on_status` limits as the response head is produced.
//! * `release`: the handler's body ends; the test reads it to its end on the client.
//! * `abandon`: the client drops the waiting request's connection; the test waits until the
//!   request's future is gone (the layer's guard gives the queue place back).
//!
//! Checked on the wire: status and the `Retry-After` / `RateLimit*` fields. Checked through the
//! response's [`Verdict`] (copied into `x-verdict-*` headers by the test middleware): action,
//! deciding limit, delay, exemption, dry-run. A `bad_request` target that HTTP cannot carry
//! (`/ad min`) is refused by the server's parser with 400 before the layer: accepted as 400.
//!
//! Vectors with `select` steps are skipped (and listed): the layer applies a policy's classes;
//! it has no directives of its own that would select limits.

mod common;
#[path = "../../tests/common/vector.rs"]
mod vector;

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::Router;
use common::{held_response, serve, Conn, End, Finished, Held};
use http::HeaderValue;
use serde_json::Value;
use vector::{Expect, Kind, Vector};
use weir::policy::{Action, CompiledPolicy, Engine};
use weir_tower::{Clock, LocalPeer, PeerOverride, Vars, Verdict, WeirLayer};

/// How long a response may take to arrive; how long "no response" is watched for.
const ARRIVE: Duration = Duration::from_secs(3);
const SILENT: Duration = Duration::from_millis(40);

#[derive(Default)]
struct TestClock {
    now: AtomicU64,
    sleeps: Mutex<Vec<u64>>,
}

/// The layer's handle on the test clock.
struct ClockHandle(Arc<TestClock>);

impl Clock for ClockHandle {
    fn now_ns(&self) -> u64 {
        self.0.now.load(Ordering::SeqCst)
    }
    fn sleep(
        &self,
        d: Duration,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        self.0.sleeps.lock().unwrap().push(d.as_nanos() as u64);
        Box::pin(async {})
    }
}

fn action_str(a: Action) -> &'static str {
    match a {
        Action::Pass => "pass",
        Action::Delay => "delay",
        Action::Reject => "reject",
        Action::Queue => "queue",
    }
}

/// Outermost test middleware: vector peer → PeerOverride, marks the request finished when its
/// future ends, copies the layer's Verdict into headers.
async fn test_mw(State(held): State<Arc<Held>>, mut req: Request, next: Next) -> Response {
    let id = common::step_id(&req).unwrap_or(u64::MAX);
    let _finished = Finished(held.clone(), id);
    match req
        .headers()
        .get("x-test-peer")
        .map(|p| p.to_str().unwrap())
    {
        Some("unix:") => {
            req.extensions_mut().insert(LocalPeer);
        }
        Some(p) => {
            let ip: IpAddr = p.parse().unwrap();
            req.extensions_mut().insert(PeerOverride(ip));
        }
        None => {}
    }
    if let Some(json) = req.headers().get("x-test-vars") {
        let object: serde_json::Map<String, Value> =
            serde_json::from_slice(json.as_bytes()).unwrap();
        let mut vars = Vars::default();
        for (name, value) in object {
            vars.set(name, value.as_str().unwrap());
        }
        req.extensions_mut().insert(vars);
    }
    let mut resp = next.run(req).await;
    if let Some(v) = resp.extensions().get::<Verdict>().cloned() {
        let action = if v.bad_target {
            "bad_request"
        } else if v.exempt.is_some() {
            "exempt"
        } else {
            action_str(v.action)
        };
        let h = resp.headers_mut();
        let mut set = |n: &'static str, val: String| {
            h.insert(n, HeaderValue::from_str(&val).unwrap());
        };
        set("x-verdict-action", action.into());
        set("x-verdict-wait-ns", v.wait_ns.to_string());
        if let Some(l) = v.limit {
            set("x-verdict-limit", l.to_string());
        }
        if let Some(e) = v.exempt {
            set("x-verdict-exempt", e.to_string());
        }
        if let Some((_, a)) = v.dry_run {
            set("x-verdict-dry-run", action_str(a).into());
        }
    }
    resp
}

async fn handler(State(held): State<Arc<Held>>, req: Request) -> Response {
    let id = common::step_id(&req).expect("x-test-step");
    let status = req
        .headers()
        .get("x-test-respond")
        .and_then(|v| v.to_str().ok()?.parse::<u16>().ok());
    let mut resp = held_response(&held, id);
    if let Some(s) = status.and_then(|s| http::StatusCode::from_u16(s).ok()) {
        *resp.status_mut() = s;
    }
    resp
}

struct Run {
    name: String,
    engine: Arc<Engine>,
    clock: Arc<TestClock>,
    held: Arc<Held>,
    addr: std::net::SocketAddr,
    /// Vector step → the HTTP request (its step id) it stands for (retries follow the original).
    origin: HashMap<usize, u64>,
    conns: HashMap<u64, Conn>,
    errs: Vec<String>,
    parser_400: usize,
}

impl Run {
    fn compare(&mut self, i: usize, head: &common::Head, expect: &Expect, slept: Option<u64>) {
        let ctx = format!("{} step {i}", self.name);
        let mut bad = |f: &str, want: &dyn std::fmt::Debug, have: &dyn std::fmt::Debug| {
            self.errs
                .push(format!("{ctx}: {f}: expected {want:?}, got {have:?}"))
        };
        let want_action = expect.action.as_str();
        let have_action = head.get("x-verdict-action");
        if want_action == "bad_request" && have_action.is_none() && head.status == 400 {
            self.parser_400 += 1; // refused by the HTTP parser: no verdict, still a 400
            return;
        }
        if have_action != Some(want_action) {
            bad("action", &want_action, &have_action);
        }
        if let Some(s) = expect.status.filter(|&s| s != head.status) {
            bad("status", &s, &head.status);
        }
        let name_of =
            |h: Option<&str>, f: &dyn Fn(usize) -> String| h.map(|x| f(x.parse().unwrap()));
        if let Some(l) = &expect.limit {
            let have = name_of(head.get("x-verdict-limit"), &|i| {
                self.engine.limit_name(i).into()
            });
            if *l != have {
                bad("limit", l, &have);
            }
        }
        let wait_ns: u64 = head
            .get("x-verdict-wait-ns")
            .map_or(0, |w| w.parse().unwrap());
        if let Some(w) = expect.wait_ms.filter(|&w| w != wait_ns / 1_000_000) {
            bad("wait_ms", &w, &(wait_ns / 1_000_000));
        }
        // The layer must have slept exactly the delay (and not at all otherwise).
        let want_sleep = (want_action == "delay" && wait_ns > 0).then_some(wait_ns);
        if slept != want_sleep {
            bad("slept", &want_sleep, &slept);
        }
        if let Some(x) = &expect.exemption {
            let have = name_of(head.get("x-verdict-exempt"), &|i| {
                self.engine.policy().exemptions[i].name.clone()
            });
            if *x != have {
                bad("exemption", x, &have);
            }
        }
        if let Some(d) = &expect.dry_run {
            let have = head.get("x-verdict-dry-run");
            if d.as_deref() != have {
                bad("dry_run", d, &have);
            }
        }
        for (n, want) in expect.headers.iter().flatten() {
            let have = head.get(n);
            if want.as_deref() != have {
                bad(&format!("headers.{n}"), want, &have);
            }
        }
    }
}

async fn run_vector(v: &Vector) -> (Vec<String>, usize) {
    let name = v.name.clone();
    let policy = CompiledPolicy::parse(&v.policy, Some(&name)).unwrap();
    let engine = Arc::new(Engine::new(policy).unwrap());
    let clock = Arc::new(TestClock::default());
    let held = Arc::new(Held::default());
    let layer = WeirLayer::new(engine.clone())
        .with_clock(ClockHandle(clock.clone()))
        .expose_verdict(true);
    let app = Router::new()
        .fallback(handler)
        .layer(layer)
        .layer(middleware::from_fn_with_state(held.clone(), test_mw))
        .with_state(held.clone());
    let (addr, server) = serve(app).await;
    let mut run = Run {
        name: name.clone(),
        engine,
        clock,
        held,
        addr,
        origin: HashMap::new(),
        conns: HashMap::new(),
        errs: Vec::new(),
        parser_400: 0,
    };
    for (i, step) in v.steps.iter().enumerate() {
        let ctx = format!("{name} step {i}");
        run.clock.now.store(step.now_ns(), Ordering::SeqCst);
        let (expect, retry) = match step.kind() {
            Kind::Release(j) => {
                let id = run.origin[&j];
                run.held.end(id, End::Finish);
                let conn = run.conns.get_mut(&id).unwrap();
                assert!(
                    conn.body(ARRIVE).await.is_some(),
                    "{ctx}: body of {j} did not end"
                );
                continue;
            }
            Kind::Abandon(j) => {
                let id = run.origin[&j];
                drop(run.conns.remove(&id));
                run.held.wait_finished(id).await;
                continue;
            }
            Kind::Retry(j, expect) => (expect, Some(j)),
            Kind::Request(expect) => (expect, None),
        };
        let queue = expect.action == "queue";
        let sleeps_before = run.clock.sleeps.lock().unwrap().len();
        let id = if let Some(j) = retry {
            run.origin[&j]
        } else {
            let mut headers = step.headers.clone();
            headers.push(("x-test-peer".into(), step.peer().into()));
            if let Some(vars) = &step.vars {
                headers.push(("x-test-vars".into(), serde_json::to_string(vars).unwrap()));
            }
            headers.push(("x-test-step".into(), i.to_string()));
            if let Some(status) = step.response_status {
                headers.push(("x-test-respond".into(), status.to_string()));
            }
            let hs: Vec<(&str, &str)> = headers
                .iter()
                .map(|(a, b)| (a.as_str(), b.as_str()))
                .collect();
            let conn = Conn::send(run.addr, step.method(), step.target(), &hs).await;
            run.conns.insert(i as u64, conn);
            i as u64
        };
        run.origin.insert(i, id);
        let conn = run.conns.get_mut(&id).unwrap();
        if queue {
            if let Some(h) = conn.head(SILENT).await {
                run.errs
                    .push(format!("{ctx}: expected to wait in the queue, got {h:?}"));
            }
            continue;
        }
        let Some(head) = conn.head(ARRIVE).await else {
            run.errs.push(format!("{ctx}: no response"));
            continue;
        };
        let head = common::Head {
            status: head.status,
            headers: head.headers.clone(),
        };
        let sleeps = run.clock.sleeps.lock().unwrap()[sleeps_before..].to_vec();
        if sleeps.len() > 1 {
            run.errs
                .push(format!("{ctx}: slept {} times", sleeps.len()));
        }
        run.compare(i, &head, expect, sleeps.first().copied());
    }
    server.abort();
    (run.errs, run.parser_400)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_vectors_through_the_layer() {
    let vectors = vector::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors"));
    let mut errs = Vec::new();
    let mut parser_400 = 0;
    let mut skipped = Vec::new();
    for v in &vectors {
        if v.steps.iter().any(|s| s.select.is_some()) {
            skipped.push(v.name.clone());
            continue;
        }
        let (e, p) = run_vector(v).await;
        errs.extend(e);
        parser_400 += p;
    }
    for e in &errs {
        eprintln!("MISMATCH {e}");
    }
    eprintln!(
        "{} vectors through the layer; {parser_400} bad targets refused by the HTTP parser",
        vectors.len() - skipped.len()
    );
    eprintln!(
        "skipped (the layer selects no limits of its own): {}",
        skipped.join(", ")
    );
    assert!(errs.is_empty(), "{} mismatches (listed above)", errs.len());
}
