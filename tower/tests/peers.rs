//! Requests without an IP peer (a service on a real unix-domain socket, no `ConnectInfo`) are
//! evaluated for the local client, with `"unix:"` trust for a local proxy's X-Forwarded-For;
//! and `failure_mode` decides what happens when weir cannot decide (a panicking clock forces
//! the evaluation to fail).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::WeirLayer;

/// Two requests per client (burst 1), keyed by client address.
fn per_ip(trusted: &str) -> String {
    format!(
        r#"
trusted_proxies = [{trusted}]
[zones.z]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[[limit]]
class = "*"
zone = "z"
name = "per-ip"
burst = 1
nodelay = true
"#
    )
}

fn engine(policy: &str) -> Arc<Engine> {
    Arc::new(Engine::new(CompiledPolicy::parse(policy, Some("test.toml")).unwrap()).unwrap())
}

/// Serves the layer on a fresh unix socket (plain `axum::serve`: no peer address at all).
async fn serve_unix(layer: WeirLayer) -> (tempdir::Dir, std::path::PathBuf) {
    let dir = tempdir::Dir::new();
    let path = dir.0.join("s.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (dir, path)
}

/// One HTTP/1.1 request over the socket; its status.
async fn status(path: &std::path::Path, xff: Option<&str>) -> u16 {
    let mut s = UnixStream::connect(path).await.unwrap();
    let xff = xff.map_or(String::new(), |a| format!("X-Forwarded-For: {a}\r\n"));
    let req = format!("GET / HTTP/1.1\r\nHost: local\r\n{xff}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).await.unwrap();
    let line = String::from_utf8_lossy(&resp);
    line.split(' ').nth(1).unwrap().parse().unwrap()
}

mod tempdir {
    /// A directory under the system temp dir, removed on drop.
    pub struct Dir(pub std::path::PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("weir-tower-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[tokio::test]
async fn unix_peer_untrusted_is_one_local_client() {
    let (_dir, path) = serve_unix(WeirLayer::new(engine(&per_ip("\"10.0.0.0/8\"")))).await;
    // The header is ignored: every request is the local client (burst 1: two pass).
    let got = [
        status(&path, Some("203.0.113.9")).await,
        status(&path, Some("203.0.113.10")).await,
        status(&path, Some("203.0.113.11")).await,
        status(&path, None).await,
    ];
    assert_eq!(got, [200, 200, 429, 429]);
}

#[tokio::test]
async fn unix_peer_trusted_forwards_the_client_address() {
    let (_dir, path) = serve_unix(WeirLayer::new(engine(&per_ip("\"unix:\"")))).await;
    let got = [
        status(&path, Some("203.0.113.9")).await,
        status(&path, Some("203.0.113.9")).await,
        status(&path, Some("203.0.113.9")).await,
        // Another forwarded client, and the local client itself: buckets of their own.
        status(&path, Some("203.0.113.10")).await,
        status(&path, None).await,
        status(&path, None).await,
        status(&path, None).await,
    ];
    assert_eq!(got, [200, 200, 429, 200, 200, 200, 429]);
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

async fn failure_mode(mode: &str) -> [u16; 3] {
    let policy = format!("failure_mode = \"{mode}\"\n{}", per_ip("\"10.0.0.0/8\""));
    let armed = Arc::new(AtomicBool::new(false));
    let layer = WeirLayer::new(engine(&policy)).with_clock(failing_clock(armed.clone()));
    let (_dir, path) = serve_unix(layer).await;
    let first = status(&path, None).await;
    armed.store(true, Ordering::SeqCst);
    let failed = status(&path, None).await;
    // The failed evaluation charged nothing: the burst still has room for one.
    [first, failed, status(&path, None).await]
}

#[tokio::test]
async fn failure_mode_closed_answers_503() {
    assert_eq!(failure_mode("closed").await, [200, 503, 200]);
}

#[tokio::test]
async fn failure_mode_open_lets_the_request_through() {
    assert_eq!(failure_mode("open").await, [200, 200, 200]);
}
