//! Cluster GCRA against a real redis-server: three nodes (engines, each with its own syncer)
//! share one `rate = 100r/s, burst = 20, nodelay` limit on one key, each offered 300 requests
//! a second. Admitted per wall-clock second over the nodes stays within the bound of
//! docs/CLUSTER.md (`rate·1 s + burst + 1` plus what the other nodes admitted unseen during
//! one sync lag), and over the whole run the admitted rate is the limit's. With Redis killed
//! the nodes fall back to `rate ÷ 3` each and keep answering; restarted, they share again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::clock::monotonic_ns;
use weir::policy::config::CompiledPolicy;
use weir::policy::engine::{Action, Engine};
use weir::policy::request::OwnedRequest;

#[path = "redis_server.rs"]
mod redis_server;
use redis_server::{free_port, Redis};

const RATE: u64 = 100;
const BURST: u64 = 20;
const NODES: usize = 3;
const OFFERED: u64 = 300;

fn policy(url: &str) -> String {
    format!(
        "[zones.g]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"{RATE}r/s\"\n\
         scope = \"cluster\"\nredis = \"{url}\"\nsync_interval = \"100ms\"\nexpected_nodes = {NODES}\n\
         [[limit]]\nclass = \"*\"\nzone = \"g\"\nkey = \"global\"\nburst = {BURST}\nnodelay = true\n"
    )
}

/// Admitted per whole second since the start, over all nodes.
struct Seconds {
    start: Instant,
    admitted: Vec<AtomicU64>,
    /// Admitted per node while Redis was up (seconds 1-3).
    by_node: Vec<AtomicU64>,
    stop: AtomicBool,
}

fn node(n: usize, e: Arc<Engine>, s: Arc<Seconds>) {
    let req = OwnedRequest::new("GET", "/api", "192.0.2.1".parse().unwrap());
    let mut i = 0u64;
    while !s.stop.load(Relaxed) {
        let due = s.start + Duration::from_nanos(i * 1_000_000_000 / OFFERED);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        i += 1;
        let out = e.evaluate(&req, monotonic_ns()).unwrap();
        if out.action == Action::Pass {
            let sec = s.start.elapsed().as_secs() as usize;
            if let Some(a) = s.admitted.get(sec) {
                a.fetch_add(1, Relaxed);
            }
            if (1..4).contains(&sec) {
                s.by_node[n].fetch_add(1, Relaxed);
            }
        }
    }
}

fn main() {
    let redis = Redis::start(free_port(), None);
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let engines: Vec<Arc<Engine>> = (0..NODES)
        .map(|_| {
            Arc::new(Engine::new(CompiledPolicy::parse(&policy(&url), None).unwrap()).unwrap())
        })
        .collect();
    // Let every syncer connect first.
    std::thread::sleep(Duration::from_millis(300));
    let secs = 9;
    let s = Arc::new(Seconds {
        start: Instant::now(),
        admitted: (0..secs).map(|_| AtomicU64::new(0)).collect(),
        by_node: (0..NODES).map(|_| AtomicU64::new(0)).collect(),
        stop: AtomicBool::new(false),
    });
    let threads: Vec<_> = engines
        .iter()
        .enumerate()
        .map(|(n, e)| {
            let (e, s) = (Arc::clone(e), Arc::clone(&s));
            std::thread::spawn(move || node(n, e, s))
        })
        .collect();
    // Seconds 0-4 shared; Redis away in 5-7 (killed at 4.5 s); back for 8.
    std::thread::sleep(Duration::from_millis(4500));
    let port = redis.port;
    redis.kill();
    std::thread::sleep(Duration::from_millis(3000));
    let redis = Redis::start(port, None);
    std::thread::sleep(Duration::from_millis(1500));
    s.stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let per: Vec<u64> = s.admitted.iter().map(|a| a.load(Relaxed)).collect();
    let by_node: Vec<u64> = s.by_node.iter().map(|a| a.load(Relaxed)).collect();
    let fallback: Vec<u64> = engines
        .iter()
        .map(|e| {
            e.cluster(0)
                .unwrap()
                .stats()
                .fallback_decisions
                .load(Relaxed)
        })
        .collect();
    // What the others admit unseen in one lag (λ = 2·(interval + δ) ≈ 250 ms) at their share
    // of the rate.
    let unseen = (NODES as u64 - 1) * (RATE / NODES as u64) * 250 / 1000;
    let bound = RATE + BURST + 1 + unseen;
    let shared = &per[1..4];
    let mean = shared.iter().sum::<u64>() as f64 / shared.len() as f64;
    println!(
        "cluster gcra: admitted per second {per:?} (limit {RATE}/s, burst {BURST}, bound \
         {bound} a second; 3 local limits would admit {}); seconds 1-3 mean {mean:.1}, by node \
         {by_node:?}; Redis away in seconds 5-7: fallback decisions {fallback:?}",
        NODES as u64 * RATE
    );
    assert!(
        per[0] <= bound + (NODES as u64 - 1) * (BURST + 1),
        "first second {per:?}"
    );
    for &a in shared {
        assert!(
            a <= bound,
            "{a} admitted in a second (bound {bound}): {per:?}"
        );
        assert!(a >= RATE * 8 / 10, "{a} admitted in a second: {per:?}");
    }
    assert!(
        fallback.iter().all(|&f| f > 0),
        "no fallback with Redis away"
    );
    let back = per[8];
    assert!(
        (RATE * 8 / 10..=bound).contains(&back),
        "{back} admitted after the restart: {per:?}"
    );
    let (lo, hi) = (by_node.iter().min().unwrap(), by_node.iter().max().unwrap());
    assert!(hi - lo <= hi / 2, "the nodes shared unevenly: {by_node:?}");
    for &a in &per[6..8] {
        assert!(
            a <= RATE + BURST + 1,
            "{a} admitted on the fallback: {per:?}"
        );
        assert!(a >= RATE * 8 / 10, "{a} admitted on the fallback: {per:?}");
    }
    redis.kill();
}
