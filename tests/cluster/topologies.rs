//! Cluster zones over the other ways to Redis, each against real servers on loopback: TLS with
//! a private CA and client certificates (redis-server's `--tls-port`, certificates made with
//! `openssl` here), a 3-primary Redis Cluster (`redis-cli --cluster create`), and a master
//! with a replica behind a Sentinel (failover followed; a dead Sentinel listed first skipped). Each checks that two engines share
//! their counts, not just that they connect. Servers are stopped by pid, also on failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use weir::clock::monotonic_ns;
use weir::policy::config::{check_policy, CompiledPolicy};
use weir::policy::engine::{Action, Engine};
use weir::policy::request::OwnedRequest;

/// Started servers (killed by pid on drop) and their temporary directory (removed on drop).
struct Servers {
    children: Vec<Child>,
    dir: PathBuf,
}

impl Servers {
    fn new(what: &str) -> Servers {
        let dir = std::env::temp_dir().join(format!("weir-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Servers {
            children: Vec::new(),
            dir,
        }
    }

    /// Starts `redis-server` with `args`, and waits until its TCP `port` accepts.
    fn redis(&mut self, port: u16, args: &[&str]) -> usize {
        let log = self.dir.join(format!("redis-{port}.log"));
        let child = Command::new("redis-server")
            .args(args)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server not found: run `make setup`");
        self.children.push(child);
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "redis-server on port {port} did not start; its log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.children.len() - 1
    }

    fn kill(&mut self, i: usize) {
        let c = &mut self.children[i];
        let _ = c.kill();
        let _ = c.wait();
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A free port whose cluster bus port (`port + 10000`, which a Cluster node also opens) is
/// free too and in range: otherwise that node does not start.
fn free_cluster_port() -> u16 {
    loop {
        let p = free_port();
        if p <= 55535 && std::net::TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return p;
        }
    }
}

fn wait_for(what: &str, secs: u64, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `redis-cli` with `args`; its standard output.
fn cli(args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(args)
        .stderr(Stdio::null())
        .output()
        .expect("redis-cli not found: run `make setup` (redis-tools)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const EVENTS: u64 = 50;
const KEYS: u8 = 8;

/// A cluster zone of `EVENTS` per hour keyed by client address, reached with `redis` (TOML).
fn policy(redis: &str) -> String {
    format!(
        "[zones.api]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = {EVENTS}\nwindow = \"1h\"\n\
         scope = \"cluster\"\n{redis}\nsync_interval = \"100ms\"\nexpected_nodes = 2\n\
         [[limit]]\nclass = \"*\"\nzone = \"api\"\nkey = \"ip\"\n"
    )
}

fn engine(src: &str) -> Engine {
    Engine::new(CompiledPolicy::parse(src, None).unwrap()).unwrap()
}

/// Admitted of `n` requests from each of the `KEYS` clients.
fn admit(e: &Engine, n: u64) -> [u64; KEYS as usize] {
    let mut out = [0; KEYS as usize];
    for (k, o) in out.iter_mut().enumerate() {
        let req = OwnedRequest::new("GET", "/x", format!("192.0.2.{k}").parse().unwrap());
        *o = (0..n)
            .filter(|_| e.evaluate(&req, monotonic_ns()).unwrap().action == Action::Pass)
            .count() as u64;
    }
    out
}

fn synced(e: &Engine) -> bool {
    e.cluster(0).unwrap().healthy(monotonic_ns())
}

/// Waits until `from`'s admissions (`units` pushed in all) are in Redis and `to` has synced
/// twice since (so it has read them).
fn propagate(from: &Engine, to: &Engine, units: u64) {
    let f = from.cluster(0).unwrap().stats();
    wait_for("the push", 10, || f.pushed_units.load(Relaxed) >= units);
    let t = to.cluster(0).unwrap().stats();
    let s0 = t.syncs_ok.load(Relaxed);
    wait_for("the other engine's syncs", 10, || {
        t.syncs_ok.load(Relaxed) >= s0 + 2
    });
}

/// Keeps a test inside one hour-long window (the counts of a window boundary would blur).
fn away_from_window_edge() {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let left = 3600 - secs % 3600;
    if left < 60 {
        std::thread::sleep(Duration::from_secs(left + 1));
    }
}

/// Two engines over one Redis: `b` admits 1 per key (a node syncs the keys it has seen),
/// `a` 30, then `b` only the remaining 19, then `a` none: the counts are shared.
fn two_engines_share(a: &Engine, b: &Engine) {
    wait_for("both engines synced", 10, || synced(a) && synced(b));
    assert_eq!(admit(b, 1), [1; KEYS as usize]);
    assert_eq!(admit(a, 30), [30; KEYS as usize]);
    propagate(b, a, KEYS as u64);
    propagate(a, b, 30 * KEYS as u64);
    assert_eq!(admit(b, 40), [EVENTS - 31; KEYS as usize]);
    propagate(b, a, (EVENTS - 30) * KEYS as u64);
    assert_eq!(admit(a, 10), [0; KEYS as usize]);
    assert_eq!(
        a.cluster(0)
            .unwrap()
            .stats()
            .fallback_decisions
            .load(Relaxed),
        0
    );
    assert_eq!(
        b.cluster(0)
            .unwrap()
            .stats()
            .fallback_decisions
            .load(Relaxed),
        0
    );
}

fn openssl(dir: &Path, args: &[&str]) {
    let st = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl not found");
    assert!(st.success(), "openssl {args:?}");
}

/// A CA, and server and client certificates it signs (P-256), in `dir`.
fn make_certs(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509", "-days", "2", "-subj", "/CN=weir test CA"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt"]);
    openssl(dir, &ca);
    std::fs::write(dir.join("san.ext"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    for who in ["server", "client"] {
        let (key, csr, crt) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.crt"),
        );
        let mut req = vec!["req", "-subj", "/CN=127.0.0.1"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr]);
        openssl(dir, &req);
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "san.ext",
                "-out",
                &crt,
            ],
        );
    }
}

fn tls_mutual() {
    let mut s = Servers::new("redis-tls");
    make_certs(&s.dir);
    let d = s.dir.to_str().unwrap().to_owned();
    let port = free_port();
    let (crt, key, ca) = (
        format!("{d}/server.crt"),
        format!("{d}/server.key"),
        format!("{d}/ca.crt"),
    );
    // TLS only; `tls-auth-clients` defaults to yes: clients need a certificate of the CA.
    s.redis(
        port,
        &[
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &crt,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
        ],
    );
    let url = format!("redis = \"rediss://127.0.0.1:{port}/0\"\ntls_ca_file = \"{d}/ca.crt\"\n");
    let client = format!("tls_cert_file = \"{d}/client.crt\"\ntls_key_file = \"{d}/client.key\"\n");
    let full = policy(&format!("{url}{client}"));
    let (a, b) = (engine(&full), engine(&full));
    two_engines_share(&a, &b);
    pool_and_gcra_share("mutual TLS", &format!("{url}{client}"));
    // Without a client certificate the server refuses the handshake; without the CA the
    // server's certificate is not trusted (system store): both sync never, on the fallback.
    let no_client = engine(&policy(&url));
    let no_ca = engine(&policy(&format!(
        "redis = \"rediss://127.0.0.1:{port}/0\"\n{client}"
    )));
    for e in [&no_client, &no_ca] {
        let z = e.cluster(0).unwrap();
        wait_for("refused syncs", 10, || {
            z.stats().sync_errors.load(Relaxed) >= 2
        });
        assert_eq!(z.stats().syncs_ok.load(Relaxed), 0);
    }
    println!(
        "tls: mutual TLS with a private CA shares counts; no client certificate or no CA → refused"
    );
}

fn redis_cluster() {
    let mut s = Servers::new("redis-cluster");
    let mut ports: Vec<u16> = Vec::new();
    while ports.len() < 3 {
        let p = free_cluster_port();
        if !ports
            .iter()
            .any(|&q| [q, q + 10000].contains(&p) || q == p + 10000)
        {
            ports.push(p);
        }
    }
    for &p in &ports {
        let conf = s.dir.join(format!("nodes-{p}.conf"));
        s.redis(
            p,
            &[
                "--port",
                &p.to_string(),
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                conf.to_str().unwrap(),
                "--cluster-node-timeout",
                "2000",
            ],
        );
    }
    let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut args = vec!["--cluster", "create"];
    args.extend(nodes.iter().map(String::as_str));
    args.extend(["--cluster-replicas", "0", "--cluster-yes"]);
    cli(&args);
    for p in &ports {
        wait_for("cluster_state:ok", 20, || {
            cli(&["-p", &p.to_string(), "cluster", "info"]).contains("cluster_state:ok")
        });
    }
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("\"redis://127.0.0.1:{p}\""))
        .collect();
    let src = policy(&format!(
        "redis = [{}]\nredis_mode = \"cluster\"\n",
        urls.join(", ")
    ));
    let (a, b) = (engine(&src), engine(&src));
    two_engines_share(&a, &b);
    // The counters are spread over the primaries (one key per client and window).
    let per_node: Vec<u64> = ports
        .iter()
        .map(|p| {
            cli(&["-p", &p.to_string(), "dbsize"])
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(per_node.iter().sum::<u64>(), KEYS as u64, "{per_node:?}");
    assert!(
        per_node.iter().filter(|&&n| n > 0).count() >= 2,
        "{per_node:?}"
    );
    println!("cluster: 3 primaries, counters per primary {per_node:?}, counts shared");
    pool_and_gcra_share(
        "3 primaries",
        &format!("redis = [{}]\nredis_mode = \"cluster\"\n", urls.join(", ")),
    );
}

/// A concurrency pool and a GCRA zone, keyed by client address (8 keys; on a Redis Cluster,
/// spread over the primaries), shared by two engines over `redis` (`what`): their scripts (one
/// key each) reach the right server.
fn pool_and_gcra_share(what: &str, redis: &str) {
    let src = format!(
        "[zones.pool]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = 4\nscope = \"cluster\"\n\
         {redis}sync_interval = \"50ms\"\nexpected_nodes = 2\n\
         [zones.rate]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"10r/m\"\nscope = \"cluster\"\n\
         {redis}sync_interval = \"50ms\"\nexpected_nodes = 2\n\
         [classes.p]\nmatch = [{{ path = \"/p\" }}]\n[classes.r]\nmatch = [{{ path = \"/r\" }}]\n\
         [[limit]]\nclass = \"p\"\nzone = \"pool\"\nkey = \"ip\"\n\
         [[limit]]\nclass = \"r\"\nzone = \"rate\"\nkey = \"ip\"\nburst = 3\nnodelay = true\n"
    );
    let (a, b) = (engine(&src), engine(&src));
    let req =
        |path: &str, k: u8| OwnedRequest::new("GET", path, format!("192.0.2.{k}").parse().unwrap());
    // Pool: A takes 3 of each key's 4 (its floor, then a grant), B then at most the rest.
    let mut held = Vec::new();
    for k in 0..KEYS {
        let t0 = Instant::now();
        while held.len() < 3 * (k as usize + 1) {
            assert!(t0.elapsed() < Duration::from_secs(10), "A got no grant");
            let mut out = a.evaluate(&req("/p", k), monotonic_ns()).unwrap();
            if out.action == Action::Pass {
                held.push(std::mem::take(&mut out.permits));
            } else {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut held_b = Vec::new();
    for _ in 0..2 {
        // Asking again after B's syncs: no grant beyond its floor.
        for k in 0..KEYS {
            for _ in 0..3 {
                let mut out = b.evaluate(&req("/p", k), monotonic_ns()).unwrap();
                if out.action == Action::Pass {
                    held_b.push(std::mem::take(&mut out.permits));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    let b_got = held_b.len();
    assert_eq!(b_got, KEYS as usize, "B beside A's 3 of 4 per key: {b_got}");
    // GCRA: A uses each key's burst (4), B's first request of a key passes (it has not synced
    // the key yet), then B knows A's.
    // Requests of each key on `/r` that `e` admits, `n` per key.
    let passes = |e: &Engine, n: usize| -> u64 {
        (0..KEYS)
            .map(|k| {
                (0..n)
                    .filter(|_| {
                        e.evaluate(&req("/r", k), monotonic_ns()).unwrap().action == Action::Pass
                    })
                    .count() as u64
            })
            .sum()
    };
    let a_got = passes(&a, 5);
    std::thread::sleep(Duration::from_millis(300));
    let first = passes(&b, 1);
    std::thread::sleep(Duration::from_millis(300));
    let later = passes(&b, 3);
    assert_eq!((a_got, first, later), (4 * KEYS as u64, KEYS as u64, 0));
    for e in [&a, &b] {
        for z in 0..2 {
            assert_eq!(e.cluster(z).unwrap().stats().sync_errors.load(Relaxed), 0);
        }
    }
    for p in held {
        a.release(p, monotonic_ns());
    }
    for p in held_b {
        b.release(p, monotonic_ns());
    }
    println!(
        "a pool (A 3 of 4 per key, B the last one) and a GCRA zone (burst shared) over {what}"
    );
}

fn sentinel_failover() {
    let mut s = Servers::new("redis-sentinel");
    let (mp, rp, sp) = (free_port(), free_port(), free_port());
    let master = s.redis(mp, &["--port", &mp.to_string()]);
    s.redis(
        rp,
        &[
            "--port",
            &rp.to_string(),
            "--replicaof",
            "127.0.0.1",
            &mp.to_string(),
        ],
    );
    wait_for("the replica's link", 10, || {
        cli(&["-p", &mp.to_string(), "info", "replication"]).contains("connected_slaves:1")
    });
    let conf = s.dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {sp}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 {mp} 1\n\
             sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n"
        ),
    )
    .unwrap();
    s.redis(
        sp,
        &[
            conf.to_str().unwrap(),
            "--sentinel",
            "--port",
            &sp.to_string(),
        ],
    );
    let sentinel = |args: &[&str]| {
        let mut a = vec!["-p".to_owned(), sp.to_string(), "sentinel".to_owned()];
        a.extend(args.iter().map(|s| s.to_string()));
        cli(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    wait_for("the sentinel to know the replica", 15, || {
        sentinel(&["replicas", "mymaster"]).contains(&rp.to_string())
    });
    // A Sentinel that is down comes first: the next one is asked.
    let src = policy(&format!(
        "redis = [\"redis://127.0.0.1:{}\", \"redis://127.0.0.1:{sp}\"]\nredis_mode = \"sentinel\"\n\
         sentinel_master = \"mymaster\"\n",
        free_port()
    ));
    let (a, b) = (engine(&src), engine(&src));
    wait_for("both engines synced", 10, || synced(&a) && synced(&b));
    assert_eq!(admit(&b, 1), [1; KEYS as usize]);
    assert_eq!(admit(&a, 20), [20; KEYS as usize]);
    propagate(&b, &a, KEYS as u64);
    propagate(&a, &b, 20 * KEYS as u64);
    // Replicated before the master goes: the replica holds the 20.
    wait_for("replication", 10, || {
        cli(&["-p", &rp.to_string(), "dbsize"]).trim() == KEYS.to_string()
    });
    s.kill(master);
    let t0 = Instant::now();
    wait_for("the failover", 30, || {
        sentinel(&["get-master-addr-by-name", "mymaster"]).contains(&rp.to_string())
    });
    let failover = t0.elapsed();
    let (sa, sb) = (
        a.cluster(0).unwrap().stats().syncs_ok.load(Relaxed),
        b.cluster(0).unwrap().stats().syncs_ok.load(Relaxed),
    );
    wait_for("syncs with the new master", 15, || {
        a.cluster(0).unwrap().stats().syncs_ok.load(Relaxed) > sa + 1
            && b.cluster(0).unwrap().stats().syncs_ok.load(Relaxed) > sb + 1
    });
    let resumed = t0.elapsed();
    // New admissions on `a` reach `b` through the promoted replica.
    assert_eq!(admit(&a, 10), [10; KEYS as usize]);
    propagate(&a, &b, 30 * KEYS as u64);
    assert_eq!(admit(&b, 40), [EVENTS - 31; KEYS as usize]);
    pool_and_gcra_share(
        "the promoted replica, found through the Sentinel",
        &format!(
            "redis = \"redis://127.0.0.1:{sp}\"\nredis_mode = \"sentinel\"\n\
             sentinel_master = \"mymaster\"\n"
        ),
    );
    println!(
        "sentinel: counts shared through the master; after SIGKILL the sentinel promoted the \
         replica in {failover:?}, both engines synced with it {resumed:?} after the kill"
    );
}

fn validation() {
    let head = "[zones.z]\nsize = \"1m\"\nalgorithm = \"sliding\"\nevents = 10\nwindow = \"1s\"\n\
                scope = \"cluster\"\nexpected_nodes = 2\n";
    let limit = "[[limit]]\nclass = \"*\"\nzone = \"z\"\n";
    let err = |body: &str| {
        let e = check_policy(&format!("{head}{body}{limit}"), Some("p.toml")).expect_err(body);
        format!("{}:{}: {}", e[0].line, e[0].column, e[0].message)
    };
    let cases = [
        (
            "redis = [\"redis://a\", \"redis://b\"]\n",
            "8:9: ",
            "need redis_mode",
        ),
        ("redis = []\n", "8:9: ", "empty list"),
        (
            "redis = \"redis://a\"\nredis_mode = \"ring\"\n",
            "9:14: ",
            "unknown redis_mode",
        ),
        (
            "redis = \"redis://a\"\nredis_mode = \"sentinel\"\n",
            "9:14: ",
            "needs `sentinel_master`",
        ),
        (
            "redis = \"redis://a\"\nsentinel_master = \"m\"\n",
            "9:19: ",
            "only with redis_mode",
        ),
        (
            "redis = [\"redis://a\", \"redis+unix:///s\"]\nredis_mode = \"cluster\"\n",
            "9:14: ",
            "reached by TCP",
        ),
        (
            "redis = [\"redis://a\", \"rediss://b\"]\nredis_mode = \"cluster\"\n",
            "8:9: ",
            "mix of rediss://",
        ),
        (
            "redis = \"redis://a\"\ntls_ca_file = \"/etc/hostname\"\n",
            "9:15: ",
            "needs rediss://",
        ),
        (
            "redis = \"rediss://a\"\ntls_ca_file = \"ca.pem\"\n",
            "9:15: ",
            "absolute path",
        ),
        (
            "redis = \"rediss://a\"\ntls_ca_file = \"/nonexistent/ca.pem\"\n",
            "9:15: ",
            "cannot read",
        ),
        (
            "redis = \"rediss://a\"\ntls_ca_file = \"/etc/hostname\"\n",
            "9:15: ",
            "no PEM block",
        ),
        (
            "redis = \"rediss://a\"\ntls_cert_file = \"/etc/ssl/certs/ca-certificates.crt\"\n",
            "9:17: ",
            "needs `tls_key_file`",
        ),
        (
            "redis = [\"redis://:x@a\", \"redis://:y@b\"]\nredis_mode = \"cluster\"\n",
            "8:9: ",
            "different password",
        ),
    ];
    for (body, at, what) in cases {
        let e = err(body);
        assert!(e.starts_with(at) && e.contains(what), "{body:?}: {e}");
    }
    let local = "[zones.z]\nsize = \"1m\"\nalgorithm = \"sliding\"\nevents = 10\nwindow = \"1s\"\n\
                 redis_mode = \"cluster\"\n";
    let e = check_policy(&format!("{local}{limit}"), None).expect_err("local");
    assert!(
        e[0].message.contains("only to zones with scope"),
        "{}",
        e[0].message
    );
    println!(
        "validation: {} redis settings errors with line:column",
        cases.len()
    );
}

fn main() {
    let tests: [(&str, fn()); 4] = [
        ("validation", validation),
        ("tls_mutual", tls_mutual),
        ("redis_cluster", redis_cluster),
        ("sentinel_failover", sentinel_failover),
    ];
    away_from_window_edge();
    for (name, f) in tests {
        let t0 = Instant::now();
        println!("test {name} ...");
        f();
        println!("test {name} ... ok ({:?})", t0.elapsed());
    }
    println!("{} passed, 0 failed", tests.len());
}
