//! Policy engine: ns per `Engine::evaluate` (+ `Engine::release` when permits are held) on a
//! realistic policy and request mix, and on a minimal one-limit policy.
//!
//!   cargo bench --bench policy -- --warm-up-time 1 --measurement-time 3
//!
//! Time advances 100 ms per request, so every request passes: the measured path is the full one
//! (normalize, exemptions, classes, keys, predict, acquire, charge, release).
//!
//! The `*_2_threads` cases run the same loop on two threads at once, each with its own clients,
//! and report ns per request per thread: what sharing the engine's counters and tables between
//! cores adds (equal to the one-thread case when nothing is shared).
//!
//! With WEIR_BENCH_REDIS=redis://… naming a running redis-server, the `cluster/*` cases run the
//! minimal and the fixed concurrency cases on `scope = "cluster"` zones.

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{criterion_group, criterion_main, Criterion};
use weir::policy::{CompiledPolicy, Engine, OwnedRequest, RequestView};

#[path = "../tests/common/engine_fixture.rs"]
mod fixture;

const STEP_NS: u64 = 100_000_000;

fn engine(src: &str) -> Engine {
    Engine::new(CompiledPolicy::parse(src, Some("bench.toml")).unwrap_or_else(|e| panic!("{e}")))
        .unwrap()
}

/// Evaluates requests in turn (cycling), releasing permits as a host would.
fn run(c: &mut Criterion, name: &str, engine: &Engine, reqs: &[OwnedRequest]) {
    let mut now = 1_000_000_000u64;
    let mut i = 0usize;
    c.bench_function(name, |b| {
        b.iter(|| {
            let r = &reqs[i % reqs.len()];
            i = i.wrapping_add(1);
            now += STEP_NS;
            let out = engine.evaluate(black_box(r), now).unwrap();
            let action = out.action;
            engine.release(out.permits, now);
            black_box(action)
        })
    });
}

/// A request as sent by another client: `base` with its `X-Forwarded-For` replaced.
struct FromClient<'a> {
    base: &'a OwnedRequest,
    xff: [u8; 32],
    len: usize,
}

impl<'a> FromClient<'a> {
    /// Client `i` of 2^20: `10.a.b.c` behind the fixture's proxy.
    fn new(base: &'a OwnedRequest, i: u32) -> FromClient<'a> {
        let mut r = FromClient {
            base,
            xff: [0; 32],
            len: 0,
        };
        let mut put = |b: &[u8]| {
            r.xff[r.len..r.len + b.len()].copy_from_slice(b);
            r.len += b.len();
        };
        put(b"10");
        for octet in [i >> 16, (i >> 8) & 255, i & 255] {
            put(b".");
            let d = [b'0' + (octet / 100) as u8, b'0' + (octet / 10 % 10) as u8];
            put(&d[(octet < 100) as usize + (octet < 10) as usize..]);
            put(&[b'0' + (octet % 10) as u8]);
        }
        put(b", 172.16.0.9");
        r
    }
}

impl RequestView for FromClient<'_> {
    fn method(&self) -> &[u8] {
        self.base.method()
    }
    fn target(&self) -> &[u8] {
        self.base.target()
    }
    fn peer(&self) -> Option<IpAddr> {
        self.base.peer()
    }
    fn header_nth(&self, name: &[u8], nth: usize) -> Option<&[u8]> {
        if name == b"x-forwarded-for" {
            return (nth == 0).then_some(&self.xff[..self.len]);
        }
        self.base.header_nth(name, nth)
    }
    fn for_each_header<'s>(&'s self, f: &mut dyn FnMut(&'s [u8], &'s [u8])) -> bool {
        self.base.for_each_header(&mut |n, v| {
            if n.eq_ignore_ascii_case(b"x-forwarded-for") {
                f(n, &self.xff[..self.len])
            } else {
                f(n, v)
            }
        })
    }
}

/// `make(client)` requests evaluated on `THREADS` threads at once (16 clients per thread, none
/// shared; keys that are global by policy are); criterion's time is the slowest thread's,
/// for `iters` requests on each.
fn threaded(c: &mut Criterion, name: &str, engine: &Engine, make: fn(u8) -> OwnedRequest) {
    const THREADS: u8 = 2;
    let reqs: Vec<Vec<OwnedRequest>> = (0..THREADS)
        .map(|t| (1..=16u8).map(|k| make(16 * t + k)).collect())
        .collect();
    let mut start = 1_000_000_000u64;
    c.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let t0 = std::time::Instant::now();
            std::thread::scope(|s| {
                for mine in &reqs {
                    s.spawn(move || {
                        let mut now = start;
                        for i in 0..iters as usize {
                            now += STEP_NS;
                            let r = &mine[i % mine.len()];
                            let out = engine.evaluate(black_box(r), now).unwrap();
                            engine.release(out.permits, now);
                            black_box(out.action);
                        }
                    });
                }
            });
            start += iters * STEP_NS;
            t0.elapsed()
        })
    });
}

/// The wiki request from a million clients in a scattered order, against the realistic policy
/// with 64 MiB zones: the per-IP and in-flight tables each hold a million keys, far more than
/// the caches, so their reads are cache misses as in a large production table.
fn at_scale(c: &mut Criterion) {
    let mut src = fixture::REALISTIC_POLICY.to_string();
    for zone in ["per_ip]\nsize = \"1m\"", "expensive]\nsize = \"256k\""] {
        let scaled = zone.replace("1m", "64m").replace("256k", "64m");
        assert!(src.contains(zone), "fixture changed: {zone}");
        src = src.replace(zone, &scaled);
    }
    let engine = engine(&src);
    let base = fixture::wiki_tool(1);
    const CLIENTS: u32 = 1 << 20;
    let mut now = 1_000_000_000u64;
    let mut i = 0u32;
    c.bench_function("realistic/wiki_tool_query_1m_clients", |b| {
        b.iter(|| {
            // An odd multiplier permutes 0..2^20: every client once per cycle, scattered.
            let r = FromClient::new(&base, i.wrapping_mul(0x9e37_79b9) % CLIENTS);
            i = i.wrapping_add(1);
            now += STEP_NS;
            let out = engine.evaluate(black_box(&r), now).unwrap();
            let action = out.action;
            engine.release(out.permits, now);
            black_box(action)
        })
    });
    for (z, zone) in engine.policy().zones.iter().enumerate() {
        eprintln!(
            "at scale: zone {} holds {} keys",
            zone.name,
            engine.zone_stats(z).occupancy
        );
    }
}

fn benches(c: &mut Criterion) {
    let real = engine(fixture::REALISTIC_POLICY);
    // 16 clients of each kind, so the tables hold several keys.
    let clients = 1..=16u8;
    let wiki: Vec<_> = clients.clone().map(fixture::wiki_tool).collect();
    let wiki_long_cookie: Vec<_> = clients
        .clone()
        .map(fixture::wiki_tool_long_cookie)
        .collect();
    let stat: Vec<_> = clients.clone().map(fixture::static_asset).collect();
    let api: Vec<_> = clients.clone().map(fixture::api_call).collect();
    let mix: Vec<_> = clients
        .flat_map(|c| {
            [
                fixture::wiki_tool(c),
                fixture::static_asset(c),
                fixture::api_call(c),
            ]
        })
        .collect();
    run(c, "realistic/wiki_tool_query", &real, &wiki);
    run(
        c,
        "realistic/wiki_tool_query_long_cookie",
        &real,
        &wiki_long_cookie,
    );
    run(c, "realistic/static_exempt", &real, &stat);
    run(c, "realistic/api_call", &real, &api);
    run(c, "realistic/mix_3", &real, &mix);
    threaded(
        c,
        "realistic/static_exempt_2_threads",
        &real,
        fixture::static_asset,
    );
    threaded(
        c,
        "realistic/wiki_tool_query_2_threads",
        &real,
        fixture::wiki_tool,
    );

    let min = engine(fixture::MINIMAL_POLICY);
    let peers: Vec<_> = (1..=16u8)
        .map(|c| OwnedRequest::new("GET", "/", IpAddr::from([198, 51, 100, c])))
        .collect();
    run(c, "minimal_1_limit/get_root", &min, &peers);

    // Admit and give back a permit with the backend's time: a fixed max, and a learned one
    // (its window and, every 8th answer here, its control word updated).
    for (name, max) in [
        ("concurrency/fixed", "16"),
        ("concurrency/auto", "\"auto\""),
    ] {
        admit_release(c, name, &engine(&fixture::concurrency_policy(max)));
    }

    // The minimal and the fixed concurrency cases on `scope = "cluster"` zones, synced with
    // the redis-server $WEIR_BENCH_REDIS names (skipped without it).
    if let Some(e) = fixture::cluster_engine(fixture::MINIMAL_POLICY) {
        run(c, "cluster/minimal_1_limit", &e, &peers);
    }
    if let Some(e) = fixture::cluster_engine(&fixture::concurrency_policy("16")) {
        admit_release(c, "cluster/concurrency_fixed", &e);
    }
}

/// One client admitted and given back its permit with the backend's time, 20 ms apart.
fn admit_release(c: &mut Criterion, name: &str, e: &Engine) {
    let r = OwnedRequest::new("GET", "/", IpAddr::from([198, 51, 100, 1]));
    let mut now = 1_000_000_000u64;
    c.bench_function(name, |b| {
        b.iter(|| {
            now += 20_000_000;
            let out = e.evaluate(black_box(&r), now).unwrap();
            let action = out.action;
            e.release_sampled(out.permits, Some(fixture::SAMPLE), now);
            black_box(action)
        })
    });
}

/// The reject path: 16 clients over their limit (`1r/m`, the clock standing still), with the
/// rejected keys and clients recorded for the JSON status (`[status] top_keys`, the default)
/// and without (only the per-second history).
fn rejections(c: &mut Criterion) {
    for (name, status) in [
        ("reject/top_keys", ""),
        ("reject/no_top_keys", "[status]\ntop_keys = false\n"),
    ] {
        let engine = engine(&fixture::reject_policy(status));
        let now = 1_000_000_000u64;
        let peers = fixture::over_limit_peers(&engine, now);
        let mut i = 0usize;
        c.bench_function(name, |b| {
            b.iter(|| {
                let r = &peers[i % peers.len()];
                i = i.wrapping_add(1);
                let out = engine.evaluate(black_box(r), now).unwrap();
                assert_eq!(out.action, weir::policy::Action::Reject);
                black_box(out.action)
            })
        });
    }
}

criterion_group!(policy, benches, at_scale, rejections);
criterion_main!(policy);
