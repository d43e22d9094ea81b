//! Capacity of concurrency limits through the engine: a learned limit (`max = "auto"`) that
//! finds a scripted backend's slot count from latency samples alone, lanes and `reserve`, the
//! queue's hand-over (a waiter is not overtaken) and standing-queue drops, the saturation
//! figures, and the policy errors.

use std::collections::VecDeque;

use weir::policy::engine::{Permits, Sample};
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;
const T0: u64 = 1_000 * S;

fn engine(policy: &str) -> Engine {
    Engine::new(parse_policy(policy, None).unwrap()).unwrap()
}

fn get(path: &str) -> OwnedRequest {
    OwnedRequest::new("GET", path, "192.0.2.1".parse().unwrap())
}

const AUTO: &str = r#"
[zones.backend]
size = "64k"
algorithm = "concurrency"
max = "auto"
bounds = [2, 200]

[[limit]]
name = "backend"
class = "*"
zone = "backend"
key = "global"
"#;

/// A backend of `slots` slots with service time `service`: the time a request admitted with
/// `in_flight` others takes (a queue inside it beyond its slots).
fn backend_latency(slots: u64, service: u64, in_flight: u64) -> u64 {
    service * in_flight.max(slots) / slots
}

/// Drives `e` with more requests than it admits for `secs` seconds of injected time: every
/// free slot is taken at once, each request completes after the backend's latency and gives
/// its permit back with that latency.
fn saturate(e: &Engine, now: &mut u64, secs: u64, slots: u64, service: u64) {
    let mut running: VecDeque<(u64, u64, Permits)> = VecDeque::new();
    let end = *now + secs * S;
    while *now < end {
        loop {
            let out = e.evaluate(&get("/"), *now).unwrap();
            if out.action != Action::Pass {
                break;
            }
            let lat = backend_latency(slots, service, running.len() as u64 + 1);
            running.push_back((*now + lat, lat, out.permits));
        }
        running.make_contiguous().sort_by_key(|r| r.0);
        let (done, lat, permits) = running.pop_front().expect("something admitted");
        *now = done.max(*now);
        let sample = Sample {
            latency_ns: lat,
            status: 200,
        };
        e.release_sampled(permits, Some(sample), *now);
    }
    for (_, _, p) in running {
        e.release(p, *now);
    }
}

#[test]
fn a_learned_limit_finds_the_backends_slots() {
    let e = engine(AUTO);
    let mut now = T0;
    saturate(&e, &mut now, 30, 20, 50 * MS);
    let s = e.saturation(0, now).unwrap();
    assert!(s.auto);
    assert!((18..=25).contains(&s.limit), "learned {}", s.limit);
    assert!(s.noload_ns.abs_diff(50 * MS) <= 5 * MS, "{}", s.noload_ns);
    // Capacity halves: within two seconds the limit follows.
    saturate(&e, &mut now, 2, 10, 50 * MS);
    let halved = e.saturation(0, now).unwrap().limit;
    assert!((8..=13).contains(&halved), "after halving {halved}");
    // And comes back when it recovers.
    saturate(&e, &mut now, 10, 20, 50 * MS);
    let back = e.saturation(0, now).unwrap().limit;
    assert!((16..=25).contains(&back), "after recovery {back}");
}

#[test]
fn without_samples_a_learned_limit_stays_at_its_start() {
    let e = engine(AUTO);
    let mut held = Vec::new();
    for _ in 0..20 {
        let out = e.evaluate(&get("/"), T0).unwrap();
        assert_eq!(out.action, Action::Pass);
        held.push(out.permits);
    }
    assert_eq!(e.evaluate(&get("/"), T0).unwrap().action, Action::Reject);
    let s = e.saturation(0, T0).unwrap();
    assert_eq!((s.limit, s.in_flight, s.shed), (20, 20, [0, 1, 0]));
    for p in held {
        e.release(p, T0);
    }
}

const LANES: &str = r#"
[zones.backend]
size = "64k"
algorithm = "concurrency"
max = 10
reserve = 2

[classes.health]
match = [{ path = "/healthz" }]
lane = "critical"

[classes.tools]
match = [{ path_prefix = "/tools/" }]
lane = "sheddable"

[[limit]]
name = "backend"
class = "*"
zone = "backend"
key = "global"
"#;

/// How many requests for `path` the engine admits on top of what `held` holds.
fn fill(e: &Engine, path: &str, held: &mut Vec<Permits>, now: u64) -> usize {
    let mut n = 0;
    loop {
        let out = e.evaluate(&get(path), now).unwrap();
        if out.action != Action::Pass {
            return n;
        }
        held.push(out.permits);
        n += 1;
    }
}

#[test]
fn lanes_shed_the_lowest_first_and_keep_the_reserve_for_critical() {
    let e = engine(LANES);
    let mut held = Vec::new();
    // The real clock: the Prometheus text is rendered as of now.
    let now = weir::clock::monotonic_ns();
    // Sheddable: 90% of the 8 unreserved slots; normal the rest of them; critical the reserve.
    assert_eq!(fill(&e, "/tools/x", &mut held, now), 7);
    assert_eq!(fill(&e, "/page", &mut held, now), 1);
    assert_eq!(fill(&e, "/healthz", &mut held, now), 2);
    assert_eq!(fill(&e, "/healthz", &mut held, now), 0);
    let s = e.saturation(0, now).unwrap();
    assert_eq!(s.in_flight, 10);
    assert_eq!(s.shed, [1, 1, 2], "sheddable, normal, critical refusals");
    let mut prom = String::new();
    e.render_prometheus(&mut prom).unwrap();
    assert!(prom.contains("weir_concurrency_shed_total{limit=\"backend\",lane=\"critical\"} 2"));
    assert!(prom.contains("weir_concurrency_in_flight{limit=\"backend\"} 10"));
    crate::promcheck::promcheck(&prom);
    for p in held {
        e.release(p, now);
    }
}

const QUEUED: &str = r#"
[zones.backend]
size = "64k"
algorithm = "concurrency"
max = 1

[[limit]]
name = "backend"
class = "*"
zone = "backend"
key = "global"
queue = 10
timeout = "2s"
"#;

#[test]
fn a_freed_slot_goes_to_the_waiter_not_to_a_new_arrival() {
    let e = engine(QUEUED);
    let first = e.evaluate(&get("/"), T0).unwrap();
    assert_eq!(first.action, Action::Pass);
    let waiter = e.evaluate(&get("/"), T0 + MS).unwrap();
    assert_eq!(waiter.action, Action::Queue);
    e.release(first.permits, T0 + 2 * MS);
    // The slot is free, but a request waits for it: the newcomer queues behind it.
    let newcomer = e.evaluate(&get("/"), T0 + 3 * MS).unwrap();
    assert_eq!(newcomer.action, Action::Queue);
    let served = e
        .evaluate_queued(&get("/"), T0 + 4 * MS, waiter.ticket.unwrap())
        .unwrap();
    assert_eq!(served.action, Action::Pass);
    let s = e.saturation(0, T0 + 4 * MS).unwrap();
    assert_eq!((s.in_flight, s.queued, s.wait_count), (1, 1, 1));
    // It waited 3 ms: counted in the 5 ms bucket, not the 1 ms one.
    assert_eq!(&s.wait_buckets[..2], &[0, 1]);
    e.release(served.permits, T0 + 5 * MS);
    let next = e
        .evaluate_queued(&get("/"), T0 + 6 * MS, newcomer.ticket.unwrap())
        .unwrap();
    assert_eq!(next.action, Action::Pass);
    e.release(next.permits, T0 + 7 * MS);
}

#[test]
fn a_standing_queue_refuses_old_waiters_early() {
    let e = engine(QUEUED);
    let mut now = T0;
    let mut holder = e.evaluate(&get("/"), now).unwrap().permits;
    // Each waiter waits 50 ms for its slot. Once that has lasted an interval (100 ms), the
    // queue is standing, and a waiter is refused after the short deadline (10 ms), long
    // before its 2 s timeout.
    let mut waiter = e.evaluate(&get("/"), now).unwrap().ticket.unwrap();
    let mut served = 0;
    let refused = loop {
        now += 50 * MS;
        let next = e.evaluate(&get("/"), now).unwrap().ticket.unwrap();
        e.release(holder, now);
        let out = e.evaluate_queued(&get("/"), now, waiter).unwrap();
        waiter = next;
        if out.action != Action::Pass {
            break out;
        }
        holder = out.permits;
        served += 1;
        assert!(served < 10, "never refused");
    };
    assert!(
        served >= 2,
        "refused before the queue stood an interval: {served}"
    );
    assert_eq!(refused.action, Action::Reject);
    assert!(refused.queue_timeout);
    assert_eq!(e.saturation(0, now).unwrap().shed, [0, 1, 0]);
    e.abandon(waiter, now);
}

#[test]
fn a_standing_queue_serves_its_newest_waiter_first() {
    let e = engine(QUEUED);
    let mut now = T0;
    let mut holder = e.evaluate(&get("/"), now).unwrap().permits;
    let mut waiter = e.evaluate(&get("/"), now).unwrap().ticket.unwrap();
    assert!(
        !e.queue_lifo(waiter.queue(), now),
        "a new queue serves its oldest first"
    );
    // The permits given back free a slot for the waiter's queue.
    assert_eq!(holder.queues().collect::<Vec<_>>(), [waiter.queue()]);
    // Every waiter waits 8 ms (under the 10 ms deadline) for an interval: the queue stands.
    for _ in 0..15 {
        now += 8 * MS;
        let next = e.evaluate(&get("/"), now).unwrap().ticket.unwrap();
        e.release(holder, now);
        let out = e.evaluate_queued(&get("/"), now, waiter).unwrap();
        assert_eq!(out.action, Action::Pass);
        (holder, waiter) = (out.permits, next);
    }
    assert!(e.queue_lifo(waiter.queue(), now));
    // Nobody served or refused for a second: the old state decides nothing.
    assert!(!e.queue_lifo(waiter.queue(), now + 2 * S));
    e.release(holder, now);
    e.abandon(waiter, now);
}

#[test]
fn policy_errors_name_the_place() {
    let err = |src: &str| parse_policy(src, Some("p.toml")).unwrap_err().to_string();
    let zone = |extra: &str| {
        format!("[zones.z]\nsize = \"64k\"\n{extra}\n[[limit]]\nclass = \"*\"\nzone = \"z\"\n")
    };
    let e = err(&zone(
        "algorithm = \"gcra\"\nrate = \"1r/s\"\nmax = \"auto\"",
    ));
    assert!(e.contains("p.toml:5:") && e.contains("concurrency"), "{e}");
    let e = err(&zone(
        "algorithm = \"concurrency\"\nmax = \"auto\"\nbounds = [50, 5]",
    ));
    assert!(
        e.contains("p.toml:5:10") && e.contains("out of order"),
        "{e}"
    );
    let e = err(&zone(
        "algorithm = \"concurrency\"\nmax = 5\nbounds = [1, 5]",
    ));
    assert!(e.contains("only to max = \"auto\""), "{e}");
    let e = err(&zone("algorithm = \"concurrency\"\nmax = \"lots\""));
    assert!(e.contains("p.toml:4:7") && e.contains("\"auto\""), "{e}");
    let e = err(&zone("algorithm = \"concurrency\"\nmax = 4\nreserve = 4"));
    assert!(e.contains("leaves no slot"), "{e}");
    let e = err(&format!(
        "{}[classes.h]\nmatch = [{{ path = \"/h\" }}]\nlane = \"urgent\"\n",
        zone("algorithm = \"concurrency\"\nmax = 4")
    ));
    assert!(
        e.contains("p.toml:10:8") && e.contains("unknown lane"),
        "{e}"
    );
    let e = err(&format!(
        "{}lane = \"critical\"\n",
        zone("algorithm = \"gcra\"\nrate = \"1r/s\"")
    ));
    assert!(e.contains("`lane`") && e.contains("concurrency"), "{e}");
}

#[test]
fn host_zones_learn_as_policy_zones_do() {
    use weir::policy::config::{Algorithm, HostLimit, HostLimits, HostZone};
    let mut b = HostLimits::default();
    let zone = HostZone {
        size: 1 << 20,
        algorithm: Algorithm::Concurrency { max: 0 },
    };
    b.zone("app", zone.clone());
    b.capacity("app", Some(Some((4, 400))), 2);
    b.limit("app", HostLimit::default());
    let p = b.build().unwrap();
    let z = &p.zones[0];
    assert_eq!(
        (z.learn.map(|a| (a.min(), a.max())), z.reserve),
        (Some((4, 400)), 2)
    );
    // A limit's own number on a learned zone is refused, as in a policy file.
    let mut b = HostLimits::default();
    b.zone("app", zone);
    b.capacity("app", Some(None), 0);
    let fixed = HostLimit {
        max: Some(10),
        ..HostLimit::default()
    };
    b.limit("app", fixed);
    let e = b.build().unwrap_err();
    assert!(e.contains("learns its limit"), "{e}");
}
