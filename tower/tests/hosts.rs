//! The host conformance scenarios (tests/hosts/*.toml, see its README) through the layer on a
//! real axum server: over TCP with `ConnectInfo`, and over a unix socket without a peer address
//! (the policy's local client), `StatusService` at `/status` for key steps. A step's forced
//! failure is a clock that panics once; the
//! metrics are the engine's Prometheus text (`Engine::render_prometheus`, what an application
//! serves), checked by the strict parser `promcheck` when `WEIR_PROMCHECK` names it (`make
//! unit` does).

mod common;
#[path = "../../tests/common/promcheck.rs"]
mod promcheck;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::Response;
use axum::Router;
use common::{held_response, serve, Conn, End, Held};
use promcheck::promcheck;
use tokio::net::UnixListener;
use toml::{Table, Value};
use weir::policy::metrics::Format;
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::{StatusService, WeirLayer};

const HOST: &str = "tower";
const MIN_SCENARIOS: usize = 8;
/// How long a response may take; how long a queued request must stay unanswered.
const ARRIVE: Duration = Duration::from_secs(10);
const QUEUED: Duration = Duration::from_millis(100);

fn scenarios() -> Vec<(String, Table)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/hosts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= MIN_SCENARIOS,
        "only {} scenarios in {}",
        files.len(),
        dir.display()
    );
    files
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let sc = text
                .parse::<Table>()
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, sc)
        })
        .collect()
}

/// Why this host skips `t` (a scenario or a step), if it does.
fn skip(t: &Table) -> Option<&str> {
    t.get("skip")?.get(HOST)?.as_str()
}

/// `/` holds the body of a request carrying `x-test-step` open until the test ends it.
async fn app_handler(State(held): State<Arc<Held>>, req: Request) -> Response {
    match common::step_id(&req) {
        Some(id) => held_response(&held, id),
        None => Response::new("ok".into()),
    }
}

/// A clock that panics once when armed: the evaluation it is read for fails.
fn failing_clock(armed: Arc<AtomicBool>) -> impl Fn() -> u64 + Send + Sync + 'static {
    move || {
        if armed.swap(false, Ordering::SeqCst) {
            panic!("clock failure (expected by the test)");
        }
        weir::clock::monotonic_ns()
    }
}

struct Host {
    tcp: SocketAddr,
    unix: PathBuf,
    dir: PathBuf,
    engine: Arc<Engine>,
    armed: Arc<AtomicBool>,
    held: Arc<Held>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn start(name: &str, policy: &str) -> Host {
    let compiled = CompiledPolicy::parse(policy, Some(&format!("{name}.toml"))).unwrap();
    let engine = Arc::new(Engine::new(compiled).unwrap());
    let armed = Arc::new(AtomicBool::new(false));
    let held = Arc::new(Held::default());
    let layer = WeirLayer::new(engine.clone()).with_clock(failing_clock(armed.clone()));
    let app = Router::new()
        .fallback(app_handler)
        .layer(layer)
        // Key steps change keys: the status service with writes enabled.
        .route_service("/status", StatusService::new(engine.clone()).write(true))
        .with_state(held.clone());
    let tcp = serve(app.clone()).await.0;
    let dir = std::env::temp_dir().join(format!("weir-hosts-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let unix = dir.join("s.sock");
    let listener = UnixListener::bind(&unix).unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Host {
        tcp,
        unix,
        dir,
        engine,
        armed,
        held,
    }
}

fn check_response(at: &str, conn: &Conn, expect: &Table) {
    let head = conn.head.as_ref().unwrap();
    let want = expect["status"].as_integer().unwrap();
    assert_eq!(i64::from(head.status), want, "{at}: status");
    if let Some(headers) = expect.get("headers").and_then(Value::as_table) {
        for (k, v) in headers {
            assert_eq!(head.get(k), v.as_str(), "{at}: {k}");
        }
    }
    for k in expect
        .get("absent")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let k = k.as_str().unwrap();
        assert_eq!(head.get(k), None, "{at}: unexpected {k}");
    }
}

/// `weir_limit_requests_total` by (limit, verdict), from text promcheck accepted if it ran.
fn limit_counts(engine: &Engine) -> HashMap<(String, String), u64> {
    let mut text = String::new();
    engine.render_prometheus(&mut text).unwrap();
    promcheck(&text);
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("weir_limit_requests_total{limit=\"") else {
            continue;
        };
        let (limit, rest) = rest.split_once("\",verdict=\"").unwrap();
        let (verdict, value) = rest.split_once("\"} ").unwrap();
        out.insert((limit.into(), verdict.into()), value.parse().unwrap());
    }
    out
}

/// The keys of a `status` step's list, sorted.
fn sorted_keys<'a>(list: impl IntoIterator<Item = &'a serde_json::Value>) -> Vec<String> {
    let mut keys: Vec<String> = list
        .into_iter()
        .map(|v| v["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    keys
}

/// A `status` step: the JSON status's top keys (last minute) and bans of one limit, as sets.
fn check_status(at: &str, engine: &Engine, want: &Table) {
    let status: serde_json::Value =
        serde_json::from_str(&engine.snapshot().render(Format::Json)).unwrap();
    let name = want["limit"].as_str().unwrap();
    let limit = status["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("{at}: no limit {name} in the status"));
    let expected = |field: &str| {
        want.get(field).and_then(Value::as_array).map(|list| {
            let mut keys: Vec<String> = list
                .iter()
                .map(|k| k.as_str().unwrap().to_owned())
                .collect();
            keys.sort();
            keys
        })
    };
    if let Some(keys) = expected("top_keys") {
        let got = sorted_keys(limit["last_1m"]["keys"].as_array().unwrap());
        assert_eq!(got, keys, "{at}: top keys of {name}");
    }
    if let Some(keys) = expected("bans") {
        let got = sorted_keys(limit["bans"].as_array().into_iter().flatten());
        assert_eq!(got, keys, "{at}: bans of {name}");
    }
}

/// A key step's request to the status service: (status, JSON answer).
async fn key_op(addr: SocketAddr, key: &Table) -> (u16, serde_json::Value) {
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    let field = |k: &str| key.get(k).and_then(Value::as_str);
    let action = field("action").unwrap_or("inspect");
    let mut target = format!(
        "/status?limit={}&key={}",
        enc(field("limit").unwrap()),
        enc(field("key").unwrap())
    );
    let method = if action == "inspect" { "GET" } else { "POST" };
    let mut headers = vec![("content-length", "0")];
    if method == "POST" {
        target += &format!("&action={action}");
        headers.push(("weir-key-action", action));
    }
    let mut conn = Conn::send(addr, method, &target, &headers).await;
    let body = conn.body(ARRIVE).await.expect("a response");
    let status = conn.head.as_ref().unwrap().status;
    (status, serde_json::from_slice(&body).unwrap())
}

/// The status, then each expected field of the answer: exact, or at least `NAME_min`.
fn check_key(at: &str, (status, answer): (u16, serde_json::Value), expect: &Table) {
    assert_eq!(
        i64::from(status),
        expect["status"].as_integer().unwrap(),
        "{at}: {answer}"
    );
    if status != 200 {
        assert!(
            answer["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{at}: {answer}"
        );
    }
    for (k, want) in expect.iter().filter(|(k, _)| *k != "status") {
        if let Some(field) = k.strip_suffix("_min") {
            let got = answer[field].as_i64();
            assert!(got >= want.as_integer(), "{at}: {field} {got:?} < {want}");
            continue;
        }
        let want = serde_json::to_value(want).unwrap();
        assert_eq!(answer[k.as_str()], want, "{at}: {k}");
    }
}

async fn run(name: &str, sc: &Table) {
    let host = start(name, sc["policy"].as_str().unwrap()).await;
    let mut held: HashMap<String, (u64, Conn)> = HashMap::new();
    let empty = Table::new();
    for (i, step) in sc["step"].as_array().unwrap().iter().enumerate() {
        let step = step.as_table().unwrap();
        let at = format!("{name} step {i}");
        if let Some(why) = skip(step) {
            println!("{at} skipped: {why}");
            continue;
        }
        let expect = step
            .get("expect")
            .and_then(Value::as_table)
            .unwrap_or(&empty);
        if let Some(target) = step.get("request").and_then(Value::as_str) {
            let id = (i as u64).to_string();
            let mut headers: Vec<(&str, &str)> = step
                .get("headers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|h| (h[0].as_str().unwrap(), h[1].as_str().unwrap()))
                .collect();
            let hold = step.get("hold").and_then(Value::as_str);
            if hold.is_some() {
                headers.push(("x-test-step", &id));
            }
            if step.get("fail").and_then(Value::as_bool) == Some(true) {
                host.armed.store(true, Ordering::SeqCst);
            }
            let sent = std::time::Instant::now();
            let mut conn = match step.get("via").and_then(Value::as_str) {
                Some("unix") => Conn::send_unix(&host.unix, "GET", target, &headers).await,
                _ => Conn::send(host.tcp, "GET", target, &headers).await,
            };
            let Some(hold) = hold else {
                conn.body(ARRIVE).await.expect("a response");
                check_response(&at, &conn, expect);
                let min = expect
                    .get("min_ms")
                    .and_then(Value::as_integer)
                    .unwrap_or(0);
                let took = sent.elapsed();
                assert!(
                    took.as_millis() >= min as u128,
                    "{at}: answered after {took:?}"
                );
                continue;
            };
            // A held request that reaches the handler answers 200 at once (body held).
            if expect.get("queued").and_then(Value::as_bool) == Some(true) {
                let got = conn.head(QUEUED).await.map(|h| h.status);
                assert_eq!(got, None, "{at}: expected queued");
            } else {
                assert!(conn.head(ARRIVE).await.is_some(), "{at}: no answer");
                check_response(&at, &conn, expect);
            }
            held.insert(hold.into(), (i as u64, conn));
        } else if let Some(hold) = step.get("finish").and_then(Value::as_str) {
            let (id, mut conn) = held.remove(hold).unwrap();
            let status = conn.head(ARRIVE).await.map(|h| h.status);
            if status == Some(200) {
                host.held.end(id, End::Finish);
            }
            conn.body(ARRIVE).await.expect("a response");
            check_response(&at, &conn, expect);
        } else if let Some(hold) = step.get("leave").and_then(Value::as_str) {
            drop(held.remove(hold).unwrap());
            let ms = step
                .get("after_ms")
                .and_then(Value::as_integer)
                .unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms as u64)).await;
        } else if let Some(metrics) = step.get("metrics").and_then(Value::as_table) {
            let counts = limit_counts(&host.engine);
            for (limit, verdicts) in metrics {
                for (verdict, want) in verdicts.as_table().unwrap() {
                    let got = counts.get(&(limit.clone(), verdict.clone())).copied();
                    assert_eq!(
                        got.map(|n| n as i64),
                        want.as_integer(),
                        "{at}: weir_limit_requests_total{{limit=\"{limit}\",verdict=\"{verdict}\"}}"
                    );
                }
            }
        } else if let Some(want) = step.get("status").and_then(Value::as_table) {
            check_status(&at, &host.engine, want);
        } else if let Some(key) = step.get("key").and_then(Value::as_table) {
            check_key(&at, key_op(host.tcp, key).await, expect);
        } else {
            panic!("{at}: the tower layer cannot run this step (give it a skip): {step:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_scenarios() {
    let (mut ran, mut skipped, mut failed) = (0, Vec::new(), Vec::new());
    for (name, sc) in scenarios() {
        if let Some(why) = skip(&sc) {
            skipped.push(format!("{name} ({why})"));
            continue;
        }
        // Its own task: a failed assertion fails this scenario, the others still run.
        let task = tokio::spawn({
            let name = name.clone();
            async move { run(&name, &sc).await }
        });
        match task.await {
            Ok(()) => ran += 1,
            Err(_) => failed.push(name),
        }
    }
    assert!(
        failed.is_empty(),
        "scenarios failed (see above): {failed:?}"
    );
    println!("{ran} scenarios passed; skipped: {}", skipped.join("; "));
}
