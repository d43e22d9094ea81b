//! The layer logs each ban once (`tracing`, at the limit's `log_level`), with the key as the
//! JSON status names it; the requests refused during the ban log no further ban line.

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::Request;
use tower::ServiceExt;
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::WeirLayer;

const POLICY: &str = r#"
[zones.z]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[[limit]]
name = "login"
class = "*"
zone = "z"
key = "global"
log_level = "warn"
ban = { after = 2, within = "1m", duration = "10m" }
"#;

/// A log sink the subscriber writes every formatted line into.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_ban_is_logged_once_at_the_limit_level() {
    let lines = Lines::default();
    let sink = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let policy = CompiledPolicy::parse(POLICY, Some("test.toml")).unwrap();
    let engine = Arc::new(Engine::new(policy).unwrap());
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(WeirLayer::new(engine));
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let req = Request::get("/").body(Body::empty()).unwrap();
        statuses.push(app.clone().oneshot(req).await.unwrap().status().as_u16());
    }
    // 1r/m, no burst: one passes; the second rejection starts the ban, the rest are banned.
    assert_eq!(statuses, [200, 429, 429, 429, 429]);

    let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let bans: Vec<&str> = text.lines().filter(|l| l.contains("banning key")).collect();
    assert_eq!(bans.len(), 1, "one ban line:\n{text}");
    assert!(
        bans[0].contains(" WARN "),
        "at the limit's log_level: {}",
        bans[0]
    );
    assert!(
        bans[0].contains(r#"banning key "global" for 600s by weir limit "login""#),
        "{}",
        bans[0]
    );
    assert!(bans[0].contains("limit=\"login\"") || bans[0].contains("limit=login"));
}
