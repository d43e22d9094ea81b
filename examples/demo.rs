//! The crawler incident in miniature, through the real engine.
//!
//! `cargo run --release --example demo -- examples/wiki.toml`
//!
//! Replays one simulated minute of traffic against a wiki: a crawler spread over 3,000
//! addresses (1–2 requests each) walking an uncached tool in both of its URL shapes, ordinary
//! readers loading pages and versioned static assets, logged-in editors, and a load-balancer
//! health check every second. Prints, per traffic group and per limit, what passed and what was
//! limited.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use weir::policy::{load_policy, Action, Engine, OwnedRequest};

const MS: u64 = 1_000_000;
/// The simulated minute starts here (any monotonic base works; tables start empty).
const T0: u64 = 1_000_000_000_000;

struct Request {
    t_ms: u64,
    group: &'static str,
    req: OwnedRequest,
}

fn ip(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

/// Deterministic traffic for one minute.
fn traffic() -> Vec<Request> {
    const CHROME_ZH: &str = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
                             (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36";
    let mut out = vec![];
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    // The crawler: 3,000 addresses, 1–2 requests each, both URL shapes of one tool.
    for i in 0..3000u32 {
        let peer = ip(
            36,
            110 + (i / 250) as u8,
            (i % 250) as u8,
            1 + (i % 7) as u8,
        );
        for _ in 0..1 + next(2) {
            let page = next(100_000);
            let target = if next(2) == 0 {
                format!("/w/Special:WhatLinksHere/Page_{page}")
            } else {
                format!("/index.php?title=Special%3AWhatLinksHere%2FPage_{page}&limit=500")
            };
            let req = OwnedRequest::new("GET", &target, peer)
                .header("user-agent", CHROME_ZH)
                .header("accept-language", "zh-CN,zh;q=0.9");
            out.push(Request {
                t_ms: next(60_000),
                group: "crawler (3000 IPs)",
                req,
            });
        }
    }
    // Readers: 200 addresses, a page every ~10 s, each with its versioned CSS and JS.
    for i in 0..200u32 {
        let peer = ip(198, 51, (i / 200) as u8, (i % 200) as u8 + 1);
        let mut t = next(10_000);
        while t < 60_000 {
            let page = format!("/wiki/Article_{}", next(5000));
            out.push(Request {
                t_ms: t,
                group: "readers: pages",
                req: OwnedRequest::new("GET", &page, peer),
            });
            for asset in ["/app.css?v=3", "/load.js?v=7"] {
                out.push(Request {
                    t_ms: t + 20,
                    group: "readers: static assets",
                    req: OwnedRequest::new("GET", asset, peer),
                });
            }
            t += 5_000 + next(10_000);
        }
    }
    // Logged-in editors working on drafts, every third request one of the tool pages the
    // crawler walks (on budgets keyed on their session cookie).
    for i in 0..10u8 {
        let peer = ip(203, 0, 113, 10 + i);
        for k in 0..30u64 {
            let page = if k % 3 == 0 {
                format!("/w/Special:WhatLinksHere/Draft_{k}")
            } else {
                format!("/w/Draft_{k}")
            };
            let req = OwnedRequest::new("GET", &page, peer)
                .header("cookie", &format!("wiki_session=editor{i}; lang=en"));
            out.push(Request {
                t_ms: k * 2000 + i as u64 * 37,
                group: "logged-in editors",
                req,
            });
        }
    }
    // The load balancer's health check, every second.
    for s in 0..60u64 {
        out.push(Request {
            t_ms: s * 1000,
            group: "health checks",
            req: OwnedRequest::new("GET", "/healthz", ip(10, 0, 0, 2)),
        });
    }
    out.sort_by_key(|r| r.t_ms);
    out
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "examples/wiki.toml".into());
    let policy = match load_policy(std::path::Path::new(&path)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let engine = Engine::new(policy).unwrap_or_else(|e| {
        eprintln!("{path}: {e}");
        std::process::exit(1);
    });
    // group → [requests, passed, delayed, rejected]
    let mut groups: BTreeMap<&str, [u64; 4]> = BTreeMap::new();
    let reqs = traffic();
    for r in &reqs {
        let now = T0 + r.t_ms * MS;
        let row = groups.entry(r.group).or_default();
        row[0] += 1;
        match engine.evaluate(&r.req, now) {
            Ok(o) => {
                row[match o.action {
                    Action::Pass => 1,
                    Action::Delay => 2,
                    Action::Reject | Action::Queue => 3,
                }] += 1;
                engine.release(o.permits, now);
                if let Some(t) = o.ticket {
                    engine.abandon(t, now);
                }
            }
            Err(e) => eprintln!("{}: {e}", r.group),
        }
    }
    println!(
        "policy {path}: {} requests in one simulated minute\n",
        reqs.len()
    );
    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>9}",
        "traffic", "requests", "passed", "delayed", "limited"
    );
    for (g, [n, p, d, r]) in &groups {
        println!("{g:<26} {n:>9} {p:>9} {d:>9} {r:>9}");
    }
    println!(
        "\n{:<26} {:>9} {:>9} {:>9} {:>9}",
        "limit", "passed", "delayed", "rejected", "dry-run"
    );
    for i in 0..engine.policy().limits.len() {
        let c = engine.counters(i);
        println!(
            "{:<26} {:>9} {:>9} {:>9} {:>9}",
            engine.limit_name(i),
            c.passed,
            c.delayed,
            c.rejected,
            c.dry_run_rejected + c.dry_run_delayed
        );
    }
    let t = engine.totals();
    println!("\nexempt {}, matched no limit {}", t.exempt, t.unmatched);
}
