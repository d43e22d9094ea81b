//! Instruction counts for the policy engine: the cases of `benches/policy.rs`, run a given
//! number of times in a plain loop, for `valgrind --tool=callgrind` (exact and independent of
//! machine load, unlike wall-clock timings). Per request = (count at N2 − count at N1) / (N2 − N1):
//!
//! ```sh
//! BIN=$(cargo bench --bench policy_instr --no-run 2>&1 | sed -n 's/.*(\(target[^)]*\)).*/\1/p')
//! for case in wiki wiki_long_cookie static api mix min min_ban reject reject_no_top_keys reject_banned conc_fixed conc_auto; do
//! # (min_cluster and conc_cluster also need WEIR_BENCH_REDIS=redis://… of a running server)
//!   a=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null $BIN $case 1000 2>&1 | sed -n 's/.*refs: *//p' | tr -d ,)
//!   b=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null $BIN $case 11000 2>&1 | sed -n 's/.*refs: *//p' | tr -d ,)
//!   echo "$case $(( (b - a) / 10000 ))"
//! done
//! ```
//!
//! Without arguments (as `cargo bench` runs it) it does nothing.

use std::hint::black_box;
use std::net::IpAddr;

use weir::policy::{CompiledPolicy, Engine, OwnedRequest};

#[path = "../tests/common/engine_fixture.rs"]
mod fixture;

fn engine(src: &str) -> Engine {
    Engine::new(CompiledPolicy::parse(src, Some("bench.toml")).unwrap_or_else(|e| panic!("{e}")))
        .unwrap()
}

/// As benches/policy.rs `rejections`: 16 clients over `1r/m`, the clock standing still.
fn rejections(engine: Engine, n: usize) {
    let now = 1_000_000_000u64;
    let peers = fixture::over_limit_peers(&engine, now);
    for i in 0..n {
        let out = engine
            .evaluate(black_box(&peers[i % peers.len()]), now)
            .unwrap();
        black_box(out.action);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(case), Some(n)) = (args.first(), args.get(1).and_then(|n| n.parse().ok())) else {
        return;
    };
    let clients = 1..=16u8;
    let (engine, reqs): (Engine, Vec<OwnedRequest>) = match case.as_str() {
        "wiki" => (
            engine(fixture::REALISTIC_POLICY),
            clients.map(fixture::wiki_tool).collect(),
        ),
        "wiki_long_cookie" => (
            engine(fixture::REALISTIC_POLICY),
            clients.map(fixture::wiki_tool_long_cookie).collect(),
        ),
        "static" => (
            engine(fixture::REALISTIC_POLICY),
            clients.map(fixture::static_asset).collect(),
        ),
        "api" => (
            engine(fixture::REALISTIC_POLICY),
            clients.map(fixture::api_call).collect(),
        ),
        "mix" => (
            engine(fixture::REALISTIC_POLICY),
            clients
                .flat_map(|c| {
                    [
                        fixture::wiki_tool(c),
                        fixture::static_asset(c),
                        fixture::api_call(c),
                    ]
                })
                .collect(),
        ),
        // The minimal policy with a `ban` (never engaged: every request passes).
        "min_ban" => (
            engine(&fixture::with_ban(fixture::MINIMAL_POLICY)),
            clients
                .map(|c| OwnedRequest::new("GET", "/", IpAddr::from([198, 51, 100, c])))
                .collect(),
        ),
        "min" => (
            engine(fixture::MINIMAL_POLICY),
            clients
                .map(|c| OwnedRequest::new("GET", "/", IpAddr::from([198, 51, 100, c])))
                .collect(),
        ),
        "reject" | "reject_no_top_keys" => {
            let status = if case == "reject" {
                ""
            } else {
                "[status]\ntop_keys = false\n"
            };
            return rejections(engine(&fixture::reject_policy(status)), n);
        }
        // Admit and give back a permit with the backend's time, fixed max or learned.
        "conc_fixed" | "conc_auto" | "conc_cluster" => {
            let max = if case == "conc_auto" {
                "\"auto\""
            } else {
                "16"
            };
            let src = fixture::concurrency_policy(max);
            let e = if case == "conc_cluster" {
                // As conc_fixed, on a cluster pool (see min_cluster).
                fixture::cluster_engine(&src).expect("WEIR_BENCH_REDIS=redis://…")
            } else {
                engine(&src)
            };
            let r = OwnedRequest::new("GET", "/", IpAddr::from([198, 51, 100, 1]));
            let mut now = 1_000_000_000u64;
            for _ in 0..n {
                now += 20_000_000;
                let out = e.evaluate(black_box(&r), now).unwrap();
                black_box(out.action);
                e.release_sampled(out.permits, Some(fixture::SAMPLE), now);
            }
            return;
        }
        // `min` on a `scope = "cluster"` zone, syncing (rarely: every 5 s) with the Redis at
        // $WEIR_BENCH_REDIS: a cluster GCRA zone's request path beside a local one's.
        "min_cluster" => (
            fixture::cluster_engine(fixture::MINIMAL_POLICY).expect("WEIR_BENCH_REDIS=redis://…"),
            clients
                .map(|c| OwnedRequest::new("GET", "/", IpAddr::from([198, 51, 100, c])))
                .collect(),
        ),
        // The reject path with a `ban` that engages at once: every request is refused by a ban.
        "reject_banned" => {
            return rejections(engine(&fixture::with_ban(&fixture::reject_policy(""))), n);
        }
        other => panic!(
            "unknown case {other:?} (wiki, wiki_long_cookie, static, api, mix, min, min_ban, \
             reject, reject_no_top_keys, reject_banned, conc_fixed, conc_auto, min_cluster, \
             conc_cluster)"
        ),
    };
    // As benches/policy.rs: 100 ms per request, so every request passes.
    let mut now = 1_000_000_000u64;
    for i in 0..n {
        let r = &reqs[i % reqs.len()];
        now += 100_000_000;
        let out = engine.evaluate(black_box(r), now).unwrap();
        let action = out.action;
        engine.release(out.permits, now);
        black_box(action);
    }
}
