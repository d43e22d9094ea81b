//! Permits held longer than their lease keep counting while their process renews them
//! (`Engine::renew_held`), are released in the bucket a renewal moved them to, and still
//! expire within two leases when nobody renews them (a holder that died).

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, RwLock};

use crate::engine_attach::PolicyRegions;
use weir::policy::engine::{AttachOptions, Permits, QueueTicket};
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};
use weir::region::Fresh;

const S: u64 = 1_000_000_000;
const LEASE: u64 = 2 * S;
const T0: u64 = 1_000 * S;

fn policy(max: u32, cost: u32, queue: u32) -> String {
    let mut policy = format!(
        "[zones.c]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = {max}\nlease = \"2s\"\n\
         [[limit]]\nclass = \"*\"\nzone = \"c\"\nkey = \"global\"\ncost = {cost}\n"
    );
    if queue > 0 {
        policy += &format!("queue = {queue}\ntimeout = \"1h\"\n");
    }
    policy
}

fn engine(max: u32, cost: u32, queue: u32) -> Engine {
    Engine::new(parse_policy(&policy(max, cost, queue), None).unwrap()).unwrap()
}

fn req() -> OwnedRequest {
    OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap())
}

fn action(e: &Engine, now: u64) -> Action {
    let out = e.evaluate(&req(), now).unwrap();
    let a = out.action;
    e.release(out.permits, now);
    if let Some(t) = out.ticket {
        e.abandon(t, now);
    }
    a
}

#[test]
fn a_renewed_permit_counts_for_the_whole_request() {
    let e = engine(1, 1, 0);
    assert_eq!(e.renew_interval_ns(), Some(LEASE / 4));
    let held = e.evaluate(&req(), T0).unwrap();
    assert_eq!(held.action, Action::Pass);
    // Ten leases, renewed every quarter lease: a second request is refused throughout.
    let mut now = T0;
    while now < T0 + 10 * LEASE {
        now += LEASE / 4;
        e.renew_held(now);
        assert_eq!(action(&e, now), Action::Reject, "{}s in", (now - T0) / S);
    }
    // Released in the bucket it was moved to: the place is free at once.
    e.release(held.permits, now);
    assert_eq!(action(&e, now), Action::Pass);
    assert_eq!(
        action(&e, now),
        Action::Pass,
        "the release gave back one place"
    );
}

#[test]
fn a_dead_holders_permits_expire_within_two_leases_while_live_ones_count() {
    // Two workers over the same zone: one dies holding a permit (it renews nothing any
    // more), the other holds one and renews it.
    let policy = parse_policy(&policy(2, 1, 0), None).unwrap();
    let shared = PolicyRegions::new(&policy);
    let opts = AttachOptions {
        clock_base: 0,
        start_syncers: false,
        fresh: Fresh::Zeroed,
    };
    let dead = Engine::attach(policy.clone(), shared.host(), opts).unwrap();
    let live = Engine::attach(policy, shared.host(), opts).unwrap();
    assert_eq!(dead.evaluate(&req(), T0).unwrap().action, Action::Pass);
    drop(dead);
    let held = live.evaluate(&req(), T0).unwrap();
    assert_eq!(held.action, Action::Pass);
    let mut now = T0;
    while now < T0 + 2 * LEASE {
        assert_eq!(action(&live, now), Action::Reject, "{}s in", (now - T0) / S);
        now += LEASE / 4;
        live.renew_held(now);
    }
    // Two leases on, the dead worker's permit is gone; the live one's still counts.
    let third = live.evaluate(&req(), now).unwrap();
    assert_eq!(third.action, Action::Pass);
    assert_eq!(action(&live, now), Action::Reject);
    live.release(held.permits, now);
    live.release(third.permits, now);
}

#[test]
fn renewals_move_units_and_queue_places() {
    let e = engine(4, 2, 1);
    let a = e.evaluate(&req(), T0).unwrap();
    let b = e.evaluate(&req(), T0).unwrap();
    let queued = e.evaluate(&req(), T0).unwrap();
    assert_eq!(
        (a.action, b.action, queued.action),
        (Action::Pass, Action::Pass, Action::Queue)
    );
    let ticket = queued.ticket.unwrap();
    let deadline = ticket.deadline_ns();
    let raw = ticket.into_raw();
    let mut now = T0;
    for _ in 0..12 {
        now += LEASE / 2;
        assert_eq!(e.renew_held(now) % 3, 0);
        // Both permits (2 units each) and the queue place still count.
        assert_eq!(action(&e, now), Action::Reject, "queue full");
    }
    e.abandon(QueueTicket::from_raw(raw, deadline), now);
    assert_eq!(action(&e, now), Action::Queue, "the queue place came back");
    e.release(a.permits, now);
    assert_eq!(action(&e, now), Action::Pass, "2 units came back");
    e.release(b.permits, now);
    let c = e.evaluate(&req(), now).unwrap();
    let d = e.evaluate(&req(), now).unwrap();
    assert_eq!((c.action, d.action), (Action::Pass, Action::Pass));
    assert_eq!(action(&e, now), Action::Queue);
    e.release(c.permits, now);
    e.release(d.permits, now);
}

#[test]
fn a_stale_copy_released_after_a_renewal_frees_nothing() {
    let e = engine(2, 1, 0);
    let a = e.evaluate(&req(), T0).unwrap();
    let raw = a.permits.into_raw();
    e.renew_held(T0 + LEASE);
    e.release(Permits::from_raw(raw), T0 + LEASE);
    e.release(Permits::from_raw(raw), T0 + LEASE);
    let b = e.evaluate(&req(), T0 + LEASE).unwrap();
    let c = e.evaluate(&req(), T0 + LEASE).unwrap();
    assert_eq!((b.action, c.action), (Action::Pass, Action::Pass));
    assert_eq!(
        action(&e, T0 + LEASE),
        Action::Reject,
        "one place freed, once"
    );
    e.release(b.permits, T0 + LEASE);
    e.release(c.permits, T0 + LEASE);
}

/// Renewals race with requests taking and releasing permits on other threads, across many
/// lease buckets: no release gives back the wrong bucket (the count would drift up, and the
/// key fill up) and none gives one back twice (it would drift down, and admit too many).
///
/// The clock runs 10,000 times faster than a real one (a quarter lease per 50 µs), so each
/// call holds it still from reading it to returning, as a host's call takes microseconds of a
/// lease: a thread descheduled between reading the clock and calling would otherwise act
/// leases in the past.
#[test]
fn renewals_racing_releases_keep_the_count_exact() {
    const MAX: u32 = 3;
    let e = Arc::new(engine(MAX, 1, 0));
    let clock = Arc::new(RwLock::new(T0));
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (e, clock, stop) = (e.clone(), clock.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut moved = 0;
            while !stop.load(SeqCst) {
                // A quarter lease per round: every permit crosses bucket boundaries.
                let now = {
                    let mut c = clock.write().unwrap();
                    *c += LEASE / 4;
                    *c
                };
                moved += e.renew_held(now);
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
            moved
        })
    };
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (e, clock) = (e.clone(), clock.clone());
            std::thread::spawn(move || {
                let mut admitted = 0;
                for i in 0..20_000 {
                    let out = {
                        let now = clock.read().unwrap();
                        e.evaluate(&req(), *now).unwrap()
                    };
                    if out.action == Action::Pass {
                        admitted += 1;
                        if i % 7 == 0 {
                            std::thread::yield_now();
                        }
                    }
                    let now = clock.read().unwrap();
                    e.release(out.permits, *now);
                }
                admitted
            })
        })
        .collect();
    let admitted: u32 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    stop.store(true, SeqCst);
    let moved = renewer.join().unwrap();
    assert!(
        admitted > 0 && moved > 0,
        "admitted {admitted}, moved {moved}"
    );
    // Nothing is held: exactly MAX places are free now.
    let now = *clock.read().unwrap();
    let outs: Vec<_> = (0..=MAX)
        .map(|_| e.evaluate(&req(), now).unwrap())
        .collect();
    let got: Vec<_> = outs.iter().map(|o| o.action).collect();
    let mut want = vec![Action::Pass; MAX as usize];
    want.push(Action::Reject);
    assert_eq!(
        got, want,
        "after {admitted} admissions and {moved} renewals"
    );
    for o in outs {
        e.release(o.permits, now);
    }
}
