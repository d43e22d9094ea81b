//! Permits and queue tickets carried as raw parts (across an FFI) are given back at most once,
//! forged ones change nothing, and a request view with endless header values is refused.

use std::net::IpAddr;

use weir::policy::engine::{Permits, QueueTicket, RawPermit};
use weir::policy::{parse_policy, Action, Engine, EvalError, OwnedRequest, RequestView};

const POLICY: &str = "[zones.c]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = 2\n\
    [[limit]]\nclass = \"*\"\nzone = \"c\"\nkey = \"global\"\nqueue = 1\n";
const T0: u64 = 1_000_000_000_000;

fn engine() -> Engine {
    Engine::new(parse_policy(POLICY, None).unwrap()).unwrap()
}

fn req() -> OwnedRequest {
    OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap())
}

#[test]
fn a_copy_of_released_permits_frees_nothing() {
    let e = engine();
    let first = e.evaluate(&req(), T0).unwrap();
    let second = e.evaluate(&req(), T0).unwrap();
    assert_eq!((first.action, second.action), (Action::Pass, Action::Pass));
    let raw = first.permits.into_raw();
    e.release(Permits::from_raw(raw), T0);
    e.release(Permits::from_raw(raw), T0);
    let third = e.evaluate(&req(), T0).unwrap();
    assert_eq!(third.action, Action::Pass, "one place was free");
    let fourth = e.evaluate(&req(), T0).unwrap();
    assert_eq!(
        fourth.action,
        Action::Queue,
        "the copy freed a second place"
    );

    // The queue ticket: abandoned twice through copies, one place comes back once.
    let ticket = fourth.ticket.unwrap();
    let deadline = ticket.deadline_ns();
    let ticket = ticket.into_raw();
    e.abandon(QueueTicket::from_raw(ticket, deadline), T0);
    e.abandon(QueueTicket::from_raw(ticket, deadline), T0);
    // A stale ticket holds no place: evaluated again, it queues as a new request would.
    let again = e
        .evaluate_queued(&req(), T0, QueueTicket::from_raw(ticket, deadline))
        .unwrap();
    assert_eq!(again.action, Action::Queue);
    assert_eq!(e.evaluate(&req(), T0).unwrap().action, Action::Reject);
    e.abandon(again.ticket.unwrap(), T0);
    e.release(second.permits, T0);
    e.release(third.permits, T0);
}

#[test]
fn forged_permits_and_tickets_change_nothing() {
    let e = engine();
    let held = e.evaluate(&req(), T0).unwrap();
    let forged = RawPermit {
        limit: 9,
        key_hash: 1,
        bucket: 2,
        generation: 3,
    };
    e.release(Permits::from_raw([Some(forged), None, None, None]), T0);
    e.abandon(QueueTicket::from_raw(forged, u64::MAX), T0);
    let out = e
        .evaluate_queued(&req(), T0, QueueTicket::from_raw(forged, u64::MAX))
        .unwrap();
    assert_eq!(out.action, Action::Pass);
    assert_eq!(e.evaluate(&req(), T0).unwrap().action, Action::Queue);
    assert!(!e.is_concurrency_limit(9) && e.is_concurrency_limit(0));
    e.release(held.permits, T0);
    e.release(out.permits, T0);
}

/// A host whose header lookup never runs out.
struct Endless;

impl RequestView for Endless {
    fn method(&self) -> &[u8] {
        b"GET"
    }
    fn target(&self) -> &[u8] {
        b"/"
    }
    fn peer(&self) -> Option<IpAddr> {
        Some(IpAddr::from([192, 0, 2, 1]))
    }
    fn header_nth(&self, _: &[u8], nth: usize) -> Option<&[u8]> {
        // Bounded only so that a missing bound fails instead of hanging.
        (nth < 1_000_000).then_some(b"203.0.113.9")
    }
}

#[test]
fn endless_header_values_are_refused_before_anything_is_charged() {
    let e = Engine::new(
        parse_policy(
            "trusted_proxies = \"192.0.2.0/24\"\n[zones.c]\nsize = \"64k\"\n\
             algorithm = \"concurrency\"\nmax = 1\n[[limit]]\nclass = \"*\"\nzone = \"c\"\n",
            None,
        )
        .unwrap(),
    )
    .unwrap();
    assert!(matches!(
        e.evaluate(&Endless, T0),
        Err(EvalError::TooManyHeaderValues)
    ));
    // The permit was not taken: a well-formed request from the same address passes.
    let ok = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap())
        .header("X-Forwarded-For", "203.0.113.9");
    let out = e.evaluate(&ok, T0).unwrap();
    assert_eq!(out.action, Action::Pass);
    e.release(out.permits, T0);
}
