//! Cluster-scope zones against a real redis-server (Debian's; `make setup` installs it): three
//! node processes (this binary, re-spawned) loading one key stay within the over-admission
//! bound of docs/CLUSTER.md; Redis killed mid-run → requests keep flowing on the counted
//! fallback; Redis restarted → sync resumes; `requirepass` honoured. Plus validation errors.
//! A plain `main` (no harness): the node processes are this binary with WEIR_CLUSTER_NODE set.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use weir::clock::monotonic_ns;
use weir::cluster::ClusterShared;
use weir::policy::config::{check_policy, CompiledPolicy};
use weir::policy::counters::Counters;
use weir::policy::engine::{Action, Engine};
use weir::policy::request::OwnedRequest;
use weir::region::{Fresh, Region};
use weir::table::Table;

#[path = "../common/mod.rs"]
mod common;
#[path = "redis_server.rs"]
mod redis_server;
use redis_server::{free_port, Redis};

const S: u64 = 1_000_000_000;
const NODES: usize = 3;

/// Counts allocations made by threads that opted in (the syncer threads allocate freely).
struct Counting;
static ALLOCS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
thread_local! {
    static COUNT_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
fn note() {
    if COUNT_HERE.try_with(|c| c.get()).unwrap_or(false) {
        ALLOCS.fetch_add(1, Relaxed);
    }
}
// SAFETY: forwards to the system allocator unchanged, counting calls.
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        note();
        std::alloc::System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        note();
        std::alloc::System.alloc_zeroed(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        std::alloc::System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, n: usize) -> *mut u8 {
        note();
        std::alloc::System.realloc(p, l, n)
    }
}
#[global_allocator]
static GLOBAL: Counting = Counting;

fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn policy(url: &str, extra: &str, events: u64) -> String {
    format!(
        "[zones.api]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = {events}\nwindow = \"1s\"\n\
         scope = \"cluster\"\nredis = \"{url}\"\nsync_interval = \"100ms\"\nexpected_nodes = {NODES}\n{extra}\
         [[limit]]\nclass = \"*\"\nzone = \"api\"\nkey = \"global\"\n"
    )
}

fn engine(src: &str) -> Engine {
    Engine::new(CompiledPolicy::parse(src, None).unwrap()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// node processes

/// In a node process: offer `rate` requests/s on one key for `secs` from `start` (realtime
/// ns), print per wall-clock second: admitted, offered, fallback decisions; then a summary.
fn node() {
    let env = |k: &str| std::env::var(k).unwrap();
    let url = env("WEIR_NODE_URL");
    let secs: u64 = env("WEIR_NODE_SECS").parse().unwrap();
    let rate: u64 = env("WEIR_NODE_RATE").parse().unwrap();
    let events: u64 = env("WEIR_NODE_EVENTS").parse().unwrap();
    let start: u64 = env("WEIR_NODE_START").parse().unwrap();
    let e = engine(&policy(&url, "", events));
    let z = e.cluster(0).unwrap();
    let req = OwnedRequest::new("GET", "/x", "192.0.2.1".parse().unwrap());
    let n = secs * rate;
    let mut rows = std::collections::BTreeMap::<u64, [u64; 3]>::new();
    let mut max_lat = 0u64;
    for i in 0..n {
        let due = start + i * S / rate;
        let now = realtime_ns();
        if due > now {
            std::thread::sleep(Duration::from_nanos(due - now));
        }
        let fb = z.stats().fallback_decisions.load(Relaxed);
        let t = monotonic_ns();
        let out = e.evaluate(&req, t).unwrap();
        max_lat = max_lat.max(monotonic_ns() - t);
        let row = rows.entry(realtime_ns() / S).or_default();
        row[0] += u64::from(out.action == Action::Pass);
        row[1] += 1;
        row[2] += z.stats().fallback_decisions.load(Relaxed) - fb;
    }
    let mut out = String::new();
    for (w, r) in rows {
        out += &format!("W {w} {} {} {}\n", r[0], r[1], r[2]);
    }
    let st = z.stats();
    out += &format!(
        "S {} {} {} {} {}\n",
        st.syncs_ok.load(Relaxed),
        st.sync_errors.load(Relaxed),
        st.fallback_decisions.load(Relaxed),
        max_lat,
        u64::from(z.healthy(monotonic_ns()))
    );
    let mut prom = String::new();
    e.render_prometheus(&mut prom).unwrap();
    for l in prom.lines().filter(|l| l.starts_with("weir_cluster_")) {
        out += &format!("P {l}\n");
    }
    print!("{out}");
}

struct NodeReport {
    windows: Vec<(u64, [u64; 3])>,
    syncs_ok: u64,
    sync_errors: u64,
    fallback: u64,
    max_lat_ns: u64,
    healthy_at_end: bool,
    prom: Vec<String>,
}

fn spawn_nodes(url: &str, secs: u64, rate: u64, events: u64, start: u64) -> Vec<Child> {
    let me = std::env::current_exe().unwrap();
    (0..NODES)
        .map(|_| {
            Command::new(&me)
                .env("WEIR_CLUSTER_NODE", "1")
                .env("WEIR_NODE_URL", url)
                .env("WEIR_NODE_SECS", secs.to_string())
                .env("WEIR_NODE_RATE", rate.to_string())
                .env("WEIR_NODE_EVENTS", events.to_string())
                .env("WEIR_NODE_START", start.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect()
}

fn collect(children: Vec<Child>) -> Vec<NodeReport> {
    children
        .into_iter()
        .map(|mut c| {
            let mut r = NodeReport {
                windows: vec![],
                syncs_ok: 0,
                sync_errors: 0,
                fallback: 0,
                max_lat_ns: 0,
                healthy_at_end: false,
                prom: vec![],
            };
            for line in BufReader::new(c.stdout.take().unwrap()).lines() {
                let line = line.unwrap();
                let f: Vec<&str> = line.split(' ').collect();
                let n = |i: usize| f[i].parse::<u64>().unwrap();
                match f[0] {
                    "W" => r.windows.push((n(1), [n(2), n(3), n(4)])),
                    "S" => {
                        (r.syncs_ok, r.sync_errors, r.fallback, r.max_lat_ns) =
                            (n(1), n(2), n(3), n(4));
                        r.healthy_at_end = n(5) == 1;
                    }
                    "P" => r.prom.push(line[2..].to_owned()),
                    _ => panic!("unexpected node output {line:?}"),
                }
            }
            assert!(c.wait().unwrap().success(), "node process failed");
            r
        })
        .collect()
}

/// Per wall-clock second: (admitted, offered, fallback decisions) summed over nodes.
fn per_window(reports: &[NodeReport]) -> std::collections::BTreeMap<u64, [u64; 3]> {
    let mut m = std::collections::BTreeMap::<u64, [u64; 3]>::new();
    for r in reports {
        for (w, v) in &r.windows {
            let e = m.entry(*w).or_default();
            for k in 0..3 {
                e[k] += v[k];
            }
        }
    }
    m
}

/// A start time: the next whole second at least 1.5 s away (nodes connect meanwhile).
fn aligned_start() -> u64 {
    (realtime_ns() + 3 * S / 2).div_ceil(S) * S
}

// ---------------------------------------------------------------------------------------------
// tests

const EVENTS: u64 = 100;
const RATE: u64 = 300; // per node: 3× the cluster-wide limit each, 9× together

/// The bound of docs/CLUSTER.md: events + (N−1)·min(events, r·λ), λ = 2·sync_interval + slack.
fn bound() -> u64 {
    let lag_ms = 2 * 100 + 50;
    EVENTS + (NODES as u64 - 1) * EVENTS.min(RATE * lag_ms / 1000)
}

fn three_nodes_stay_within_the_bound() {
    let redis = Redis::start(free_port(), None);
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let secs = 6;
    let start = aligned_start();
    let reports = collect(spawn_nodes(&url, secs, RATE, EVENTS, start));
    redis.kill();
    let m = per_window(&reports);
    // Seconds in which the nodes offered (nearly) their full rate: a node that the machine
    // slowed down sends part of one second's requests in the next. Seconds with more than
    // NODES·RATE (a node catching up in a burst) are left out: the bound assumes rate RATE.
    let offered = NODES as u64 * RATE;
    let full: Vec<_> = m
        .iter()
        .filter(|(_, v)| (offered * 9 / 10..=offered).contains(&v[1]))
        .collect();
    assert!(full.len() >= 4, "too few full windows: {m:?}");
    let admitted: Vec<u64> = full.iter().map(|(_, v)| v[0]).collect();
    let worst = *admitted.iter().max().unwrap();
    let avg = admitted.iter().sum::<u64>() as f64 / admitted.len() as f64;
    println!(
        "three nodes, {EVENTS}/s cluster-wide, {RATE}/s offered per node, sync 100ms: admitted per second {admitted:?} \
         (worst {worst}, mean {avg:.1}; bound {}; without sync it would be {})",
        bound(),
        NODES as u64 * EVENTS
    );
    for r in &reports {
        assert_eq!(r.fallback, 0, "no fallback expected with Redis up");
        assert!(r.syncs_ok >= 40, "syncs: {}", r.syncs_ok);
    }
    assert!(worst <= bound(), "over the bound: {admitted:?}");
    assert!(
        admitted.iter().all(|&a| a >= EVENTS * 8 / 10),
        "under-admission: {admitted:?}"
    );
}

fn redis_killed_then_restarted() {
    let port = free_port();
    let redis = Redis::start(port, None);
    let url = format!("redis://127.0.0.1:{port}/0");
    let secs = 9;
    let start = aligned_start();
    let children = spawn_nodes(&url, secs, RATE, EVENTS, start);
    // Kill 2.5 s in, restart (empty) 5.5 s in.
    let wait_until = |t: u64| {
        let now = realtime_ns();
        if t > now {
            std::thread::sleep(Duration::from_nanos(t - now));
        }
    };
    wait_until(start + 5 * S / 2);
    redis.kill();
    let killed_at = realtime_ns() / S;
    wait_until(start + 11 * S / 2);
    let redis = Redis::start(port, None);
    let restarted_at = realtime_ns() / S;
    let reports = collect(children);
    redis.kill();
    let m = per_window(&reports);
    println!("redis killed in second {killed_at}, restarted in second {restarted_at}:");
    for (w, v) in &m {
        println!(
            "  second {w}: admitted {} of {} offered, {} on fallback",
            v[0], v[1], v[2]
        );
    }
    for r in &reports {
        let offered: u64 = r.windows.iter().map(|w| w.1[1]).sum();
        assert_eq!(offered, secs * RATE, "every request was evaluated");
        assert!(
            r.max_lat_ns < 50_000_000,
            "a request waited {} ns",
            r.max_lat_ns
        );
        assert!(r.fallback > 0, "fallback decisions counted");
        assert!(r.sync_errors > 0, "sync errors counted");
        assert!(r.healthy_at_end, "sync resumed after the restart");
        assert!(
            r.prom.iter().any(|l| l
                == &format!(
                    "weir_cluster_fallback_decisions_total{{zone=\"api\"}} {}",
                    r.fallback
                )),
            "{:?}",
            r.prom
        );
        println!(
            "  node: syncs ok {}, sync errors {}, fallback decisions {}, slowest evaluate {} µs",
            r.syncs_ok,
            r.sync_errors,
            r.fallback,
            r.max_lat_ns / 1000
        );
    }
    // Seconds wholly on fallback: each node its share, events ÷ 3 (33), so ≤ 99 in total.
    for (w, v) in &m {
        if v[2] == v[1] && v[1] == NODES as u64 * RATE {
            assert!(v[0] <= EVENTS, "second {w} on fallback admitted {}", v[0]);
        }
    }
    assert!(
        m.values().any(|v| v[2] == v[1] && v[1] > 0),
        "no second wholly on fallback"
    );
    // The last second: synced again, nothing on fallback, within the bound.
    let last = m
        .values()
        .rev()
        .find(|v| v[1] == NODES as u64 * RATE)
        .unwrap();
    assert_eq!(last[2], 0, "fallback after the restart: {m:?}");
    assert!(last[0] <= bound());
}

fn wait_for(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn requirepass_is_honoured() {
    let redis = Redis::start(free_port(), Some("s3cret"));
    let req = OwnedRequest::new("GET", "/x", "192.0.2.1".parse().unwrap());

    let wrong = engine(&policy(
        &format!("redis://:nope@127.0.0.1:{}/0", redis.port),
        "",
        EVENTS,
    ));
    let z = wrong.cluster(0).unwrap();
    wait_for("a failed sync", || z.stats().sync_errors.load(Relaxed) >= 2);
    assert!(!z.healthy(monotonic_ns()));
    let now = monotonic_ns();
    let passed = (0..60)
        .filter(|_| wrong.evaluate(&req, now).unwrap().action == Action::Pass)
        .count() as u64;
    assert_eq!(passed, EVENTS / NODES as u64, "fallback share");
    assert_eq!(z.stats().fallback_decisions.load(Relaxed), 60);
    let mut prom = String::new();
    wrong.render_prometheus(&mut prom).unwrap();
    assert!(prom.contains("weir_cluster_fallback_decisions_total{zone=\"api\"} 60"));
    assert!(prom.contains("weir_cluster_fallback_active{zone=\"api\"} 1"));
    assert!(!prom.contains("weir_cluster_sync_errors_total{zone=\"api\"} 0"));

    let right = engine(&policy(
        &format!("redis://127.0.0.1:{}/0", redis.port),
        "password = \"s3cret\"\n",
        EVENTS,
    ));
    let z = right.cluster(0).unwrap();
    wait_for("a sync with the password", || z.healthy(monotonic_ns()));
    assert_eq!(z.stats().sync_errors.load(Relaxed), 0);
    let in_url = engine(&policy(
        &format!("redis://:s3cret@127.0.0.1:{}/0", redis.port),
        "",
        EVENTS,
    ));
    wait_for("a sync with the password in the URL", || {
        in_url.cluster(0).unwrap().healthy(monotonic_ns())
    });
    drop((wrong, right, in_url));
    redis.kill();
    println!("requirepass: wrong password → fallback ({passed} of 60 admitted) and counted errors; right password → synced");
}

/// The request path of a cluster zone (synced, and on the fallback) allocates nothing.
fn request_path_allocates_nothing() {
    let redis = Redis::start(free_port(), None);
    let synced = engine(&policy(
        &format!("redis://127.0.0.1:{}/0", redis.port),
        "",
        EVENTS,
    ));
    let down = engine(&policy("redis://127.0.0.1:1/0", "", EVENTS));
    wait_for("a sync", || {
        synced.cluster(0).unwrap().healthy(monotonic_ns())
    });
    let reqs: Vec<OwnedRequest> = (0..50)
        .map(|i| {
            OwnedRequest::new(
                "GET",
                &format!("/p/{i}"),
                format!("192.0.2.{i}").parse().unwrap(),
            )
        })
        .collect();
    for (e, what) in [(&synced, "synced"), (&down, "fallback")] {
        for r in &reqs {
            e.evaluate(r, monotonic_ns()).unwrap();
        }
        COUNT_HERE.with(|c| c.set(true));
        for i in 0..10_000 {
            let out = e.evaluate(&reqs[i % reqs.len()], monotonic_ns()).unwrap();
            std::hint::black_box(out);
        }
        COUNT_HERE.with(|c| c.set(false));
        assert_eq!(
            ALLOCS.load(Relaxed),
            0,
            "{what}: allocations on the request path"
        );
    }
    assert!(
        down.cluster(0)
            .unwrap()
            .stats()
            .fallback_decisions
            .load(Relaxed)
            >= 10_000
    );
    drop((synced, down));
    redis.kill();
    println!("request path: 20,000 evaluations (synced and on fallback), 0 allocations");
}

/// Two engines over one shared table (two nginx workers over one zone): one elected syncer,
/// so the node's counts reach Redis once, not once per process.
fn shared_table_syncs_once() {
    let redis = Redis::start(free_port(), None);
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let p = CompiledPolicy::parse(&policy(&url, "", EVENTS), None).unwrap();
    let l = &Engine::layouts(&p)[0];
    let r = common::SharedRegion::new(l.bytes);
    // SAFETY: the mapping outlives both engines (dropped at the end of this function, after
    // them); created before it is attached.
    let (t1, t2) = unsafe {
        let t1 = Table::create(r.ptr, l.bytes, l.schema, 0).unwrap();
        (t1, Table::attach(r.ptr, l.bytes, l.schema).unwrap())
    };
    let a = Engine::with_tables(p.clone(), vec![t1]).unwrap();
    let b = Engine::with_tables(p, vec![t2]).unwrap();
    let (za, zb) = (a.cluster(0).unwrap(), b.cluster(0).unwrap());
    wait_for("an elected syncer", || {
        za.stats().leader.load(Relaxed) + zb.stats().leader.load(Relaxed) == 1
            && (za.healthy(monotonic_ns()) || zb.healthy(monotonic_ns()))
    });
    let req = OwnedRequest::new("GET", "/x", "192.0.2.1".parse().unwrap());
    // Early in a fresh second so that every request and its push fall in one window.
    let w = realtime_ns() / S + 1;
    std::thread::sleep(Duration::from_nanos((w * S).saturating_sub(realtime_ns())));
    let mut passed = 0;
    // 30: the non-elected process has no remote counts of its own yet (docs/CLUSTER.md) and
    // decides on the fallback share (33) over the shared local counts.
    for i in 0..30 {
        let e = if i % 2 == 0 { &a } else { &b };
        passed += u64::from(e.evaluate(&req, monotonic_ns()).unwrap().action == Action::Pass);
    }
    std::thread::sleep(Duration::from_millis(300));
    let pushed = za.stats().pushed_units.load(Relaxed) + zb.stats().pushed_units.load(Relaxed);
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("weir:api:*").query(&mut c).unwrap();
    let total: u64 = keys
        .iter()
        .map(|k| redis::cmd("GET").arg(k).query::<u64>(&mut c).unwrap())
        .sum();
    assert_eq!(passed, 30);
    assert_eq!(pushed, 30, "pushed once, by the elected syncer");
    assert_eq!(total, 30, "Redis holds the node's count once: {keys:?}");
    drop((a, b));
    redis.kill();
    println!("shared table: two engines, one elected syncer, 30 admitted → 30 in Redis");
}

/// Two engines over one shared table and one shared cluster region (two nginx workers over a
/// cluster zone): both decide with the same remote counts and health, the non-elected one
/// included; when the leader goes, the other continues from the pushed counts it left.
fn shared_region_one_view_and_handover() {
    let redis = Redis::start(free_port(), None);
    let url = format!("redis://127.0.0.1:{}/0", redis.port);
    let p = CompiledPolicy::parse(&policy(&url, "", EVENTS), None).unwrap();
    let l = &Engine::layouts(&p)[0];
    assert!(l.cluster_bytes > 0);
    let (r, cr) = (
        common::SharedRegion::new(l.bytes),
        common::SharedRegion::new(l.cluster_bytes),
    );
    let nlimits = p.limits.len();
    let engine = |first: bool| {
        // SAFETY: the mappings outlive both engines (dropped at the end of this function,
        // after them); created before they are attached by the second engine.
        let (zone, cluster) = unsafe {
            (
                Region::new(r.ptr, l.bytes, 64).unwrap(),
                Region::new(cr.ptr, l.cluster_bytes, 64).unwrap(),
            )
        };
        let (t, _) = Table::create_or_attach_in(zone, l.schema, 0, Fresh::Unknown).unwrap();
        let (c, kept) =
            ClusterShared::create_or_attach_in(cluster, t.capacity(), l.schema, Fresh::Unknown)
                .unwrap();
        assert_eq!(kept, !first);
        Engine::with_shared(
            p.clone(),
            vec![t],
            vec![Some(c)],
            Counters::new(nlimits),
            true,
        )
        .unwrap()
    };
    let (a, b) = (engine(true), engine(false));
    let other = engine_of(&url);
    let (za, zb) = (a.cluster(0).unwrap(), b.cluster(0).unwrap());
    wait_for("an elected syncer, both healthy", || {
        u64::from(za.is_leader()) + u64::from(zb.is_leader()) == 1
            && za.healthy(monotonic_ns())
            && zb.healthy(monotonic_ns())
            && other.cluster(0).unwrap().healthy(monotonic_ns())
    });
    let req = OwnedRequest::new("GET", "/x", "192.0.2.1".parse().unwrap());
    // Early in a fresh second: the other node admits 40, then this node's two processes take
    // turns; both see the other's 40 once synced, so the node admits exactly 60 (a process on
    // the fallback share would stop at 33 of the node's own counts, one deciding on its own
    // counts alone would admit 100).
    let w = realtime_ns() / S + 1;
    std::thread::sleep(Duration::from_nanos((w * S).saturating_sub(realtime_ns())));
    for _ in 0..40 {
        assert_eq!(
            other.evaluate(&req, monotonic_ns()).unwrap().action,
            Action::Pass
        );
    }
    // A key this node has not counted yet has no remote counts (docs/CLUSTER.md): count it
    // once, then let a sync pull the other's 40.
    let fb = za.stats().fallback_decisions.load(Relaxed);
    let mut passed = u64::from(a.evaluate(&req, monotonic_ns()).unwrap().action == Action::Pass);
    std::thread::sleep(Duration::from_millis(350));
    for i in 0..100 {
        let e = if i % 2 == 0 { &a } else { &b };
        passed += u64::from(e.evaluate(&req, monotonic_ns()).unwrap().action == Action::Pass);
    }
    assert!(realtime_ns() / S == w, "the test ran past its window");
    assert_eq!(
        passed,
        EVENTS - 40,
        "both processes decide with the cluster view"
    );
    assert_eq!(za.stats().fallback_decisions.load(Relaxed), fb);
    // One set of stats: both processes read the same words.
    assert_eq!(
        za.stats().syncs_ok.load(Relaxed),
        zb.stats().syncs_ok.load(Relaxed)
    );
    std::thread::sleep(Duration::from_millis(300));
    let pushed = za.stats().pushed_units.load(Relaxed);
    assert_eq!(pushed, 60, "the node's 60 pushed once");
    // The leader goes (an nginx worker exits); the other takes over and pushes nothing again.
    let (gone, stays) = if za.is_leader() { (a, b) } else { (b, a) };
    let syncs = gone.cluster(0).unwrap().stats().syncs_ok.load(Relaxed);
    drop(gone);
    let zs = stays.cluster(0).unwrap();
    wait_for("the other process syncing", || {
        zs.is_leader() && zs.stats().syncs_ok.load(Relaxed) > syncs + 2
    });
    assert_eq!(zs.stats().pushed_units.load(Relaxed), 60, "no re-push");
    let mut c = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("weir:api:*").query(&mut c).unwrap();
    let total: u64 = keys
        .iter()
        .map(|k| redis::cmd("GET").arg(k).query::<u64>(&mut c).unwrap())
        .sum();
    assert_eq!(total, EVENTS, "Redis holds 40 + 60: {keys:?}");
    drop((stays, other));
    redis.kill();
    println!(
        "shared cluster region: 2 processes admit {passed} beside the other node's 40 (0 \
         fallback); leader gone → the other syncs on, 0 units re-pushed"
    );
}

fn engine_of(url: &str) -> Engine {
    engine(&policy(url, "", EVENTS))
}

fn validation() {
    let base = "[zones.z]\nsize = \"1m\"\n";
    let limit = "[[limit]]\nclass = \"*\"\nzone = \"z\"\n";
    let err = |body: &str| {
        let src = format!("{base}{body}{limit}");
        let e = check_policy(&src, Some("p.toml")).expect_err("an error");
        format!("{}:{}: {}", e[0].line, e[0].column, e[0].message)
    };
    let e = err("algorithm = \"log\"\nevents = 5\nwindow = \"1s\"\nscope = \"cluster\"\nredis = \"redis://x\"\nexpected_nodes = 2\n");
    assert!(
        e.starts_with("6:9: ") && e.contains("event times are not shared"),
        "{e}"
    );
    let gcra = format!("{base}algorithm = \"gcra\"\nrate = \"10r/s\"\nscope = \"cluster\"\nredis = \"redis://x\"\nexpected_nodes = 2\n{limit}");
    check_policy(&gcra, None).expect("a cluster gcra zone");
    let sliding = "algorithm = \"sliding\"\nevents = 10\nwindow = \"1s\"\n";
    let e = err(&format!(
        "{sliding}scope = \"cluster\"\nredis = \"redis://x\"\n"
    ));
    assert!(
        e.starts_with("6:9: ") && e.contains("needs `expected_nodes`"),
        "{e}"
    );
    let e = err(&format!("{sliding}redis = \"redis://x\"\n"));
    assert!(
        e.starts_with("6:9: ") && e.contains("only to zones with scope"),
        "{e}"
    );
    let e = err(&format!("{sliding}scope = \"global\"\n"));
    assert!(e.starts_with("6:9: ") && e.contains("unknown scope"), "{e}");
    let e = err(&format!(
        "{sliding}scope = \"cluster\"\nredis = \"ftp://x\"\nexpected_nodes = 2\n"
    ));
    assert!(
        e.starts_with("7:9: ") && e.contains("invalid redis URL"),
        "{e}"
    );
    let e = err(&format!(
        "{sliding}scope = \"cluster\"\nredis = \"redis://x\"\nexpected_nodes = 20\n"
    ));
    assert!(
        e.starts_with("8:18: ") && e.contains("fallback share"),
        "{e}"
    );
    let e = err(&format!("{sliding}scope = \"cluster\"\nredis = \"redis://x\"\nexpected_nodes = 2\nsync_interval = \"1s\"\n"));
    assert!(
        e.starts_with("9:17: ") && e.contains("quarter of the window"),
        "{e}"
    );
    let pool = "algorithm = \"concurrency\"\nmax = 4\nscope = \"cluster\"\nredis = \"redis://x\"\n";
    let e = err(&format!("{pool}expected_nodes = 5\n"));
    assert!(
        e.starts_with("7:18: ") && e.contains("exceeds max (4)"),
        "{e}"
    );
    let e = err(&format!(
        "{pool}expected_nodes = 2\nsync_interval = \"6s\"\n"
    ));
    assert!(e.starts_with("8:17: ") && e.contains("at most 5s"), "{e}");
    let ok = format!("{base}{pool}expected_nodes = 2\n{limit}");
    let p = check_policy(&ok, None).unwrap();
    assert_eq!(p.zones[0].cluster.as_ref().unwrap().expected_nodes, 2);
    let ok = format!("{base}{sliding}scope = \"cluster\"\nredis = \"redis://127.0.0.1:1/0\"\nexpected_nodes = 2\nfallback = \"local\"\n{limit}");
    let p = check_policy(&ok, None).unwrap();
    let c = p.zones[0].cluster.as_ref().unwrap();
    assert_eq!(c.sync_interval, Duration::from_millis(100));
    assert_eq!(c.expected_nodes, 2);
    println!("validation: cluster settings checked with line:column");
}

fn main() {
    if std::env::var_os("WEIR_CLUSTER_NODE").is_some() {
        node();
        return;
    }
    let tests: [(&str, fn()); 7] = [
        ("validation", validation),
        ("shared_table_syncs_once", shared_table_syncs_once),
        (
            "shared_region_one_view_and_handover",
            shared_region_one_view_and_handover,
        ),
        (
            "request_path_allocates_nothing",
            request_path_allocates_nothing,
        ),
        ("requirepass_is_honoured", requirepass_is_honoured),
        (
            "three_nodes_stay_within_the_bound",
            three_nodes_stay_within_the_bound,
        ),
        ("redis_killed_then_restarted", redis_killed_then_restarted),
    ];
    for (name, f) in tests {
        println!("test {name} ...");
        f();
        println!("test {name} ... ok");
    }
    println!("{} passed, 0 failed", tests.len());
}
