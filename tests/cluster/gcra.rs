//! Cluster GCRA against a real redis-server: three nodes (engines, each with its own syncer)
//! share one `rate = 100r/s, burst = 20, nodelay` limit on one key, each offered 300 requests
//! a second. Admitted per wall-clock second over the nodes stays within the bound of
//! docs/CLUSTER.md (`rate·1 s + burst + 1` plus what the other nodes admitted unseen during
//! one sync lag), and over the whole run the admitted rate is the limit's. With Redis killed
//! the nodes fall back to `rate ÷ 3` each and keep answering; restarted, they share again
//! without locking the key for what they admitted on the fallback.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::clock::monotonic_ns;
use weir::policy::config::CompiledPolicy;
use weir::policy::engine::{Action, Engine};
use weir::policy::request::OwnedRequest;

#[path = "redis_server.rs"]
mod redis_server;
use redis_server::{free_port, Redis, Relay};

const RATE: u64 = 100;
const BURST: u64 = 20;
const NODES: usize = 3;
const OFFERED: u64 = 300;

fn policy(url: &str, nodes: usize) -> String {
    format!(
        "[zones.g]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"{RATE}r/s\"\n\
         scope = \"cluster\"\nredis = \"{url}\"\nsync_interval = \"100ms\"\nexpected_nodes = {nodes}\n\
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

fn engine(url: &str, nodes: usize) -> Arc<Engine> {
    Arc::new(Engine::new(CompiledPolicy::parse(&policy(url, nodes), None).unwrap()).unwrap())
}

/// Offers every engine its load for `secs` seconds while `script` runs (from the start).
fn run(engines: &[Arc<Engine>], secs: usize, script: impl FnOnce(Instant)) -> Arc<Seconds> {
    // Let every syncer connect first.
    std::thread::sleep(Duration::from_millis(300));
    let s = Arc::new(Seconds {
        start: Instant::now(),
        admitted: (0..secs).map(|_| AtomicU64::new(0)).collect(),
        by_node: (0..engines.len()).map(|_| AtomicU64::new(0)).collect(),
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
    script(s.start);
    std::thread::sleep(
        (s.start + Duration::from_secs(secs as u64)).saturating_duration_since(Instant::now()),
    );
    s.stop.store(true, Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    s
}

fn main() {
    shared_and_redis_restarted();
    one_node_cut_off();
}

fn shared_and_redis_restarted() {
    let redis = Redis::start(free_port(), None);
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let engines: Vec<Arc<Engine>> = (0..NODES).map(|_| engine(&url, NODES)).collect();
    // Seconds 0-4 shared; Redis killed at 4.5 s, so seconds 5-6 wholly on the fallback;
    // restarted at 7.5 s, the nodes resume within their retry backoff (≤ 2 s): seconds 7-9
    // mixed, 10 shared again.
    let mut restarted = None;
    let s = run(&engines, 11, |_| {
        std::thread::sleep(Duration::from_millis(4500));
        let port = redis.port;
        redis.kill();
        std::thread::sleep(Duration::from_millis(3000));
        restarted = Some(Redis::start(port, None));
    });
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
        // A second pays back what the nodes admitted unseen in the one before.
        assert!(a >= RATE / 2, "{a} admitted in a second: {per:?}");
    }
    assert!((90.0..=110.0).contains(&mean), "seconds 1-3: {per:?}");
    assert!(
        fallback.iter().all(|&f| f > 0),
        "no fallback with Redis away"
    );
    let (lo, hi) = (by_node.iter().min().unwrap(), by_node.iter().max().unwrap());
    assert!(hi - lo <= hi / 2, "the nodes shared unevenly: {by_node:?}");
    for &a in &per[5..7] {
        assert!(
            a <= RATE + BURST + 1,
            "{a} admitted on the fallback: {per:?}"
        );
        assert!(a >= RATE * 8 / 10, "{a} admitted on the fallback: {per:?}");
    }
    // A second that straddles the resume may start each regime with its burst; none may lock
    // the key (what the nodes admitted on the fallback is not charged to the cluster again).
    for &a in &per[7..10] {
        assert!(
            (RATE / 2..=bound + BURST + 1).contains(&a),
            "{a} admitted in a second around the restart: {per:?}"
        );
    }
    let back: u64 = per[7..11].iter().sum();
    assert!(
        back >= 4 * RATE * 9 / 10,
        "{back} admitted in the 4 s around the restart: {per:?}"
    );
    assert!(
        (RATE / 2..=bound).contains(&per[10]),
        "{} admitted once shared again: {per:?}",
        per[10]
    );
    restarted.unwrap().kill();
}

/// Two nodes; the second loses Redis for 3 s while the first keeps syncing. The second admits
/// its fallback share meanwhile (over the limit by that share: each side decides alone); when
/// it resumes, the key goes on admitting at the limit's rate: what the second admitted on its
/// fallback is not pushed onto the TAT the first kept current (pushed, it would lock the key
/// for about as long as the cut lasted).
fn one_node_cut_off() {
    let redis = Redis::start(free_port(), None);
    let relay = Relay::start(redis.port);
    let a = engine(&format!("redis://127.0.0.1:{}/0", redis.port), 2);
    let b = engine(&format!("redis://127.0.0.1:{}/0", relay.port), 2);
    // Shared 0-1; the second cut off at 2 s (on its fallback from 2.3 s), mended at 5 s: it
    // resumes within its retry backoff (≤ 2 s).
    let s = run(&[a, Arc::clone(&b)], 9, |start| {
        std::thread::sleep(Duration::from_secs(2));
        relay.cut();
        std::thread::sleep(
            (start + Duration::from_secs(5)).saturating_duration_since(Instant::now()),
        );
        relay.mend();
    });
    let per: Vec<u64> = s.admitted.iter().map(|a| a.load(Relaxed)).collect();
    let fallback = b
        .cluster(0)
        .unwrap()
        .stats()
        .fallback_decisions
        .load(Relaxed);
    println!(
        "cluster gcra, one node cut off in seconds 2-4: admitted per second {per:?} (limit \
         {RATE}/s; the cut-off node's fallback share {}/s); its fallback decisions {fallback}",
        RATE / 2
    );
    assert!(fallback > 0, "the cut-off node never fell back");
    for (i, &n) in per.iter().enumerate().skip(1) {
        assert!(n >= RATE / 2, "{n} admitted in second {i}: {per:?}");
        assert!(
            n <= RATE + RATE / 2 + 2 * (BURST + 1),
            "{n} admitted in second {i}: {per:?}"
        );
    }
    let after: u64 = per[6..9].iter().sum();
    assert!(
        after >= 3 * RATE * 9 / 10,
        "{after} admitted after the resume: {per:?}"
    );
    redis.kill();
}
