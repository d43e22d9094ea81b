//! Ban periods (`ban = { after, within, duration }`): a key rejected `after` times within
//! `within` is refused outright for `duration`, even when its rate would admit it; the ban
//! ends; it is listed in the JSON status and announced by exactly one request, under
//! concurrent threads too; a second engine over the same regions (a reload) still enforces
//! and lists it; bad `ban` tables are refused with their position.

use crate::engine_attach::PolicyRegions;
use serde_json::Value;
use weir::policy::engine::AttachOptions;
use weir::policy::metrics::{Format, Snapshot};
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};
use weir::region::Fresh;

const S: u64 = 1_000_000_000;

/// 1 request a second per address (no burst); 3 rejections within 1 minute ban for 10 minutes.
fn policy(ban: &str) -> String {
    format!(
        "[zones.ip]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
         [[limit]]\nname = \"per-ip\"\nclass = \"*\"\nzone = \"ip\"\n{ban}\n\
         [[limit]]\nname = \"other\"\nclass = \"*\"\nzone = \"ip\"\nkey = \"path\"\n"
    )
}

const BAN: &str = "ban = { after = 3, within = \"1m\", duration = \"10m\" }";

fn req(ip: &str) -> OwnedRequest {
    OwnedRequest::new("GET", "/", ip.parse().unwrap())
}

fn json(engine: &Engine, now: u64) -> Value {
    serde_json::from_str(&Snapshot::take(&[engine], &[], now).render(Format::Json)).unwrap()
}

/// Rejections of 192.0.2.1 at `t0` until one starts the ban; the number of requests sent.
fn until_banned(engine: &Engine, t0: u64) -> usize {
    for n in 1..=10 {
        let out = engine.evaluate(&req("192.0.2.1"), t0).unwrap();
        if out.ban_started.is_some() {
            assert_eq!(out.action, Action::Reject);
            assert_eq!(out.retry_after_s(), 600, "Retry-After is the ban's length");
            return n;
        }
    }
    panic!("no ban after 10 requests");
}

#[test]
fn a_ban_refuses_outright_for_its_duration_then_ends() {
    let engine = Engine::new(parse_policy(&policy(BAN), None).unwrap()).unwrap();
    let t0 = 1000 * S;
    // One pass, then the third rejection bans.
    assert_eq!(until_banned(&engine, t0), 4);
    // A minute later the rate would admit the key: the ban refuses it, with what is left.
    let out = engine.evaluate(&req("192.0.2.1"), t0 + 60 * S).unwrap();
    assert_eq!(
        (out.action, out.limit, out.banned),
        (Action::Reject, Some(0), true)
    );
    assert_eq!(out.retry_after_s(), 540);
    assert!(out.ban_started.is_none());
    // Other keys are not banned.
    let other = engine.evaluate(&req("192.0.2.2"), t0 + 60 * S).unwrap();
    assert_eq!(other.action, Action::Pass);
    let c = engine.counters(0);
    assert_eq!((c.rejected, c.banned), (3, 1));
    let j = json(&engine, t0 + 60 * S);
    assert_eq!(j["limits"][0]["banned"], 1);
    assert_eq!(j["limits"][0]["bans"][0]["key"], "192.0.2.1");
    assert_eq!(j["limits"][0]["bans"][0]["remaining_s"], 540);
    assert_eq!(j["limits"][0]["bans"].as_array().unwrap().len(), 1);
    assert_eq!(
        j["limits"][1].get("bans"),
        None,
        "a limit without ban lists none"
    );
    let prom = engine.snapshot().render(Format::Prometheus);
    assert!(
        prom.contains("verdict=\"banned\"") && !prom.contains("192.0.2.1"),
        "{prom}"
    );
    // Ended: admitted again, and no longer listed.
    let out = engine.evaluate(&req("192.0.2.1"), t0 + 600 * S).unwrap();
    assert_eq!(out.action, Action::Pass);
    let j = json(&engine, t0 + 600 * S);
    assert_eq!(j["limits"][0]["bans"], Value::Array(vec![]));
}

#[test]
fn rejections_spread_beyond_the_window_do_not_ban() {
    let engine = Engine::new(parse_policy(&policy(BAN), None).unwrap()).unwrap();
    let mut t = 1000 * S;
    for _ in 0..10 {
        // One pass and one rejection every 40 s: two strikes per minute window at most.
        engine.evaluate(&req("192.0.2.1"), t).unwrap();
        let out = engine.evaluate(&req("192.0.2.1"), t).unwrap();
        assert_eq!(out.action, Action::Reject);
        assert!(out.ban_started.is_none() && !out.banned);
        t += 40 * S;
    }
}

#[test]
fn one_ban_is_announced_and_listed_once_under_concurrent_threads() {
    let b = "ban = { after = 50, within = \"1m\", duration = \"10m\" }";
    let engine = Engine::new(parse_policy(&policy(b), None).unwrap()).unwrap();
    let t0 = 1000 * S;
    let started = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    (0..200)
                        .filter(|_| {
                            let out = engine.evaluate(&req("192.0.2.9"), t0).unwrap();
                            out.ban_started.is_some()
                        })
                        .count()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum::<usize>()
    });
    assert_eq!(started, 1);
    // The 50th rejection starts the ban. A request that read the key's ban entry before
    // that, and is charged after it, is still rejected (not refused as banned): so at least
    // 50 rejections, and every request after the first either rejected or banned.
    let c = engine.counters(0);
    assert_eq!(c.passed, 1);
    assert!(c.rejected >= 50 && c.rejected < 54, "{c:?}");
    assert_eq!(c.rejected + c.banned, 799, "{c:?}");
    let j = json(&engine, t0);
    assert_eq!(j["limits"][0]["bans"].as_array().unwrap().len(), 1);
}

#[test]
fn a_ban_survives_a_second_engine_over_the_same_regions() {
    let policy = parse_policy(&policy(BAN), None).unwrap();
    let shared = PolicyRegions::new(&policy);
    let regions = shared.host();
    let opts = AttachOptions {
        clock_base: 0,
        start_syncers: false,
        fresh: Fresh::Zeroed,
    };
    let t0 = weir::clock::monotonic_ns();
    let first = Engine::attach(policy.clone(), regions, opts).unwrap();
    let started = until_banned(&first, t0);
    let entry = first.evaluate(&req("192.0.2.1"), t0).unwrap();
    assert!(entry.banned);
    drop(first);
    let second = Engine::attach(policy, regions, opts).unwrap();
    let out = second.evaluate(&req("192.0.2.1"), t0 + 30 * S).unwrap();
    assert_eq!((out.action, out.banned), (Action::Reject, true));
    assert_eq!(out.retry_after_s(), 570);
    let j = json(&second, t0 + 30 * S);
    assert_eq!(j["limits"][0]["bans"][0]["key"], "192.0.2.1");
    assert_eq!(second.counters(0).rejected, started as u64 - 1);
}

#[test]
fn bad_ban_tables_are_refused_with_their_position() {
    for (ban, want) in [
        (
            "ban = { after = 0, within = \"1m\", duration = \"10m\" }",
            "ban after must be between 1",
        ),
        (
            "ban = { after = 3, within = \"0s\", duration = \"10m\" }",
            "ban within must be between 1ms",
        ),
        (
            "ban = { after = 3, within = \"1m\", duration = \"0\" }",
            "ban duration must be between 1ms",
        ),
        (
            "ban = { after = 3, within = \"1m\" }",
            "missing field `duration`",
        ),
        (
            "ban = { after = 3, within = \"1m\", duration = \"1m\", scope = \"all\" }",
            "unknown field `scope`",
        ),
    ] {
        let e = parse_policy(&policy(ban), None).unwrap_err().to_string();
        assert!(e.contains(want), "{ban}: {e}");
        assert!(e.starts_with("9:"), "{ban}: the position of the ban: {e}");
    }
    let log =
        "[zones.l]\nsize = \"64k\"\nalgorithm = \"sliding_log\"\nevents = 2\nwindow = \"1m\"\n\
               [[limit]]\nclass = \"*\"\nzone = \"l\"\n";
    let e = parse_policy(&format!("{log}{BAN}\n"), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not apply to sliding_log zones"), "{e}");
}

#[test]
fn the_list_keeps_the_latest_bans_when_full_and_every_ban_is_enforced() {
    let b = "ban = { after = 1, within = \"1m\", duration = \"10m\" }";
    let engine = Engine::new(parse_policy(&policy(b), None).unwrap()).unwrap();
    let t0 = 1000 * S;
    let ip = |i: u64| format!("10.0.{}.{}", i / 256, i % 256);
    let n = weir::policy::topkeys::BAN_SLOTS as u64 + 6;
    for i in 0..n {
        // One pass, then the rejection that bans, one second apart: later bans end later.
        let t = t0 + i * S;
        assert_eq!(
            engine.evaluate(&req(&ip(i)), t).unwrap().action,
            Action::Pass
        );
        assert!(engine
            .evaluate(&req(&ip(i)), t)
            .unwrap()
            .ban_started
            .is_some());
    }
    let now = t0 + n * S;
    let j = json(&engine, now);
    let bans = j["limits"][0]["bans"].as_array().unwrap();
    assert_eq!(bans.len(), weir::policy::topkeys::BAN_SLOTS);
    // Longest lasting first; the 6 that end first left the list.
    assert_eq!(bans[0]["key"], ip(n - 1));
    assert_eq!(bans[bans.len() - 1]["key"], ip(6));
    for i in 0..n {
        assert!(
            engine.evaluate(&req(&ip(i)), now).unwrap().banned,
            "{}",
            ip(i)
        );
    }
}
