//! The engine's counters count requests, not evaluations: a queued request polling again is
//! still one request and one queueing.

use weir::policy::{Action, CompiledPolicy, Engine, OwnedRequest};

const POLICY: &str = r#"
[zones.slots]
size = "64k"
algorithm = "concurrency"
max = 1

[[limit]]
name = "one-at-a-time"
class = "*"
zone = "slots"
key = "global"
queue = 2
"#;

#[test]
fn queue_polls_are_not_counted_as_requests() {
    let engine = Engine::new(CompiledPolicy::parse(POLICY, None).unwrap()).unwrap();
    let t0 = 1_000_000_000_000u64;
    let a = OwnedRequest::new("GET", "/report", "192.0.2.1".parse().unwrap());
    let b = OwnedRequest::new("GET", "/report", "192.0.2.2".parse().unwrap());
    let first = engine.evaluate(&a, t0).unwrap();
    assert_eq!(first.action, Action::Pass);
    let mut waiting = engine.evaluate(&b, t0).unwrap();
    assert_eq!(waiting.action, Action::Queue);
    for i in 1..=10 {
        waiting = engine
            .evaluate_queued(&b, t0 + i, waiting.ticket.take().unwrap())
            .unwrap();
        assert_eq!(waiting.action, Action::Queue);
    }
    engine.release(first.permits, t0 + 20);
    let done = engine
        .evaluate_queued(&b, t0 + 21, waiting.ticket.take().unwrap())
        .unwrap();
    assert_eq!(done.action, Action::Pass);
    engine.release(done.permits, t0 + 30);

    let c = engine.counters(0);
    assert_eq!(engine.totals().requests, 2);
    assert_eq!(c.queued, 1);
    assert_eq!(c.passed, 2);
    assert_eq!(c.rejected, 0);
}

/// The engine ends a queued request's wait at its limit's timeout (5 s by default): asking
/// again then answers the limit's rejection, marked as a queue timeout, gives the place back,
/// and counts nothing more (the request was counted as queued). Until then it is told to ask
/// again every 10 ms, or at its deadline when that is nearer.
#[test]
fn the_engine_ends_a_queued_wait_at_its_timeout() {
    let engine = Engine::new(CompiledPolicy::parse(POLICY, None).unwrap()).unwrap();
    let t0 = 1_000_000_000_000u64;
    let timeout = 5_000_000_000;
    let a = OwnedRequest::new("GET", "/report", "192.0.2.1".parse().unwrap());
    let b = OwnedRequest::new("GET", "/report", "192.0.2.2".parse().unwrap());
    let first = engine.evaluate(&a, t0).unwrap();
    let mut waiting = engine.evaluate(&b, t0).unwrap();
    assert_eq!(
        (waiting.action, waiting.wait_ns),
        (Action::Queue, 10_000_000)
    );
    let ticket = waiting.ticket.take().unwrap();
    assert_eq!(ticket.deadline_ns(), t0 + timeout);
    waiting = engine
        .evaluate_queued(&b, t0 + timeout - 3, ticket)
        .unwrap();
    assert_eq!((waiting.action, waiting.wait_ns), (Action::Queue, 3));
    let timed_out = engine
        .evaluate_queued(&b, t0 + timeout, waiting.ticket.take().unwrap())
        .unwrap();
    assert_eq!(timed_out.action, Action::Reject);
    assert!(timed_out.queue_timeout && timed_out.ticket.is_none());
    assert_eq!((timed_out.status, timed_out.limit), (429, Some(0)));
    // Its place is free: two more fit in the queue of two, and only then is it full.
    let later = t0 + timeout + 1;
    let mut held: Vec<_> = (0..2)
        .map(|_| engine.evaluate(&b, later).unwrap())
        .collect();
    assert!(held.iter().all(|q| q.action == Action::Queue));
    assert_eq!(engine.evaluate(&b, later).unwrap().action, Action::Reject);
    for q in &mut held {
        engine.abandon(q.ticket.take().unwrap(), later);
    }
    engine.release(first.permits, later);
    let c = engine.counters(0);
    assert_eq!((c.passed, c.queued, c.rejected), (1, 3, 1));
}

/// Permits carried across an FFI boundary come back in any order, with gaps: every one of
/// them is still released.
#[test]
fn raw_permits_with_gaps_are_all_released() {
    use weir::policy::engine::Permits;
    let engine = Engine::new(CompiledPolicy::parse(POLICY, None).unwrap()).unwrap();
    let t0 = 1_000_000_000_000u64;
    let a = OwnedRequest::new("GET", "/report", "192.0.2.1".parse().unwrap());
    let first = engine.evaluate(&a, t0).unwrap();
    assert_eq!(first.action, Action::Pass);
    let raw = first.permits.into_raw();
    assert!(raw[0].is_some() && raw[1..].iter().all(Option::is_none));
    // The one permit moved to the last place.
    let gappy = [None, None, None, raw[0]];
    engine.release(Permits::from_raw(gappy), t0 + 1);
    let again = engine.evaluate(&a, t0 + 2).unwrap();
    assert_eq!(again.action, Action::Pass, "the slot was not given back");
    engine.release(again.permits, t0 + 3);
}
