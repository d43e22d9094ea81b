//! `charge_on_status` through the layer: the inner service's response status charges the
//! limit when the response is produced; 200s and inner-service errors charge nothing.

use std::sync::Arc;

use http_body_util::Full;
use tower::{Layer, ServiceExt};
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::WeirLayer;

const FAILURES: &str = r#"
[zones.f]
size = "64k"
algorithm = "sliding"
events = 2
window = "1h"
[[limit]]
class = "*"
zone = "f"
name = "failures"
key = "global"
charge_on_status = [401]
"#;

#[tokio::test]
async fn only_listed_statuses_are_charged_and_errors_never() {
    let engine = Arc::new(Engine::new(CompiledPolicy::parse(FAILURES, None).unwrap()).unwrap());
    // /login answers 401, /err fails, anything else answers 200.
    let svc = WeirLayer::new(engine.clone()).layer(tower::service_fn(
        |req: http::Request<()>| async move {
            let status = match req.uri().path() {
                "/login" => 401,
                "/err" => return Err("inner failed"),
                _ => 200,
            };
            Ok(http::Response::builder()
                .status(status)
                .body(Full::new(bytes::Bytes::new()))
                .unwrap())
        },
    ));
    let status = |path: &'static str| {
        let svc = svc.clone();
        async move {
            let req = http::Request::get(path).body(()).unwrap();
            svc.oneshot(req).await.map(|r| r.status().as_u16())
        }
    };
    for _ in 0..5 {
        assert_eq!(status("/ok").await, Ok(200), "200s never count");
        assert_eq!(
            status("/err").await,
            Err("inner failed"),
            "errors never count"
        );
    }
    assert_eq!(status("/login").await, Ok(401));
    assert_eq!(status("/login").await, Ok(401));
    // Two 401s: the key is refused, whatever it asks for.
    assert_eq!(status("/ok").await, Ok(429));
    assert_eq!(status("/login").await, Ok(429));
    let c = engine.counters(0);
    assert_eq!((c.passed, c.rejected), (12, 2));
}
