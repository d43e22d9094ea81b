//! Cluster concurrency pools against a real redis-server: three nodes (engines, each with its
//! own syncer and node id) share one `max = 30` pool on one key while worker threads hold
//! permits like slow requests. The requests in flight over all nodes, counted where the
//! "backend" runs them, never exceed `max` while Redis is up; the share follows demand from
//! one node to another; a node that stops syncing (dead) gives its share back when its grant
//! lease ends; with Redis killed the nodes keep their grants, then fall back to
//! `max ÷ expected_nodes`, and no request waits for the network. The measured figures are
//! printed (docs/CLUSTER.md quotes them).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::clock::monotonic_ns;
use weir::policy::config::CompiledPolicy;
use weir::policy::engine::{Action, Engine};
use weir::policy::request::OwnedRequest;

#[path = "redis_server.rs"]
mod redis_server;
use redis_server::{free_port, Redis};

const MAX: u64 = 30;
const NODES: usize = 3;
const HOLD: Duration = Duration::from_millis(20);

fn policy(url: &str) -> String {
    format!(
        "[zones.pool]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = {MAX}\n\
         scope = \"cluster\"\nredis = \"{url}\"\nsync_interval = \"50ms\"\nexpected_nodes = {NODES}\n\
         [[limit]]\nname = \"search\"\nclass = \"*\"\nzone = \"pool\"\nkey = \"global\"\n"
    )
}

fn node(url: &str) -> Arc<Engine> {
    Arc::new(Engine::new(CompiledPolicy::parse(&policy(url), None).unwrap()).unwrap())
}

/// The nodes, their workers and what the "backend" sees.
struct Cluster {
    /// A node's engine; replaced when the node "restarts".
    nodes: Vec<Mutex<Arc<Engine>>>,
    /// Workers wanted busy per node (the others idle).
    busy: Vec<AtomicUsize>,
    /// Requests running in the backend, per node and in all.
    running: Vec<AtomicU64>,
    total: AtomicU64,
    /// Highest `total` seen since the last reset.
    peak: AtomicU64,
    /// Longest evaluation, ns.
    slowest: AtomicU64,
    /// Nodes whose workers leak their permits instead of releasing (a dead node's requests).
    leak: Vec<AtomicBool>,
    stop: AtomicBool,
}

impl Cluster {
    fn new(url: &str) -> Arc<Cluster> {
        let nodes = (0..NODES).map(|_| Mutex::new(node(url))).collect();
        fn many<T: Default>() -> Vec<T> {
            (0..NODES).map(|_| T::default()).collect()
        }
        Arc::new(Cluster {
            nodes,
            busy: many(),
            running: many(),
            total: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            slowest: AtomicU64::new(0),
            leak: many(),
            stop: AtomicBool::new(false),
        })
    }

    /// Worker `w` of node `n`: while among the node's busy workers, sends a request; a pass
    /// is held for [`HOLD`] (counted as running), a refusal retried after 2 ms.
    fn worker(self: Arc<Self>, n: usize, w: usize) {
        let req = OwnedRequest::new("GET", "/search", "192.0.2.1".parse().unwrap());
        while !self.stop.load(Relaxed) {
            let e = self.node(n);
            if w >= self.busy[n].load(Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            let t = monotonic_ns();
            let mut out = e.evaluate(&req, t).unwrap();
            self.slowest.fetch_max(monotonic_ns() - t, Relaxed);
            if out.action != Action::Pass {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            self.running[n].fetch_add(1, Relaxed);
            let now = self.total.fetch_add(1, Relaxed) + 1;
            self.peak.fetch_max(now, Relaxed);
            std::thread::sleep(HOLD);
            self.total.fetch_sub(1, Relaxed);
            self.running[n].fetch_sub(1, Relaxed);
            // A dead node's requests never give their permits back.
            if !self.leak[n].load(Relaxed) {
                e.release(std::mem::take(&mut out.permits), monotonic_ns());
            }
        }
    }

    fn set(&self, busy: [usize; NODES]) {
        for (b, n) in self.busy.iter().zip(busy) {
            b.store(n, Relaxed);
        }
    }

    fn node(&self, n: usize) -> Arc<Engine> {
        Arc::clone(&self.nodes[n].lock().unwrap())
    }

    fn running(&self, n: usize) -> u64 {
        self.running[n].load(Relaxed)
    }

    /// How long until `f` holds (sampled every 5 ms), at most `limit`.
    fn until(&self, limit: Duration, f: impl Fn(&Cluster) -> bool) -> Option<Duration> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if f(self) {
                return Some(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }
}

fn main() {
    let mut redis = Redis::start(free_port(), None);
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let c = Cluster::new(&url);
    let workers: Vec<_> = (0..NODES)
        .flat_map(|n| (0..40).map(move |w| (n, w)))
        .map(|(n, w)| {
            let c = Arc::clone(&c);
            std::thread::spawn(move || c.worker(n, w))
        })
        .collect();

    // 1. Demand on two nodes, then moved to the third.
    c.set([25, 15, 0]);
    std::thread::sleep(Duration::from_secs(2));
    let before = [c.running(0), c.running(1), c.running(2)];
    c.set([0, 5, 35]);
    let moved = c.until(Duration::from_secs(5), |c| c.running(2) >= 20);
    std::thread::sleep(Duration::from_secs(1));
    let after = [c.running(0), c.running(1), c.running(2)];
    let peak = c.peak.swap(0, Relaxed);
    // The syncers' cost: Redis commands and bytes per sync and node (one key). One INFO
    // before and after (each counts itself once).
    let stats = || -> [u64; 3] {
        let mut con = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        let text: String = redis::cmd("INFO").arg("stats").query(&mut con).unwrap();
        let field = |f: &str| -> u64 {
            let line = text.lines().find(|l| l.starts_with(f)).unwrap();
            line[f.len() + 1..].trim().parse().unwrap()
        };
        [
            field("total_commands_processed"),
            field("total_net_input_bytes"),
            field("total_net_output_bytes"),
        ]
    };
    let syncs = || -> u64 {
        (0..NODES)
            .map(|n| c.node(n).cluster(0).unwrap().stats().syncs_ok.load(Relaxed))
            .sum()
    };
    let (st0, s0) = (stats(), syncs());
    std::thread::sleep(Duration::from_secs(1));
    let (st1, n) = (stats(), (syncs() - s0).max(1));
    let per = |i: usize| (st1[i] - st0[i]) as f64 / n as f64;
    println!(
        "syncer cost, one key: one EVALSHA ({:.2} commands as Redis counts them, the script's \
         own included), {:.0} bytes to Redis and {:.0} back per sync and node ({n} syncs)",
        per(0),
        per(1),
        per(2)
    );
    println!(
        "demand 25/15/0 → 0/5/35: running {before:?} → {after:?}; node 3 reached 20 in flight \
         after {moved:?}; peak in flight over the nodes {peak} (max {MAX})"
    );
    assert!(peak <= MAX, "{peak} in flight over the nodes, max {MAX}");
    assert!(
        before[0] + before[1] >= 20,
        "the busy nodes got little: {before:?}"
    );
    assert!(
        moved.is_some(),
        "the share did not follow the demand: {after:?}"
    );

    // 2. A node stops syncing (dead) with its permits held: its share comes back.
    c.set([20, 0, 20]);
    std::thread::sleep(Duration::from_secs(1));
    c.leak[0].store(true, Relaxed);
    c.set([0, 0, 40]);
    std::thread::sleep(Duration::from_millis(100));
    c.node(0).stop_syncers();
    let t0 = Instant::now();
    let back = c.until(Duration::from_secs(6), |c| c.running(2) >= 25);
    let peak = c.peak.swap(0, Relaxed);
    println!(
        "node 1 dead holding its share: node 3 reached 25 in flight after {:?} (grant lease \
         1 s); peak {peak}",
        back.map(|_| t0.elapsed())
    );
    assert!(back.is_some(), "a dead node's share never came back");
    assert!(peak <= MAX, "{peak} in flight over the nodes, max {MAX}");
    // It restarts: a new process, a new node id.
    *c.nodes[0].lock().unwrap() = node(&url);
    c.leak[0].store(false, Relaxed);

    // 3. Redis flushed under load (a failover to an empty replica looks the same): the nodes
    //    learn their grants again at their next syncs.
    c.set([15, 15, 15]);
    std::thread::sleep(Duration::from_secs(1));
    c.peak.store(0, Relaxed);
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let flush_peak = c.peak.swap(0, Relaxed);
    println!("redis flushed under load: peak {flush_peak} in flight over the next 2 s");
    assert!(
        flush_peak <= MAX + (NODES as u64 - 1) * (MAX - NODES as u64),
        "{flush_peak} in flight after a flush"
    );

    // 4. Redis hung (SIGSTOP) for 2 s under load: the syncs time out, nobody waits for them.
    c.slowest.store(0, Relaxed);
    c.peak.store(0, Relaxed);
    redis.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(2));
    redis.signal(libc::SIGCONT);
    let (hung_peak, hung_slowest) = (c.peak.swap(0, Relaxed), c.slowest.load(Relaxed));
    let resynced = c.until(Duration::from_secs(5), |c| {
        (0..NODES).all(|n| c.node(n).cluster(0).unwrap().healthy(monotonic_ns()))
    });
    println!(
        "redis hung (SIGSTOP) 2 s: peak {hung_peak} in flight, slowest evaluation \
         {hung_slowest} ns; resumed: all nodes synced after {resynced:?}"
    );
    assert!(
        hung_slowest < 50_000_000,
        "an evaluation waited {hung_slowest} ns"
    );
    assert!(hung_peak <= MAX, "{hung_peak} in flight with Redis hung");
    assert!(
        resynced.is_some(),
        "the nodes did not sync again after SIGCONT"
    );

    // 5. Redis killed under load: grants kept until their lease ends, then max ÷ nodes each;
    //    no request waits for the network. Restarted: the nodes sync again.
    c.set([15, 15, 15]);
    std::thread::sleep(Duration::from_secs(2));
    c.slowest.store(0, Relaxed);
    c.peak.store(0, Relaxed);
    let port = redis.port;
    let fallbacks = |c: &Cluster| -> u64 {
        (0..NODES)
            .map(|n| {
                c.node(n)
                    .cluster(0)
                    .unwrap()
                    .stats()
                    .fallback_decisions
                    .load(Relaxed)
            })
            .sum()
    };
    let before = fallbacks(&c);
    redis.kill();
    let killed = Instant::now();
    let fell_back = c.until(Duration::from_secs(3), |c| fallbacks(c) > before);
    std::thread::sleep(Duration::from_secs(3).saturating_sub(killed.elapsed()));
    let down_peak = c.peak.swap(0, Relaxed);
    let on_fallback = (0..NODES).all(|n| {
        let e = c.node(n);
        let z = e.cluster(0).unwrap();
        !z.healthy(monotonic_ns()) && z.stats().fallback_decisions.load(Relaxed) > 0
    });
    let slowest = c.slowest.load(Relaxed);
    let fallback_running = [c.running(0), c.running(1), c.running(2)];
    redis = Redis::start(port, None);
    let synced = c.until(Duration::from_secs(5), |c| {
        (0..NODES).all(|n| c.node(n).cluster(0).unwrap().healthy(monotonic_ns()))
    });
    std::thread::sleep(Duration::from_secs(1));
    c.peak.store(0, Relaxed);
    std::thread::sleep(Duration::from_secs(2));
    let resumed_peak = c.peak.load(Relaxed);
    println!(
        "redis killed for 3 s: grants kept {fell_back:?} (lease 1 s), then peak {down_peak} in \
         flight (fallback {} per node), running {fallback_running:?} at the end, slowest \
         evaluation {slowest} ns; restarted: all nodes synced after {synced:?}, then peak \
         {resumed_peak}",
        MAX / NODES as u64
    );
    assert!(on_fallback, "the nodes did not fall back with Redis away");
    assert!(slowest < 50_000_000, "an evaluation waited {slowest} ns");
    assert!(
        down_peak <= MAX + (NODES as u64 - 1) * (MAX / NODES as u64),
        "{down_peak} in flight with Redis away"
    );
    assert!(synced.is_some(), "the nodes did not sync again");
    assert!(
        resumed_peak <= MAX,
        "{resumed_peak} in flight after the restart"
    );

    c.stop.store(true, Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let mut prom = String::new();
    c.node(2).render_prometheus(&mut prom).unwrap();
    for family in [
        "weir_cluster_share",
        "weir_cluster_demand",
        "weir_cluster_sync_age_ms",
    ] {
        assert!(prom.contains(family), "{family} missing:\n{prom}");
    }
    redis.kill();
    println!("cluster pool: ok");
}
