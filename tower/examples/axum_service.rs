//! An axum service behind the weir layer.
//!
//! ```sh
//! cargo run -p weir-tower --example axum_service -- [POLICY] [ADDR] [ADMIN_ADDR]
//! #   POLICY defaults to tower/examples/axum_service.toml, ADDR to 127.0.0.1:3000,
//! #   ADMIN_ADDR (key changes) to 127.0.0.1:3001
//! curl -i http://127.0.0.1:3000/            # RateLimit fields; 429 after a burst of 21
//! curl -i http://127.0.0.1:3000/healthz     # exempt
//! curl -N http://127.0.0.1:3000/download    # 3 s stream; two at once, four more queue (5 s),
//!                                           # the rest get 503
//! curl http://127.0.0.1:3000/metrics        # the counters (Prometheus text; not limited)
//! curl http://127.0.0.1:3000/metrics?format=json
//! curl 'http://127.0.0.1:3000/metrics?limit=per-ip&key=127.0.0.1'     # inspect one key
//! # Key changes: only on the admin listener (loopback), with the Weir-Key-Action header.
//! curl -X POST -H 'Weir-Key-Action: reset' \
//!     'http://127.0.0.1:3001/status?limit=per-ip&key=127.0.0.1&action=reset'
//! ```
//!
//! The public `/metrics` is read-only: a POST reset there is refused (403), so a client
//! cannot reset its own key. Each change on the admin listener logs an audit line (the
//! `tracing` subscriber below prints it).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::{Extension, Router};
use bytes::Bytes;
use weir::policy::{load_policy, Engine};
use weir_tower::{StatusService, Verdict, WeirLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let policy_path = args.next().unwrap_or_else(|| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/axum_service.toml").into()
    });
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());
    let admin_addr = args.next().unwrap_or_else(|| "127.0.0.1:3001".into());
    // Log lines (rejections, failures, key changes' audit lines) to stderr.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();

    let engine = Arc::new(Engine::new(load_policy(policy_path.as_ref())?)?);
    let app = Router::new()
        .route("/", get(index))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/download", get(download))
        // Everything above is limited; the Verdict extension is for the handlers' logging.
        .layer(WeirLayer::new(engine.clone()).expose_verdict(true))
        // Added after the layer, so not limited: the counters (docs/METRICS.md), read-only.
        .route_service("/metrics", StatusService::new(engine.clone()));

    // Key changes (reset, unban) on a listener of their own, bound to loopback: never on the
    // public router, where every client (or a reverse proxy on its behalf) reaches them.
    let admin = Router::new().route_service("/status", StatusService::new(engine).write(true));
    let admin_listener = tokio::net::TcpListener::bind(&admin_addr).await?;
    println!(
        "key changes on http://{}/status",
        admin_listener.local_addr()?
    );
    tokio::spawn(async move {
        axum::serve(
            admin_listener,
            admin.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // ConnectInfo<SocketAddr>: the peer address the policy's per-IP keys use.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

async fn index(
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Extension(v): Extension<Verdict>,
) -> String {
    format!("hello {}; weir said {:?}\n", peer.ip(), v.action)
}

/// A slow streaming body: the download's concurrency permit is held until its last byte.
async fn download() -> Body {
    let chunks = futures_util::stream::unfold(0u32, |i| async move {
        if i == 6 {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        Some((
            Ok::<_, std::io::Error>(Bytes::from(format!("chunk {i}\n"))),
            i + 1,
        ))
    });
    Body::from_stream(chunks)
}
