//! Live top keys under a flood of rejections (docs/METRICS.md, "Live top keys and history"):
//! beyond the first `NAMED_IN_FULL` rejections of a limit in a second, one in `SAMPLE_EVERY`
//! is named with that weight. The heavy hitters of a flood are still found first, with
//! counts within the documented bound; rejections while a limit rejects few are counted
//! exactly. The clock is fixed: every run names the same rejections.

use serde_json::Value;
use weir::policy::metrics::{Format, Snapshot};
use weir::policy::topkeys::{NAMED_IN_FULL, SAMPLE_EVERY};
use weir::policy::{parse_policy, Engine, OwnedRequest};

const POLICY: &str = "[zones.ip]\nsize = \"4m\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
                      [[limit]]\nname = \"per-ip\"\nclass = \"*\"\nzone = \"ip\"\n";

/// Second 7,200 (minute 120), at its start.
const NOW: u64 = 7_200 * 1_000_000_000;

fn engine() -> Engine {
    Engine::new(parse_policy(POLICY, None).unwrap()).unwrap()
}

fn hit(engine: &Engine, ip: &str, now: u64) {
    let req = OwnedRequest::new("GET", "/", ip.parse().unwrap());
    engine.evaluate(&req, now).unwrap();
}

fn status(engine: &Engine, now: u64) -> Value {
    let json = Snapshot::take(&[engine], &[], now).render(Format::Json);
    serde_json::from_str::<Value>(&json).unwrap()["limits"][0].clone()
}

/// `(name, count)` of a window's `keys` or `clients` (`what`).
fn listed(window: &Value, what: &str) -> Vec<(String, u64)> {
    let name = if what == "keys" { "key" } else { "client" };
    window[what]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let n = e[name].as_str().unwrap().to_owned();
            (n, e["rejected"].as_u64().unwrap())
        })
        .collect()
}

/// The documented bound on a sampled count: 4 standard deviations of the sampling error
/// (`√(SAMPLE_EVERY · r)` for `r` sampled rejections) below the true count; above it, that
/// plus Space-Saving's over-estimate (at most the summed weight `w` over 16 entries).
fn within(estimate: u64, truth: u64, w: u64) -> bool {
    let sigma = ((SAMPLE_EVERY * truth) as f64).sqrt();
    let (lo, hi) = (
        truth as f64 - 4.0 * sigma,
        truth as f64 + 4.0 * sigma + w as f64 / 16.0,
    );
    (lo..=hi).contains(&(estimate as f64))
}

#[test]
fn a_flood_is_sampled_and_its_heavy_hitters_counted_within_the_bound() {
    let e = engine();
    // 4,000 rounds of ten requests, all in one second: A four, B two, C one, and three
    // crawlers of 3,000 (each crawler four requests). The period of ten does not stay in
    // step with the sampled offsets.
    let crawler = |i: u32| format!("10.0.{}.{}", i / 256, i % 256);
    let (a, b, c) = ("198.51.100.1", "198.51.100.2", "198.51.100.3");
    let mut next = 0;
    for _ in 0..4_000 {
        for ip in [a, a, a, a, b, b, c] {
            hit(&e, ip, NOW);
        }
        for _ in 0..3 {
            hit(&e, &crawler(next % 3_000), NOW);
            next += 1;
        }
    }
    // Each address passes once: A 16,000 requests, B 8,000, C 4,000, crawlers 4 each.
    let truth = [(a, 15_999), (b, 7_999), (c, 3_999)];
    let rejected: u64 = 40_000 - 3 - 3_000;
    let l = status(&e, NOW);
    assert_eq!(l["rejected"], rejected);
    let per_second = l["per_second"]["rejected"].as_array().unwrap();
    assert_eq!(per_second.last().unwrap().as_u64(), Some(rejected));
    for w in ["last_1m", "last_15m"] {
        assert_eq!(
            l[w]["rejected"], rejected,
            "{w}: the history counts every rejection"
        );
        for what in ["keys", "clients"] {
            let got = listed(&l[w], what);
            for (i, &(name, n)) in truth.iter().enumerate() {
                assert_eq!(got[i].0, name, "{w} {what}: {got:?}");
                assert!(
                    within(got[i].1, n, rejected),
                    "{w} {what}: {name} {} for {n}",
                    got[i].1
                );
            }
        }
    }
    // Far fewer than the rejections were named: unweighted, A would count about 1,500.
    let a_count = listed(&l["last_1m"], "keys")[0].1;
    assert!(a_count > 15_999 / 2, "{a_count}: weights not applied");
}

#[test]
fn while_a_limit_rejects_few_every_rejection_is_named_exactly() {
    let e = engine();
    // A rare key rejected three times among the first rejections of a flooded second, then
    // a flood of A and B past the sampling threshold.
    let (rare, a, b) = ("203.0.113.9", "198.51.100.1", "198.51.100.2");
    for _ in 0..4 {
        hit(&e, rare, NOW);
    }
    for _ in 0..2 * NAMED_IN_FULL {
        hit(&e, a, NOW);
        hit(&e, b, NOW);
    }
    // The next second, two more keys rejected twice each: counts restart, so named exactly.
    let next = NOW + 1_000_000_000;
    for ip in ["203.0.113.10", "203.0.113.11"] {
        for _ in 0..3 {
            hit(&e, ip, next);
        }
    }
    let l = status(&e, next);
    let keys = listed(&l["last_1m"], "keys");
    let count = |k: &str| keys.iter().find(|(n, _)| n == k).map(|&(_, c)| c);
    assert_eq!(count(rare), Some(3), "{keys:?}");
    assert_eq!(count("203.0.113.10"), Some(2), "{keys:?}");
    assert_eq!(count("203.0.113.11"), Some(2), "{keys:?}");
    let truth = 2 * NAMED_IN_FULL - 1;
    for ip in [a, b] {
        assert!(
            within(count(ip).unwrap(), truth, 2 * truth),
            "{ip}: {keys:?}"
        );
    }
    assert_eq!(l["last_1m"]["rejected"], 3 + 2 * truth + 4);
}
