//! `StatusService` on a real axum server (127.0.0.1): after known traffic through the layer,
//! the Prometheus text and the JSON status report the same counts; unknown formats and other
//! methods are refused.

mod common;
#[path = "../../tests/common/promcheck.rs"]
mod promcheck;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use common::{serve, Conn};
use promcheck::promcheck;
use serde_json::Value;
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::{StatusService, WeirLayer};

const POLICY: &str = "[zones.ip]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
                      [[limit]]\nname = \"per-ip\"\nclass = \"*\"\nzone = \"ip\"\n";
const WAIT: Duration = Duration::from_secs(10);

/// (status, content type, body) of one request.
async fn get_status(
    addr: std::net::SocketAddr,
    method: &str,
    target: &str,
) -> (u16, String, String) {
    let mut c = Conn::send(addr, method, target, &[]).await;
    let head = c.head(WAIT).await.expect("no response head");
    let (status, ct) = (
        head.status,
        head.get("content-type").unwrap_or("").to_owned(),
    );
    let body = if method == "HEAD" {
        Vec::new()
    } else {
        c.body(WAIT).await.expect("no response body")
    };
    (status, ct, String::from_utf8(body).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_same_counts_as_prometheus_text_and_json() {
    let engine = Arc::new(Engine::new(CompiledPolicy::parse(POLICY, None).unwrap()).unwrap());
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(WeirLayer::new(engine.clone()))
        .route_service("/metrics", StatusService::new(engine));
    let (addr, _server) = serve(app).await;

    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(get_status(addr, "GET", "/").await.0);
    }
    assert_eq!(got, [200, 429, 429]);

    for target in ["/metrics", "/metrics?format=prometheus"] {
        let (status, ct, text) = get_status(addr, "GET", target).await;
        assert_eq!(
            (status, ct.as_str()),
            (200, "text/plain; version=0.0.4; charset=utf-8")
        );
        promcheck(&text);
        for line in [
            "weir_requests_total 3\n",
            "weir_limit_requests_total{limit=\"per-ip\",verdict=\"passed\"} 1\n",
            "weir_limit_requests_total{limit=\"per-ip\",verdict=\"rejected\"} 2\n",
            "weir_zone_occupancy{zone=\"ip\"} 1\n",
        ] {
            assert!(text.contains(line), "{target} lacks {line:?}:\n{text}");
        }
    }

    let (status, ct, body) = get_status(addr, "GET", "/metrics?x=1&format=json").await;
    assert_eq!((status, ct.as_str()), (200, "application/json"));
    let json: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["version"], 2);
    assert_eq!(json["engine"]["requests"], 3);
    let limit = &json["limits"][0];
    assert_eq!(limit["name"], "per-ip");
    assert_eq!(
        (&limit["passed"], &limit["rejected"]),
        (&Value::from(1), &Value::from(2))
    );
    assert_eq!(json["zones"][0]["name"], "ip");
    assert_eq!(json["zones"][0]["occupancy"], 1);
    assert_eq!(json["zones"][0]["rejected"], 2);

    let (status, ct, _) = get_status(addr, "HEAD", "/metrics?format=json").await;
    assert_eq!((status, ct.as_str()), (200, "application/json"));
    assert_eq!(get_status(addr, "GET", "/metrics?format=xml").await.0, 400);

    // The page: self-contained, with its policy and headers (the browser test runs it).
    let mut c = Conn::send(addr, "GET", "/metrics?format=html", &[]).await;
    let head = c.head(WAIT).await.unwrap();
    assert_eq!(
        (head.status, head.get("content-type")),
        (200, Some("text/html; charset=utf-8"))
    );
    let csp = head.get("content-security-policy").unwrap_or("");
    assert!(
        csp.starts_with("default-src 'none'; script-src 'sha256-")
            && csp.ends_with("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(head.get("x-frame-options"), Some("DENY"));
    assert_eq!(head.get("cache-control"), Some("no-store"));
    let page = String::from_utf8(c.body(WAIT).await.unwrap()).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>") && page.contains("?format=json"));
    let mut post = Conn::send(addr, "POST", "/metrics", &[("content-length", "0")]).await;
    let head = post.head(WAIT).await.unwrap();
    assert_eq!((head.status, head.get("allow")), (405, Some("GET, HEAD")));
}

/// Clients behind a trusted proxy (`X-Forwarded-For` from 127.0.0.1): the JSON status names
/// the client the limit rejected most and counts every rejection in its per-second history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_the_most_rejected_client_behind_a_proxy() {
    let policy = format!("trusted_proxies = [\"127.0.0.1\"]\n{POLICY}");
    let engine = Arc::new(Engine::new(CompiledPolicy::parse(&policy, None).unwrap()).unwrap());
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(WeirLayer::new(engine.clone()))
        .route_service("/metrics", StatusService::new(engine));
    let (addr, _server) = serve(app).await;
    let from = |ip: String| async move {
        let mut c = Conn::send(addr, "GET", "/", &[("x-forwarded-for", &ip)]).await;
        c.head(WAIT).await.expect("no response head").status
    };
    let mut rejected = 0;
    for _ in 0..12 {
        rejected += u32::from(from("203.0.113.9".into()).await == 429);
    }
    for i in 0..20 {
        for _ in 0..2 {
            rejected += u32::from(from(format!("198.51.100.{i}")).await == 429);
        }
    }
    assert_eq!(rejected, 11 + 20);

    let (status, _, body) = get_status(addr, "GET", "/metrics?format=json").await;
    assert_eq!(status, 200);
    let json: Value = serde_json::from_str(&body).unwrap();
    let limit = &json["limits"][0];
    let win = &limit["last_1m"];
    assert_eq!(win["clients"][0]["client"], "203.0.113.9", "{win:#}");
    assert_eq!(win["clients"][0]["rejected"], 11);
    assert_eq!(win["keys"][0]["key"], "203.0.113.9");
    assert_eq!(win["rejected"], 31);
    let per_second: u64 = (limit["per_second"]["rejected"].as_array().unwrap().iter())
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(per_second, 31);
    let (_, _, text) = get_status(addr, "GET", "/metrics").await;
    assert!(!text.contains("203.0.113.9"), "{text}");
}
