//! The order in which the engine asks its limits: concurrency permits first, then one charge
//! per rate limit; an enforced rate rejection undoes everything and decides before a full
//! concurrency limit, exactly as if every rate limit had been predicted first.

use weir::policy::{Action, CompiledPolicy, Engine, OwnedRequest};

const POLICY: &str = r#"
[zones.slots]
size = "64k"
algorithm = "concurrency"
max = 1

[zones.rate]
size = "64k"
algorithm = "gcra"
rate = "1r/m"

[[limit]]
name = "inflight"
class = "*"
zone = "slots"
key = "global"
queue = 4
status = 503

[[limit]]
name = "per-ip"
class = "*"
zone = "rate"
status = 429
"#;

const T0: u64 = 1_000_000_000_000;

fn req(ip: &str) -> OwnedRequest {
    OwnedRequest::new("GET", "/report", ip.parse().unwrap())
}

#[test]
fn rate_rejection_releases_the_permit_it_took() {
    let engine = Engine::new(CompiledPolicy::parse(POLICY, None).unwrap()).unwrap();
    let first = engine.evaluate(&req("192.0.2.1"), T0).unwrap();
    assert_eq!(first.action, Action::Pass);
    engine.release(first.permits, T0);
    // The permit is free again, the rate limit rejects: the permit taken for this request
    // must be given back.
    let again = engine.evaluate(&req("192.0.2.1"), T0 + 1).unwrap();
    assert_eq!((again.action, again.status), (Action::Reject, 429));
    assert_eq!(engine.limit_name(again.limit.unwrap() as usize), "per-ip");
    assert!(again.permits.is_empty() && again.dry_run.is_none());
    let other = engine.evaluate(&req("192.0.2.2"), T0 + 2).unwrap();
    assert_eq!(
        other.action,
        Action::Pass,
        "permit of the rejected request leaked"
    );
    assert_eq!(engine.counters(0).passed, 2);
    assert_eq!(engine.counters(1).passed, 2);
    assert_eq!(engine.counters(1).rejected, 1);
    assert_eq!(engine.counters(0).rejected, 0);
    engine.release(other.permits, T0 + 3);
}

#[test]
fn rate_rejection_beats_a_full_concurrency_limit() {
    let engine = Engine::new(CompiledPolicy::parse(POLICY, None).unwrap()).unwrap();
    let holder = engine.evaluate(&req("192.0.2.1"), T0).unwrap();
    assert_eq!(holder.action, Action::Pass);
    // Concurrency is full and this client's rate is spent: the rate limit answers, nobody
    // queues, nothing is charged.
    let out = engine.evaluate(&req("192.0.2.1"), T0 + 1).unwrap();
    assert_eq!((out.action, out.status), (Action::Reject, 429));
    assert_eq!(engine.limit_name(out.limit.unwrap() as usize), "per-ip");
    assert!(out.ticket.is_none() && out.quota.is_some());
    assert!(out.retry_after_ns > 59_000_000_000);
    assert_eq!(engine.counters(0).queued, 0);
    // Another client with rate to spare queues behind the holder.
    let mut q = engine.evaluate(&req("192.0.2.2"), T0 + 2).unwrap();
    assert_eq!((q.action, q.status), (Action::Queue, 503));
    engine.release(holder.permits, T0 + 3);
    let done = engine
        .evaluate_queued(&req("192.0.2.2"), T0 + 4, q.ticket.take().unwrap())
        .unwrap();
    assert_eq!(done.action, Action::Pass);
    // Its rate was not charged while it waited: one pass now, the next one rejected.
    let next = engine.evaluate(&req("192.0.2.2"), T0 + 5).unwrap();
    assert_eq!(next.action, Action::Reject);
    engine.release(done.permits, T0 + 6);
}
