//! A log line's cost is linear in its number of header lines: a Caddy JSON line repeating
//! `Cookie` or `X-Forwarded-For` 8,000 times is parsed and evaluated (a cookie exemption, a
//! cookie key, a trusted proxy's chain) at about the same cost per line as a line with 1,000. Timed, as a generous ratio of best-of-rounds costs per header line.

use std::hint::black_box;
use std::time::{Duration, Instant};

use weir::policy::{parse_policy, Engine};
use weir_cli::logfmt::{Entry, LogFormat};

const POLICY: &str = r#"
trusted_proxies = ["10.0.0.0/8"]
[zones.ip]
size = "1m"
algorithm = "gcra"
rate = "100000r/s"
[exempt.session]
match = [{ cookie.session = { present = true } }]
[[limit]]
name = "per-sid"
class = "*"
zone = "ip"
key = ["ip", "cookie:sid"]
burst = 100000
"#;

/// A Caddy access-log line from a trusted proxy with `n` lines of header `name`.
fn caddy_line(name: &str, value: &str, n: usize) -> Vec<u8> {
    let values = vec![format!("\"{value}\""); n].join(",");
    format!(
        r#"{{"ts":1796215005.25,"request":{{"remote_ip":"10.0.0.1","method":"GET","uri":"/x","headers":{{"User-Agent":["ua"],"{name}":[{values}]}}}},"duration":0.001}}"#
    )
    .into_bytes()
}

/// Best time to parse and evaluate `line`, per header line (`n` of them), over rounds of
/// enough evaluations to last a few milliseconds.
fn cost_per_line(engine: &Engine, line: &[u8], n: usize) -> f64 {
    let format = LogFormat::from_spec("caddy-json").unwrap();
    let mut e = Entry::default();
    let mut now = 1_000_000_000_000u64;
    let mut once = || {
        format.parse(line, &mut e).unwrap();
        now += 1_000;
        let out = engine.evaluate(&e, now).unwrap();
        engine.release(black_box(out).permits, now);
    };
    // Warm up (the allocator settles on large buffers after a few frees).
    let t = Instant::now();
    let mut warm = 0u32;
    while warm < 10 || t.elapsed() < Duration::from_millis(20) {
        once();
        warm += 1;
    }
    let reps = (warm as u128 * Duration::from_millis(2).as_nanos() / t.elapsed().as_nanos()).max(1);
    (0..9)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..reps {
                once();
            }
            t.elapsed().as_secs_f64() / (reps as f64 * n as f64)
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
fn repeated_header_lines_cost_linear_time() {
    let engine = Engine::new(parse_policy(POLICY, None).unwrap()).unwrap();
    for (name, value) in [("Cookie", "c=1"), ("X-Forwarded-For", "10.0.0.2")] {
        let (small, large) = (1_000, 8_000);
        let a = cost_per_line(&engine, &caddy_line(name, value, small), small);
        let b = cost_per_line(&engine, &caddy_line(name, value, large), large);
        // Linear: about 1.25x. A walk from the first line for each line was about 15x.
        assert!(
            b < 4.0 * a,
            "{name}: {:.0} ns per line with {large} lines, {:.0} ns with {small}",
            b * 1e9,
            a * 1e9
        );
    }
}
