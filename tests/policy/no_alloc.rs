//! `Engine::evaluate` + `Engine::release` allocate nothing for realistic requests (targets
//! under 2 KiB, several limits matched, keys of several kinds, a concurrency permit taken and
//! given back), once warmed up; nor for examples/wiki.toml's case-insensitive globs and title
//! regexes; nor `Engine::evaluate_selected` over host limits keyed by variables (rate and
//! concurrency, delays and rejections, empty keys).
//!
//! A counting global allocator watches 10,000 evaluations. Set `WEIR_ALLOC_TRACE=1` to print a
//! backtrace for every allocation made while counting (to find where it comes from).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use weir::limiter::{Delay, Rate};
use weir::policy::config::Algorithm;
use weir::policy::{Action, CompiledPolicy, Engine, HostLimit, HostLimits, HostZone, OwnedRequest};

#[path = "../common/engine_fixture.rs"]
mod fixture;

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static COUNTING: AtomicBool = AtomicBool::new(false);
static TRACE: AtomicBool = AtomicBool::new(false);

thread_local! {
    static IN_TRACE: Cell<bool> = const { Cell::new(false) };
}

fn note() {
    if !COUNTING.load(Relaxed) {
        return;
    }
    ALLOCS.fetch_add(1, Relaxed);
    if TRACE.load(Relaxed) && !IN_TRACE.with(|t| t.replace(true)) {
        // Capturing the backtrace allocates; the guard keeps that out of the count's trace.
        eprintln!(
            "allocation while counting:\n{}",
            std::backtrace::Backtrace::force_capture()
        );
        IN_TRACE.with(|t| t.set(false));
    }
}

// SAFETY: forwards to the system allocator unchanged, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note();
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note();
        System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note();
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static A: Counting = Counting;

const S: u64 = 1_000_000_000;

fn main() {
    TRACE.store(std::env::var_os("WEIR_ALLOC_TRACE").is_some(), Relaxed);
    let policy = CompiledPolicy::parse(fixture::REALISTIC_POLICY, Some("realistic.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let engine = Engine::new(policy).unwrap();

    // Several clients per kind: distinct ip / API-key / cookie+path keys in the tables.
    type Make = fn(u8) -> OwnedRequest;
    let kinds: [(&str, Make); 7] = [
        ("wiki_tool", fixture::wiki_tool),
        ("wiki_tool_long_cookie", fixture::wiki_tool_long_cookie),
        ("static_asset", fixture::static_asset),
        ("api_call", fixture::api_call),
        ("bot_search", fixture::bot_search),
        ("long_diff", fixture::long_diff),
        // Over a unix socket: the local client.
        ("api_call_local", |c| OwnedRequest {
            peer: None,
            ..fixture::api_call(c)
        }),
    ];
    let reqs: Vec<(usize, OwnedRequest)> = (1..=8u8)
        .flat_map(|c| kinds.iter().enumerate().map(move |(k, (_, f))| (k, f(c))))
        .collect();

    // One warm-up call per request (thread-locals, regex caches), checking what they do.
    let mut now = S;
    let mut permits_seen = 0;
    let mut exempt_seen = 0;
    for (_, r) in &reqs {
        let out = engine.evaluate(r, now).expect("valid target");
        assert_eq!(out.action, Action::Pass, "{:?}", r.target);
        permits_seen += usize::from(!out.permits.is_empty());
        exempt_seen += usize::from(out.exempt.is_some());
        engine.release(out.permits, now);
        now += S / 10;
    }
    assert!(permits_seen > 0 && exempt_seen > 0);
    let mut per_kind = [0usize; 7];
    let mut failures = 0;
    for i in 0..10_000 {
        let (k, r) = &reqs[i % reqs.len()];
        COUNTING.store(true, Relaxed);
        let before = ALLOCS.load(Relaxed);
        let out = engine.evaluate(r, now);
        let pass = matches!(&out, Ok(o) if o.action == Action::Pass);
        if let Ok(o) = out {
            engine.release(o.permits, now);
        }
        per_kind[*k] += ALLOCS.load(Relaxed) - before;
        COUNTING.store(false, Relaxed);
        failures += usize::from(!pass);
        now += S / 10;
    }
    assert_eq!(failures, 0, "every request should pass");
    let wiki = wiki_example_allocations();
    let host = host_limits_allocations();
    let bans = ban_allocations();
    let n: usize = per_kind.iter().sum::<usize>() + wiki + host + bans;
    if n == 0 {
        println!("test evaluate_allocates_nothing ... ok\n1 passed, 0 failed");
    } else {
        let detail: Vec<String> = kinds
            .iter()
            .zip(per_kind)
            .filter(|(_, n)| *n > 0)
            .map(|((name, _), n)| format!("{name}: {n}"))
            .chain((wiki > 0).then(|| format!("examples/wiki.toml: {wiki}")))
            .chain((host > 0).then(|| format!("evaluate_selected: {host}")))
            .chain((bans > 0).then(|| format!("bans: {bans}")))
            .collect();
        println!(
            "test evaluate_allocates_nothing ... FAILED ({n} allocations; {})\n0 passed, 1 failed",
            detail.join(", ")
        );
        std::process::exit(1);
    }
}

/// Allocations while keys are rejected until banned (strikes, the ban's start and listing)
/// and then refused by their bans.
fn ban_allocations() -> usize {
    let src = fixture::with_ban(&fixture::reject_policy(""));
    let engine = Engine::new(CompiledPolicy::parse(&src, Some("ban.toml")).unwrap()).unwrap();
    let reqs: Vec<OwnedRequest> = (1..=16u8)
        .map(|c| OwnedRequest::new("GET", "/", std::net::IpAddr::from([198, 51, 100, c])))
        .collect();
    let (mut started, mut banned) = (0, 0);
    COUNTING.store(true, Relaxed);
    let before = ALLOCS.load(Relaxed);
    for i in 0..2_000 {
        let out = engine
            .evaluate(&reqs[i % reqs.len()], S)
            .expect("valid target");
        started += usize::from(out.ban_started.is_some());
        banned += usize::from(out.banned);
    }
    let n = ALLOCS.load(Relaxed) - before;
    COUNTING.store(false, Relaxed);
    assert!(
        started == 16 && banned > 0,
        "bans were started and enforced"
    );
    n
}

/// Allocations while examples/wiki.toml (case-insensitive globs, regexes over decoded titles)
/// judges tool pages in several spellings, ordinary pages and assets, passing and rejecting.
fn wiki_example_allocations() -> usize {
    let src = include_str!("../../examples/wiki.toml");
    let engine = Engine::new(CompiledPolicy::parse(src, None).unwrap()).unwrap();
    let reqs: Vec<OwnedRequest> = [
        "/w/Special:WhatLinksHere/X",
        "/index.php?title=sPeCiAl%3Awhatlinkshere&target=X",
        "/w/index.php/_Special_:_RelatedChanges/X",
        "/w/Spe%E2%80%8Ecial:WhatLinksHere/X",
        "/index.php?title=Special:WhatL%C4%B1nksHere",
        "/w/Main_Page?action=history",
        "/w/Main_Page",
        "/app.css?v=3",
    ]
    .iter()
    .enumerate()
    .map(|(i, t)| OwnedRequest::new("GET", t, format!("198.18.{i}.1").parse().unwrap()))
    .collect();
    for r in reqs.iter().cycle().take(400) {
        engine.evaluate(r, S).expect("valid target");
    }
    let before = ALLOCS.load(Relaxed);
    COUNTING.store(true, Relaxed);
    for r in reqs.iter().cycle().take(4000) {
        let _ = engine.evaluate(r, S);
    }
    COUNTING.store(false, Relaxed);
    ALLOCS.load(Relaxed) - before
}

/// Allocations while `evaluate_selected` judges requests against host limits keyed by
/// variables, as nginx's directives would: two rate limits (one delaying, one rejecting) and a
/// concurrency limit with its own max, some requests with an empty key.
fn host_limits_allocations() -> usize {
    let mut b = HostLimits::new();
    let rate = |count| Algorithm::Gcra {
        rate: Rate {
            count,
            period_ns: S,
        },
    };
    for (name, algorithm) in [
        ("one", rate(5)),
        ("two", rate(50)),
        ("conn", Algorithm::Concurrency { max: 0 }),
    ] {
        let size = 1 << 20;
        b.zone(name, HostZone { size, algorithm });
    }
    let limit = |zone: &str| HostLimit {
        key: vec![format!("var:{zone}")],
        ..HostLimit::default()
    };
    let reqs = [
        b.limit(
            "one",
            HostLimit {
                burst: 5,
                ..limit("one")
            },
        ),
        b.limit(
            "two",
            HostLimit {
                burst: 10,
                delay: Delay::NoDelay,
                ..limit("two")
            },
        ),
    ];
    let conns = [b.limit(
        "conn",
        HostLimit {
            max: Some(2),
            ..limit("conn")
        },
    )];
    let engine = Engine::new(b.build().unwrap()).unwrap();
    let requests: Vec<OwnedRequest> = (0..16u8)
        .map(|c| {
            let r = OwnedRequest::new("GET", "/", std::net::IpAddr::from([192, 0, 2, c]));
            // Every fourth request has an empty key for zone "one".
            let one = if c % 4 == 0 {
                String::new()
            } else {
                format!("k{c}")
            };
            r.var(0, one)
                .var(1, format!("k{}", c % 3))
                .var(2, format!("k{c}"))
        })
        .collect();
    let mut now = S;
    let mut seen = [false; 3];
    let mut run = |counting: bool, now: u64, r: &OwnedRequest| {
        COUNTING.store(counting, Relaxed);
        let out = engine.evaluate_selected(r, &reqs, now).unwrap();
        seen[0] |= out.action == Action::Delay;
        seen[1] |= out.action == Action::Reject;
        let c = engine.evaluate_selected(r, &conns, now).unwrap();
        seen[2] |= !c.permits.is_empty();
        engine.release(c.permits, now);
        COUNTING.store(false, Relaxed);
    };
    for r in requests.iter().cycle().take(400) {
        run(false, now, r);
        now += S / 200;
    }
    let before = ALLOCS.load(Relaxed);
    for r in requests.iter().cycle().take(10_000) {
        run(true, now, r);
        now += S / 200;
    }
    assert_eq!(
        seen, [true; 3],
        "delays, rejections and permits were all exercised"
    );
    ALLOCS.load(Relaxed) - before
}
