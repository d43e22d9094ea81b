//! The access-log fields of the layer's [`Verdict`] (`expose_verdict`): the engine's action
//! word, the deciding limit and its key as the engine renders it, on the request (for the
//! handler) and on the response (for an outer logging layer); passes name no limit and
//! render no key.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use tower::{Layer, ServiceExt};
use weir::policy::{CompiledPolicy, Engine};
use weir_tower::{LogAction, PeerOverride, Verdict, WeirLayer};

const POLICY: &str = include_str!("../../tests/common/access_log_policy.toml");

#[tokio::test]
async fn verdict_names_the_deciding_limit_and_its_key() {
    let engine =
        Arc::new(Engine::new(CompiledPolicy::parse(POLICY, Some("t.toml")).unwrap()).unwrap());
    // The handler sees the same fields on its request.
    let inner = tower::service_fn(|req: http::Request<()>| async move {
        let v = req
            .extensions()
            .get::<Verdict>()
            .cloned()
            .expect("request verdict");
        let body = format!("{} {:?}", v.log_action.as_str(), v.key);
        Ok::<_, Infallible>(http::Response::new(Full::new(bytes::Bytes::from(body))))
    });
    let svc = WeirLayer::new(engine.clone())
        .expose_verdict(true)
        .layer(inner);
    let cases = [
        ("/p/1", "192.0.2.7", 200, LogAction::Pass, None, None),
        (
            "/p/2",
            "192.0.2.200",
            429,
            LogAction::Reject,
            Some("per-net"),
            Some("192.0.2.0/24"),
        ),
        ("/p/3", "192.0.3.1", 200, LogAction::Pass, None, None),
        ("/health", "192.0.2.7", 200, LogAction::Exempt, None, None),
        ("/dry/a", "198.51.100.1", 200, LogAction::Pass, None, None),
        (
            "/dry/a",
            "198.51.100.1",
            200,
            LogAction::DryRunReject,
            Some("trial"),
            Some("ip=198.51.100.1 path=/dry/a"),
        ),
    ];
    for (target, peer, status, action, limit, key) in cases {
        let mut req = http::Request::get(target).body(()).unwrap();
        req.extensions_mut()
            .insert(PeerOverride(peer.parse().unwrap()));
        let resp = svc.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), status, "{target} from {peer}");
        let v = resp
            .extensions()
            .get::<Verdict>()
            .expect("response verdict");
        let name = v.log_limit.map(|l| engine.limit_name(usize::from(l)));
        assert_eq!(
            (v.log_action, name, v.key.as_deref()),
            (action, limit, key),
            "{target} from {peer}"
        );
    }
    assert_eq!(
        LogAction::parse("dry-run-reject"),
        Some(LogAction::DryRunReject)
    );
}
