//! A reverse proxy behind the weir layer: one backend, pooled keep-alive connections to it.
//! The overload harness (benches/overload) runs it as its tower front end.
//!
//! ```sh
//! cargo build --release -p weir-tower --example overload_proxy
//! target/release/examples/overload_proxy POLICY LISTEN_ADDR BACKEND_ADDR
//! #   e.g. overload_proxy policy.toml 127.0.0.1:8080 127.0.0.1:9000
//! curl -s http://127.0.0.1:8080/_weir?format=json    # the JSON status (not limited)
//! ```
//!
//! Every other request is limited by the policy, then forwarded to `http://BACKEND_ADDR` with
//! its path, query, method, headers and body; the backend's answer goes back as it is. A
//! backend that cannot be reached is answered 502 and logged.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use weir::policy::{load_policy, Engine};
use weir_tower::{StatusService, WeirLayer};

#[derive(Clone)]
struct Upstream {
    client: Client<HttpConnector, Body>,
    authority: String,
}

async fn forward(State(up): State<Upstream>, mut req: Request) -> Response {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let uri: Uri = match format!("http://{}{}", up.authority, path).parse() {
        Ok(uri) => uri,
        Err(_) => return (StatusCode::BAD_REQUEST, "bad request target\n").into_response(),
    };
    *req.uri_mut() = uri;
    match up.client.request(req).await {
        Ok(resp) => resp.map(Body::new),
        Err(e) => {
            tracing::warn!("backend {}: {e}", up.authority);
            (StatusCode::BAD_GATEWAY, "backend unreachable\n").into_response()
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [policy, addr, backend] = args.as_slice() else {
        eprintln!("usage: overload_proxy POLICY LISTEN_ADDR BACKEND_ADDR");
        std::process::exit(2);
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();

    let engine = Arc::new(Engine::new(load_policy(policy.as_ref())?)?);
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build_http();
    let upstream = Upstream {
        client,
        authority: backend.clone(),
    };
    let app = Router::new()
        .fallback(forward)
        .with_state(upstream)
        // Everything above is limited; the status below is not.
        .layer(WeirLayer::new(engine.clone()))
        .route_service("/_weir", StatusService::new(engine));

    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!(
        "listening on http://{}, backend http://{backend}",
        listener.local_addr()?
    );
    // ConnectInfo<SocketAddr>: the peer address per-IP keys use.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
