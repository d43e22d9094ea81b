//! Key operations on `StatusService` (a real axum server on 127.0.0.1): a rejected client's
//! key inspects as rejected, a POST reset lets it pass again, a ban is lifted and leaves the
//! JSON status, each change logs exactly one audit line (tracing, with limit, key and client
//! fields), and bad requests are refused with their reason. Changes need
//! `StatusService::write(true)`: the default service, as the axum example mounts it on its
//! public routes, refuses a client's reset of its own key (403) and it stays limited; a
//! writing service refuses a cross-site form POST.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use common::{serve, Conn};
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::{StatusService, WeirLayer};

const POLICY: &str = "[zones.ip]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
    [[limit]]\nname = \"per-ip\"\nclass = \"*\"\nzone = \"ip\"\nlog_level = \"warn\"\n\
    ban = { after = 3, within = \"1m\", duration = \"10m\" }\n";
const WAIT: Duration = Duration::from_secs(10);

/// Every event logged, as `LEVEL message field=value...`.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        if f.name() == "message" {
            self.0.insert_str(0, &format!("{v:?}"));
        } else {
            self.0 += &format!(" {}={v:?}", f.name());
        }
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        if f.name() == "message" {
            self.0.insert_str(0, v);
        } else {
            self.0 += &format!(" {}={v}", f.name());
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut f = Fields(String::new());
        e.record(&mut f);
        LINES
            .lock()
            .unwrap()
            .push(format!("{} {}", e.metadata().level(), f.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

async fn ask(addr: std::net::SocketAddr, method: &str, target: &str) -> (u16, Value) {
    // A change names its action in the Weir-Key-Action header, as `weir key` sends it.
    let action = ["reset", "unban"]
        .into_iter()
        .find(|a| target.ends_with(&format!("action={a}")));
    let mut headers = vec![("content-length", "0")];
    if let Some(a) = action {
        headers.push(("weir-key-action", a));
    }
    ask_with(addr, method, target, &headers).await
}

async fn ask_with(
    addr: std::net::SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut c = Conn::send(addr, method, target, headers).await;
    let status = c.head(WAIT).await.expect("no response head").status;
    let body = c.body(WAIT).await.expect("no response body");
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// The status of a GET / (the limited route).
async fn get_root(addr: std::net::SocketAddr) -> u16 {
    Conn::send(addr, "GET", "/", &[])
        .await
        .head(WAIT)
        .await
        .unwrap()
        .status
}

/// The captured lines with `word` of limit per-ip (the other test's limit is own-key).
fn audit_lines(word: &str) -> Vec<String> {
    let lines = LINES.lock().unwrap();
    lines
        .iter()
        .filter(|l| l.contains(word) && l.contains("limit=per-ip"))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reset_and_unban_one_key() {
    tracing::subscriber::set_global_default(Capture).unwrap();
    let engine = Arc::new(Engine::new(CompiledPolicy::parse(POLICY, None).unwrap()).unwrap());
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(WeirLayer::new(engine.clone()))
        .route_service("/status", StatusService::new(engine).write(true));
    let (addr, _server) = serve(app).await;
    let hit = || get_root(addr);
    let key = "/status?limit=per-ip&key=127.0.0.1";

    assert_eq!((hit().await, hit().await), (200, 429));
    let (st, j) = ask(addr, "GET", key).await;
    assert_eq!(
        (st, j["version"].as_u64(), j["key"].as_str()),
        (200, Some(1), Some("127.0.0.1")),
        "{j}"
    );
    assert_eq!(j["remaining"], 0, "{j}");
    assert!(j["retry_after_s"].as_u64().unwrap() > 0, "{j}");
    let (st, j) = ask(addr, "POST", &format!("{key}&action=reset")).await;
    assert_eq!(
        (st, j["changed"].as_bool(), j["retry_after_s"].as_u64()),
        (200, Some(true), Some(0)),
        "{j}"
    );
    assert_eq!(hit().await, 200, "passes after the reset");
    assert_eq!(
        audit_lines("resetting key"),
        ["WARN resetting key \"127.0.0.1\" of weir limit \"per-ip\" limit=per-ip key=127.0.0.1 client=127.0.0.1"]
    );

    // Three more rejections ban the key.
    for _ in 0..3 {
        assert_eq!(hit().await, 429);
    }
    let (_, j) = ask(addr, "GET", key).await;
    assert_eq!(
        (j["banned"].as_bool(), j["ban_left_s"].as_u64()),
        (Some(true), Some(600)),
        "{j}"
    );
    let (_, status) = ask(addr, "GET", "/status?format=json").await;
    assert_eq!(status["limits"][0]["bans"][0]["key"], "127.0.0.1");
    let (st, j) = ask(addr, "POST", &format!("{key}&action=unban")).await;
    assert_eq!(
        (st, j["banned"].as_bool(), j["action"].as_str()),
        (200, Some(false), Some("unban")),
        "{j}"
    );
    let (_, status) = ask(addr, "GET", "/status?format=json").await;
    assert_eq!(
        status["limits"][0]["bans"].as_array().map(Vec::len),
        Some(0),
        "{status}"
    );
    assert_eq!(audit_lines("lifting ban").len(), 1);
    ask(addr, "POST", &format!("{key}&action=reset")).await;
    assert_eq!(hit().await, 200, "passes after unban and reset");

    for (method, target, want) in [
        ("GET", "/status?limit=nope&key=1", 404),
        ("GET", "/status?limit=per-ip&key=not-an-ip", 400),
        (
            "GET",
            "/status?limit=per-ip&key=127.0.0.1&action=reset",
            405,
        ),
        ("POST", "/status?limit=per-ip&key=127.0.0.1", 400),
        ("PUT", "/status?limit=per-ip&key=127.0.0.1", 405),
    ] {
        let (st, j) = ask(addr, method, target).await;
        assert_eq!(st, want, "{method} {target}: {j}");
        assert!(j["error"].as_str().is_some_and(|e| !e.is_empty()), "{j}");
    }
    // The status itself still refuses POST.
    assert_eq!(ask(addr, "POST", "/status?format=json").await.0, 405);
    assert_eq!(
        audit_lines("resetting key").len(),
        2,
        "refused requests log nothing"
    );
}

/// The read-only default on a public route (as tower/examples/axum_service.rs mounts it): a
/// rejected client's POST reset and unban of its own key are refused with 403 and change
/// nothing, while inspection works; a writing service refuses a browser's cross-site form
/// POST from the same client, and accepts the same change sent on purpose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_off_by_default_and_refused_cross_site() {
    let policy = POLICY.replace("per-ip", "own-key");
    let engine = Arc::new(Engine::new(CompiledPolicy::parse(&policy, None).unwrap()).unwrap());
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(WeirLayer::new(engine.clone()))
        .route_service("/metrics", StatusService::new(engine.clone()))
        .route_service("/admin", StatusService::new(engine).write(true));
    let (addr, _server) = serve(app).await;
    let hit = || get_root(addr);
    let key = "limit=own-key&key=127.0.0.1";
    assert_eq!((hit().await, hit().await), (200, 429));
    for action in ["reset", "unban"] {
        let (st, j) = ask(addr, "POST", &format!("/metrics?{key}&action={action}")).await;
        assert_eq!(st, 403, "{j}");
        assert!(j["error"].as_str().unwrap().contains("write(true)"), "{j}");
    }
    // Inspected, not hit: another rejection would count toward the ban.
    let unchanged = || async {
        let (st, j) = ask(addr, "GET", &format!("/metrics?{key}")).await;
        (st, j["remaining"].as_u64(), j["banned"].as_bool()) == (200, Some(0), Some(false))
    };
    assert!(unchanged().await, "the refused reset changed nothing");

    let target = format!("/admin?{key}&action=reset");
    let form = [
        ("content-length", "0"),
        ("origin", "http://evil.example"),
        ("sec-fetch-site", "cross-site"),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    let (st, j) = ask_with(addr, "POST", &target, &form).await;
    assert_eq!(st, 403, "{j}");
    assert!(unchanged().await, "the cross-site reset changed nothing");
    let (st, j) = ask_with(addr, "POST", &target, &[("content-length", "0")]).await;
    assert_eq!(st, 403, "without Weir-Key-Action: {j}");
    let (st, j) = ask(addr, "POST", &target).await;
    assert_eq!((st, j["changed"].as_bool()), (200, Some(true)), "{j}");
    assert_eq!(hit().await, 200, "passes after the reset");
}
