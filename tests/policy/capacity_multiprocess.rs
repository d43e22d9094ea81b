//! Forked processes × threads over one policy's shared regions (as nginx workers share a zone):
//! lanes' shares and learned limits are never exceeded, whichever process admits. A plain
//! `main` (no test harness) so that the parent is single-threaded when it forks.

#[path = "../common/mod.rs"]
mod common;

use common::fork::{fork_all, run_scenarios, Tally};
use common::SharedRegion;
use std::sync::atomic::Ordering::SeqCst;
use weir::policy::engine::{AttachOptions, HostRegions, Sample};
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};
use weir::region::{Fresh, Region};

const S: u64 = 1_000_000_000;

const OPTS: AttachOptions = AttachOptions {
    clock_base: 0,
    start_syncers: false,
    fresh: Fresh::Zeroed,
};

/// `zone` (a concurrency zone's settings) with classes /healthz (critical) and /tools/
/// (sheddable), one limit on a global key.
fn policy(zone: &str) -> String {
    format!(
        "[zones.app]\nsize = \"64k\"\nalgorithm = \"concurrency\"\n{zone}\n\
         [classes.health]\nmatch = [{{ path = \"/healthz\" }}]\nlane = \"critical\"\n\
         [classes.heavy]\nmatch = [{{ path_prefix = \"/tools/\" }}]\nlane = \"sheddable\"\n\
         [[limit]]\nname = \"app\"\nclass = \"*\"\nzone = \"app\"\nkey = \"global\"\n"
    )
}

/// An engine over shared mappings (kept alive by the returned handles).
fn shared_engine(src: &str) -> (Engine, SharedRegion, SharedRegion) {
    let policy = parse_policy(src, None).unwrap();
    let bytes = Engine::layouts(&policy)[0].bytes;
    let (counter_bytes, _) = Engine::counters_layout(&policy);
    let (zone, counters) = (SharedRegion::new(bytes), SharedRegion::new(counter_bytes));
    // SAFETY: the mappings outlive the engine (returned beside it, dropped after it).
    let (z, c) = unsafe {
        (
            Region::new(zone.ptr, bytes, 64).unwrap(),
            Region::new(counters.ptr, counter_bytes, 64).unwrap(),
        )
    };
    let regions = HostRegions {
        zones: &[z],
        cluster: None,
        counters: Some(c),
    };
    let e = Engine::attach(policy, regions, OPTS).unwrap();
    (e, zone, counters)
}

/// Every thread sends requests of one lane (by process and thread) for `n` rounds; tally words
/// per lane `l` (0 sheddable, 1 normal, 2 critical): `3l` in flight now, `3l + 1` the most seen
/// of that lane and every lower one together, `3l + 2` admissions. With `sample`, each permit
/// goes back with a latency that grows with the requests in flight (a backend of 4 slots).
fn hammer(e: &Engine, n: u64, sample: bool) -> Tally {
    let tally = Tally::new();
    fork_all(|p, t| {
        let lane = (p * 2 + t) % 3;
        let path = ["/tools/x", "/page", "/healthz"][lane];
        let req = OwnedRequest::new("GET", path, "192.0.2.1".parse().unwrap());
        for i in 0..n {
            let now = 10 * S + i * 1000;
            let out = e.evaluate(&req, now).unwrap();
            if out.action != Action::Pass {
                continue;
            }
            tally.at(3 * lane + 2).fetch_add(1, SeqCst);
            tally.at(3 * lane).fetch_add(1, SeqCst);
            // Requests of this lane and the lanes below it.
            let below: u64 = (0..=lane).map(|l| tally.at(3 * l).load(SeqCst)).sum();
            tally.at(3 * lane + 1).fetch_max(below, SeqCst);
            std::hint::spin_loop();
            let in_flight: u64 = (0..3).map(|l| tally.at(3 * l).load(SeqCst)).sum();
            tally.at(3 * lane).fetch_sub(1, SeqCst);
            let s = sample.then_some(Sample {
                latency_ns: 1_000_000 * in_flight.max(4) / 4,
                status: 200,
            });
            e.release_sampled(out.permits, s, now);
        }
    });
    tally
}

fn lanes_share_a_fixed_limit_across_processes() {
    let (e, _z, _c) = shared_engine(&policy("max = 6\nreserve = 2"));
    let tally = hammer(&e, 20_000, false);
    let most = |l: usize| tally.at(3 * l + 1).load(SeqCst);
    // Sheddable: 90% of the 4 unreserved slots; with normal: the 4; with critical: all 6.
    assert!(most(0) <= 3, "sheddable reached {}", most(0));
    assert!(most(1) <= 4, "sheddable + normal reached {}", most(1));
    assert!(most(2) <= 6, "every lane reached {}", most(2));
    for l in 0..3 {
        assert!(
            tally.at(3 * l + 2).load(SeqCst) > 0,
            "lane {l} never admitted"
        );
    }
    let s = e.saturation(0, 10 * S).unwrap();
    assert_eq!(s.in_flight, 0, "every permit came back");
}

fn a_learned_limit_holds_across_processes() {
    let (e, _z, _c) = shared_engine(&policy("max = \"auto\"\nbounds = [2, 12]\nreserve = 1"));
    let tally = hammer(&e, 20_000, true);
    let most = tally.at(7).load(SeqCst);
    assert!(
        most <= 12,
        "in flight reached {most} over the upper bound 12"
    );
    let s = e.saturation(0, 10 * S).unwrap();
    assert!(s.auto && (2..=12).contains(&s.limit), "{s:?}");
    assert!(
        s.noload_ns > 0,
        "the processes' samples reached the shared window"
    );
    assert_eq!(s.in_flight, 0);
}

fn main() {
    let scenarios: [(&str, fn()); 2] = [
        (
            "lanes_share_a_fixed_limit_across_processes",
            lanes_share_a_fixed_limit_across_processes,
        ),
        (
            "a_learned_limit_holds_across_processes",
            a_learned_limit_holds_across_processes,
        ),
    ];
    run_scenarios(&scenarios)
}
