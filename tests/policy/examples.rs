//! The example policies in examples/ load and give the verdicts their comments promise.

use std::net::IpAddr;

use weir::policy::engine::Outcome;
use weir::policy::{Action, CompiledPolicy, Engine, OwnedRequest};

const BASE_NS: u64 = 1_000_000_000_000;
const MS: u64 = 1_000_000;

fn engine(file: &str) -> Engine {
    let path = format!("{}/examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap();
    let policy = CompiledPolicy::parse(&src, Some(file)).unwrap_or_else(|e| panic!("{e}"));
    Engine::new(policy).unwrap()
}

fn req(method: &str, target: &str, peer: &str) -> OwnedRequest {
    OwnedRequest::new(method, target, peer.parse::<IpAddr>().unwrap())
}

fn eval(e: &Engine, r: &OwnedRequest, t_ms: u64) -> Outcome {
    e.evaluate(r, BASE_NS + t_ms * MS).unwrap()
}

fn limit(e: &Engine, o: &Outcome) -> Option<String> {
    o.limit.map(|i| e.limit_name(i as usize).to_string())
}

fn headers(e: &Engine, o: &Outcome) -> Vec<(String, String)> {
    let mut v = Vec::new();
    e.headers(o, |n, val| v.push((n.to_string(), val.to_string())));
    v
}

// ---------------------------------------------------------------- wiki

#[test]
fn wiki_distributed_crawler_hits_the_global_tools_limit() {
    let e = engine("wiki.toml");
    let mut passed = 0;
    for i in 0..50u32 {
        // 50 clients on 50 different networks, alternating the two URL shapes.
        let peer = format!("203.0.{i}.7");
        let target = if i % 2 == 0 {
            format!("/w/Special:WhatLinksHere/Page_{i}")
        } else {
            format!("/index.php?title=Special%3AWhatLinksHere%2FPage_{i}")
        };
        let o = eval(&e, &req("GET", &target, &peer), i as u64);
        match o.action {
            Action::Pass => passed += 1,
            Action::Reject => {
                assert_eq!(limit(&e, &o).as_deref(), Some("tools-global"));
                assert_eq!(o.status, 503);
            }
            a => panic!("unexpected {a:?}"),
        }
        // Health checks (counted, critical) and exempt requests pass while the global
        // limit rejects.
        let h = eval(&e, &req("GET", "/healthz", &peer), i as u64);
        assert_eq!((h.action, h.exempt), (Action::Pass, None));
        let css = eval(&e, &req("GET", "/app.css?v=3", &peer), i as u64);
        assert!(css.exempt.is_some());
    }
    // burst = 30: 31 back to back.
    assert_eq!(passed, 31);
    // Ordinary pages from the same clients are unaffected.
    let o = eval(&e, &req("GET", "/wiki/Main_Page", "203.0.1.7"), 60);
    assert_eq!(o.action, Action::Pass);
    // Logged-in editors have a tools budget of their own (not an exemption).
    let r =
        req("GET", "/w/Special:WhatLinksHere/X", "203.0.99.7").header("Cookie", "wiki_session=abc");
    let o = eval(&e, &r, 61);
    assert_eq!((o.action, o.exempt), (Action::Pass, None));
}

#[test]
fn wiki_tools_per_network_and_trusted_proxies() {
    let e = engine("wiki.toml");
    // One /24 gets 1 + 5 tool requests.
    for i in 0..6 {
        let o = eval(
            &e,
            &req("GET", "/index.php?diff=5&oldid=4", &format!("192.0.2.{i}")),
            0,
        );
        assert_eq!(o.action, Action::Pass, "request {i}");
    }
    let o = eval(
        &e,
        &req("GET", "/index.php?title=X&action=history", "192.0.2.200"),
        0,
    );
    assert_eq!(limit(&e, &o).as_deref(), Some("tools-per-net"));
    assert_eq!(o.status, 429);

    // Spoofed X-Forwarded-For from an untrusted peer: still one client (21 pass).
    for i in 0..21 {
        let r =
            req("GET", "/wiki/A", "198.51.100.1").header("X-Forwarded-For", &format!("1.1.1.{i}"));
        assert_eq!(eval(&e, &r, 1).action, Action::Pass);
    }
    let r = req("GET", "/wiki/A", "198.51.100.1").header("X-Forwarded-For", "1.1.1.99");
    assert_eq!(limit(&e, &eval(&e, &r, 1)).as_deref(), Some("per-ip"));
    // Through the load balancer, clients are told apart by X-Forwarded-For.
    let r = req("GET", "/wiki/A", "10.1.2.3").header("X-Forwarded-For", "198.51.100.2");
    assert_eq!(eval(&e, &r, 1).action, Action::Pass);
}

// ---------------------------------------------------------------- api

#[test]
fn api_per_key_and_anonymous_budgets() {
    let e = engine("api.toml");
    let keyed = |key: &str| req("GET", "/v1/items", "192.0.2.1").header("X-Api-Key", key);
    for _ in 0..41 {
        assert_eq!(eval(&e, &keyed("k1"), 0).action, Action::Pass);
    }
    let o = eval(&e, &keyed("k1"), 0);
    assert_eq!(o.action, Action::Reject);
    assert_eq!(limit(&e, &o).as_deref(), Some("per-key"));
    let h = headers(&e, &o);
    assert!(h.contains(&("RateLimit-Policy".into(), "\"per-key\";q=41;w=3".into())));
    assert!(h.iter().any(|(n, _)| n == "Retry-After"));
    // Another key, same address: its own budget.
    assert_eq!(eval(&e, &keyed("k2"), 0).action, Action::Pass);

    // Anonymous: 2 r/s per /24, burst 10.
    for i in 0..11 {
        let o = eval(&e, &req("GET", "/v1/items", &format!("198.51.100.{i}")), 0);
        assert_eq!(o.action, Action::Pass);
    }
    let o = eval(&e, &req("GET", "/v1/items", "198.51.100.77"), 0);
    assert_eq!(limit(&e, &o).as_deref(), Some("anonymous"));
    let h = headers(&e, &o);
    assert!(h.contains(&("RateLimit-Policy".into(), "\"anonymous\";q=11;w=6".into())));
    // Health checks are exempt.
    assert!(eval(&e, &req("GET", "/v1/health", "198.51.100.77"), 0)
        .exempt
        .is_some());
}

#[test]
fn api_export_concurrency_with_queue() {
    let e = engine("api.toml");
    let export = || req("POST", "/v1/reports/q3/export", "192.0.2.1").header("X-Api-Key", "k");
    let a = eval(&e, &export(), 0);
    let b = eval(&e, &export(), 0);
    assert_eq!((a.action, b.action), (Action::Pass, Action::Pass));
    let mut queued = Vec::new();
    for _ in 0..4 {
        let mut o = eval(&e, &export(), 0);
        assert_eq!(o.action, Action::Queue);
        queued.push(o.ticket.take().unwrap());
    }
    let full = eval(&e, &export(), 0);
    assert_eq!((full.action, full.status), (Action::Reject, 503));
    assert_eq!(limit(&e, &full).as_deref(), Some("exports"));
    // One export finishes: the first queued request gets its slot.
    e.release(a.permits, BASE_NS + 100 * MS);
    let t = queued.remove(0);
    let o = e.evaluate_queued(&export(), BASE_NS + 100 * MS, t).unwrap();
    assert_eq!(o.action, Action::Pass);
    assert!(!o.permits.is_empty());
    for t in queued {
        e.abandon(t, BASE_NS + 200 * MS);
    }
    e.release(b.permits, BASE_NS + 200 * MS);
    e.release(o.permits, BASE_NS + 200 * MS);
}

// ---------------------------------------------------------------- shop

#[test]
fn shop_login_and_checkout() {
    let e = engine("shop.toml");
    for _ in 0..4 {
        assert_eq!(
            eval(&e, &req("POST", "/login", "192.0.2.1"), 0).action,
            Action::Pass
        );
    }
    let o = eval(&e, &req("POST", "/login", "192.0.2.1"), 0);
    assert_eq!(limit(&e, &o).as_deref(), Some("login-ip"));
    // Showing the login form is browsing, not a login attempt.
    assert_eq!(
        eval(&e, &req("GET", "/login", "192.0.2.1"), 0).action,
        Action::Pass
    );

    // One account attacked from many addresses: 10 per hour.
    let attempt = |i: u32| {
        req("POST", "/account/login", &format!("198.51.100.{i}")).header("X-Login-User", "alice")
    };
    for i in 0..10 {
        assert_eq!(eval(&e, &attempt(i), i as u64 * 1000).action, Action::Pass);
    }
    let o = eval(&e, &attempt(50), 20_000);
    assert_eq!(limit(&e, &o).as_deref(), Some("login-account"));

    // Checkout: 3 per session at once, then 429; other sessions unaffected.
    let checkout = |s: &str| {
        req("POST", "/checkout/pay", "203.0.113.5").header("Cookie", &format!("shop_session={s}"))
    };
    for _ in 0..3 {
        assert_eq!(eval(&e, &checkout("s1"), 0).action, Action::Pass);
    }
    let o = eval(&e, &checkout("s1"), 0);
    assert_eq!((o.action, o.status), (Action::Reject, 429));
    assert_eq!(limit(&e, &o).as_deref(), Some("checkout"));
    assert_eq!(eval(&e, &checkout("s2"), 0).action, Action::Pass);
}

#[test]
fn shop_search_delays_and_bots() {
    let e = engine("shop.toml");
    let search = || req("GET", "/products?q=shoes", "192.0.2.9");
    // 1 + delay 2 pass at once, the rest of the burst of 5 is paced at 1 r/s.
    let waits: Vec<_> = (0..6)
        .map(|_| {
            let o = eval(&e, &search(), 0);
            (o.action, o.wait_ns / 1_000_000_000)
        })
        .collect();
    use Action::{Delay, Pass};
    assert_eq!(
        waits,
        [
            (Pass, 0),
            (Pass, 0),
            (Pass, 0),
            (Delay, 1),
            (Delay, 2),
            (Delay, 3)
        ]
    );
    assert_eq!(
        limit(&e, &eval(&e, &search(), 0)).as_deref(),
        Some("search")
    );

    // Self-declared bots share one budget (burst 10), answered 503.
    let bot = |i: u32| {
        req("GET", "/products/1", &format!("203.0.113.{i}")).header("User-Agent", "FooBot/2.1")
    };
    for i in 0..11 {
        assert_eq!(eval(&e, &bot(i), 0).action, Action::Pass);
    }
    let o = eval(&e, &bot(99), 0);
    assert_eq!((o.action, o.status), (Action::Reject, 503));
    // Static files are exempt, even for bots.
    let r = req("GET", "/static/site.css", "203.0.113.99").header("User-Agent", "FooBot/2.1");
    assert!(eval(&e, &r, 0).exempt.is_some());
}
