//! The fast path (src/policy/engine/fast.rs) against the general path: random policies of
//! GCRA, sliding and sliding-log limits keyed by `ip`, `var:`, `global` or more (some dry
//! run, some with a ban, some only for the host), random traffic through `evaluate` and
//! `evaluate_selected`; two engines, one of them without the fast path, must give the same
//! outcome to every request and end with the same counts.

use std::fmt::Write as _;
use std::net::IpAddr;

use weir::policy::{CompiledPolicy, Engine, EvalError, OwnedRequest};

use super::host_limits::Rng;

fn pick<'a, T>(rng: &mut Rng, of: &'a [T]) -> &'a T {
    &of[rng.below(of.len() as u64) as usize]
}

const KEYS: [&str; 6] = [
    "\"ip\"",
    "\"global\"",
    "\"var:a\"",
    "\"var:b\"",
    "[\"ip\", \"method\"]",
    "[\"var:a\", \"ip\"]",
];

fn policy(rng: &mut Rng) -> String {
    let mut src = String::new();
    if rng.below(2) == 0 {
        src.push_str("headers = true\n");
    }
    if rng.below(4) == 0 {
        // A class no limit uses still makes the engine read (and check) the target.
        src.push_str("[classes.tools]\nmatch = [{ path_prefix = \"/w/\" }]\n");
    }
    let zones = 1 + rng.below(3);
    let mut algorithms = Vec::new();
    for z in 0..zones {
        let _ = writeln!(src, "[zones.z{z}]\nsize = \"1m\"");
        let algorithm = *pick(rng, &["sliding", "sliding_log", "gcra", "gcra"]);
        let _ = writeln!(src, "algorithm = \"{algorithm}\"");
        if algorithm == "gcra" {
            let _ = writeln!(src, "rate = \"{}r/s\"", 1 + rng.below(5));
        } else {
            let _ = writeln!(src, "window = \"1s\"\nevents = {}", 1 + rng.below(4));
        }
        algorithms.push(algorithm);
    }
    let limits = 1 + rng.below(4);
    for i in 0..limits {
        let z = rng.below(zones);
        let algorithm = algorithms[z as usize];
        let _ = writeln!(src, "[[limit]]\nname = \"l{i}\"\nzone = \"z{z}\"");
        src.push_str(if rng.below(4) == 0 {
            "class = \"@host\"\n"
        } else {
            "class = \"*\"\n"
        });
        let _ = writeln!(src, "key = {}", pick(rng, &KEYS));
        if algorithm == "gcra" {
            let burst = rng.below(4);
            let _ = writeln!(src, "burst = {burst}");
            match rng.below(3) {
                0 => src.push_str("nodelay = true\n"),
                1 if burst > 0 => src.push_str("delay = 1\n"),
                _ => {}
            }
        }
        if rng.below(5) == 0 {
            src.push_str("dry_run = true\n");
        }
        if algorithm != "sliding_log" && rng.below(6) == 0 {
            src.push_str("ban = { after = 2, within = \"1m\", duration = \"2s\" }\n");
        }
    }
    src
}

fn request(rng: &mut Rng) -> OwnedRequest {
    let peers: [IpAddr; 4] = [
        [198, 51, 100, 1].into(),
        [198, 51, 100, 2].into(),
        "2001:db8::1".parse().unwrap(),
        "::ffff:198.51.100.1".parse().unwrap(),
    ];
    let method = ["GET", "POST"][rng.below(2) as usize];
    // One in ten targets is refused when the target is read ("/%zz": a bad escape).
    let target = if rng.below(10) == 0 { "/%zz" } else { "/" };
    let mut r = OwnedRequest::new(method, target, *pick(rng, &peers));
    for var in 0..2 {
        match rng.below(5) {
            0 => {}
            1 => r = r.var(var, ""),
            n => r = r.var(var, format!("v{n}")),
        }
    }
    r
}

/// The policy's variables named `a` and `b`, by index in the engine.
fn var_order(engine: &Engine) -> Vec<String> {
    engine
        .var_names()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect()
}

#[test]
fn the_fast_path_answers_as_the_general_path() {
    // Evaluations the fast path could answer (it may still hand some to the general path).
    let mut covered = 0;
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let src = policy(&mut rng);
        let compile = || {
            CompiledPolicy::parse(&src, Some("fast.toml")).unwrap_or_else(|e| panic!("{e}\n{src}"))
        };
        let fast = Engine::new(compile()).unwrap();
        let general = Engine::new(compile()).unwrap().without_fast_path();
        let names = var_order(&fast);
        let n = fast.policy().limits.len() as u64;
        let mut now = 1_000_000_000u64;
        for step in 0..200 {
            now += rng.below(400_000_000);
            let mut req = request(&mut rng);
            // Variables by the engine's index: `a` and `b` as the request drew them.
            let drawn = std::mem::take(&mut req.vars);
            req.vars = (names.iter())
                .map(|name| {
                    let i = if name == "a" { 0 } else { 1 };
                    drawn.get(i).cloned().flatten()
                })
                .collect();
            let (a, b) = if rng.below(2) == 0 {
                covered += usize::from(fast.fast_path_covers(None));
                (fast.evaluate(&req, now), general.evaluate(&req, now))
            } else {
                let limits: Vec<u16> = (0..1 + rng.below(3)).map(|_| rng.below(n) as u16).collect();
                covered += usize::from(fast.fast_path_covers(Some(&limits)));
                (
                    fast.evaluate_selected(&req, &limits, now),
                    general.evaluate_selected(&req, &limits, now),
                )
            };
            assert_eq!(
                format!("{a:?}"),
                format!("{b:?}"),
                "seed {seed}, request {step} at {now}: {req:?}\n{src}"
            );
        }
        for l in 0..fast.policy().limits.len() {
            assert_eq!(fast.counters(l), general.counters(l), "seed {seed}\n{src}");
        }
        assert_eq!(fast.totals(), general.totals(), "seed {seed}\n{src}");
        // A selection naming no limit, or too many, is refused on both paths.
        let req = OwnedRequest::new("GET", "/", [198, 51, 100, 1].into());
        for limits in [vec![0, n as u16], vec![0; 33]] {
            for e in [&fast, &general] {
                let got = e.evaluate_selected(&req, &limits, now).map(|o| o.action);
                assert_eq!(got, Err(EvalError::BadSelection), "seed {seed}: {limits:?}");
            }
        }
    }
    // Most random policies have a limit the fast path leaves to the general path; a good
    // share of the evaluations must still be the fast path's.
    assert!(
        covered > 300 * 200 / 5,
        "{covered} of {} covered",
        300 * 200
    );
}
