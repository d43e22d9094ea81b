//! `charge_on_status`: a limit checked before the request runs and charged after its
//! response, only for the listed statuses. Failures count, successes never do; a stale copy
//! of a charge set charges nothing; concurrent requests of one key all pass the check before
//! any charge lands (the documented bound), which a concurrency limit on the same key closes;
//! bad lists are refused with their position.

use std::sync::{Arc, Barrier};
use std::thread;

use weir::policy::engine::Charges;
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};

const S: u64 = 1_000_000_000;

/// 3 failed logins a minute per address (`extra` is appended to the limit).
fn policy(extra: &str) -> String {
    format!(
        "[zones.login]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 3\nwindow = \"1m\"\n\
         [[limit]]\nname = \"login\"\nclass = \"*\"\nzone = \"login\"\ncharge_on_status = [401, 403]\n{extra}\n"
    )
}

fn engine(src: &str) -> Engine {
    Engine::new(parse_policy(src, None).unwrap()).unwrap()
}

fn req(ip: &str) -> OwnedRequest {
    OwnedRequest::new("POST", "/login", ip.parse().unwrap())
}

/// One request of `ip` at `now` answered `status`; its action.
fn answer(e: &Engine, ip: &str, status: u16, now: u64) -> Action {
    let out = e.evaluate(&req(ip), now).unwrap();
    if out.action == Action::Reject {
        assert!(
            out.charges.is_empty(),
            "a refused request carries no charge"
        );
    } else {
        assert!(!out.charges.is_empty());
    }
    e.charge_response(out.charges, status, now);
    e.release(out.permits, now);
    out.action
}

#[test]
fn only_the_listed_statuses_are_charged() {
    let e = engine(&policy(""));
    let t = 1000 * S;
    for _ in 0..20 {
        assert_eq!(
            answer(&e, "192.0.2.1", 200, t),
            Action::Pass,
            "200s never count"
        );
    }
    for status in [401, 403, 401] {
        assert_eq!(answer(&e, "192.0.2.1", status, t), Action::Pass);
    }
    // Three failures: the key is over, whatever its next answer would be.
    let out = e.evaluate(&req("192.0.2.1"), t).unwrap();
    assert_eq!(
        (out.action, out.status, out.limit),
        (Action::Reject, 429, Some(0))
    );
    assert_eq!(answer(&e, "192.0.2.2", 200, t), Action::Pass, "other keys");
    let c = e.counters(0);
    assert_eq!((c.passed, c.rejected), (24, 1), "checks count as passed");
    // Status 0 (no response) charges nothing.
    for _ in 0..5 {
        assert_eq!(answer(&e, "192.0.2.3", 0, t), Action::Pass);
    }
    // Two windows later the key is whole again.
    assert_eq!(answer(&e, "192.0.2.1", 401, t + 120 * S), Action::Pass);
}

#[test]
fn a_charge_set_charges_once() {
    let e = engine(&policy(""));
    let t = 1000 * S;
    for _ in 0..3 {
        let out = e.evaluate(&req("192.0.2.1"), t).unwrap();
        let (raw, generation) = out.charges.into_raw();
        assert_eq!(raw[0].map(|r| r.limit), Some(0));
        e.charge_response(Charges::from_raw(raw, generation), 401, t);
        // A copy handed back again (a host's duplicated verdict) charges nothing.
        e.charge_response(Charges::from_raw(raw, generation), 401, t);
    }
    assert_eq!(
        e.evaluate(&req("192.0.2.1"), t).unwrap().action,
        Action::Reject
    );
}

#[test]
fn refused_checks_strike_a_ban_and_other_rejections_carry_no_charge() {
    let e = engine(&policy(
        "ban = { after = 2, within = \"1m\", duration = \"10m\" }\n\
         [[limit]]\nname = \"all\"\nclass = \"*\"\nzone = \"login\"\nkey = \"global\"",
    ));
    let t = 1000 * S;
    for _ in 0..3 {
        assert_eq!(answer(&e, "192.0.2.1", 401, t), Action::Pass);
    }
    let first = e.evaluate(&req("192.0.2.1"), t).unwrap();
    assert_eq!(first.action, Action::Reject);
    assert!(first.ban_started.is_none());
    let second = e.evaluate(&req("192.0.2.1"), t).unwrap();
    assert!(second.ban_started.is_some(), "the second refusal bans");
    // The global limit (3 requests, charged when checked) is now full: its rejection gives
    // back nothing of the deferred limit, which was never charged.
    let out = e.evaluate(&req("192.0.2.9"), t).unwrap();
    assert_eq!((out.action, out.limit), (Action::Reject, Some(1)));
    assert!(out.charges.is_empty());
}

/// `n` requests of one key checked at once, all before any response; their outcomes.
fn concurrent(e: &Arc<Engine>, n: usize, now: u64) -> Vec<weir::policy::Outcome> {
    let gate = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (e, gate) = (e.clone(), gate.clone());
            thread::spawn(move || {
                gate.wait();
                e.evaluate(&req("192.0.2.1"), now).unwrap()
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn requests_in_flight_at_the_check_pass_beyond_the_limit() {
    let e = Arc::new(engine(&policy("")));
    let t = 1000 * S;
    for _ in 0..2 {
        assert_eq!(answer(&e, "192.0.2.1", 401, t), Action::Pass);
    }
    // One failure left: all 8 in flight pass the check (the bound: 8 - 1 beyond the limit).
    let outs = concurrent(&e, 8, t);
    assert!(outs.iter().all(|o| o.action == Action::Pass));
    for o in outs {
        e.charge_response(o.charges, 401, t);
    }
    // The charges beyond the limit found it full and changed nothing; the key is refused.
    assert_eq!(
        e.evaluate(&req("192.0.2.1"), t).unwrap().action,
        Action::Reject
    );
    assert_eq!(e.counters(0).passed, 10);
}

#[test]
fn a_concurrency_limit_on_the_same_key_bounds_the_race() {
    let e = Arc::new(engine(&format!(
        "{}[zones.one]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = 1\n\
         [[limit]]\nname = \"one\"\nclass = \"*\"\nzone = \"one\"\n",
        policy("")
    )));
    let t = 1000 * S;
    let mut passed = 0;
    for _ in 0..6 {
        let outs = concurrent(&e, 8, t);
        let admitted = outs.iter().filter(|o| o.action == Action::Pass).count();
        assert!(admitted <= 1, "one in flight per key");
        passed += admitted;
        // Charged before the permits are given back.
        for o in outs {
            e.charge_response(o.charges, 401, t);
            e.release(o.permits, t);
        }
    }
    assert_eq!(
        passed, 3,
        "exactly the limit's count of failures got through"
    );
}

#[test]
fn bad_lists_are_refused_with_their_position() {
    for (list, want) in [
        ("[]", "`charge_on_status` is an empty list"),
        (
            "[401, 99]",
            "charge_on_status must be between 100 and 599, not 99",
        ),
        (
            "[600]",
            "charge_on_status must be between 100 and 599, not 600",
        ),
        ("[401, 403, 401]", "status 401 is listed twice"),
        ("401", "invalid type"),
    ] {
        let src = policy("").replace("[401, 403]", list);
        let e = parse_policy(&src, None).unwrap_err().to_string();
        assert!(e.contains(want), "{list}: {e}");
        assert!(
            e.starts_with("10:"),
            "{list}: the position of the list: {e}"
        );
    }
    let conc = "[zones.c]\nsize = \"64k\"\nalgorithm = \"concurrency\"\nmax = 1\n\
                [[limit]]\nclass = \"*\"\nzone = \"c\"\ncharge_on_status = [401]\n";
    let e = parse_policy(conc, None).unwrap_err().to_string();
    assert!(e.starts_with("8:20:"), "{e}");
    assert!(e.contains("applies only to rate limits"), "{e}");
    let five: String = (0..5)
        .map(|i| {
            format!("[[limit]]\nname = \"l{i}\"\nclass = \"*\"\nzone = \"login\"\ncharge_on_status = [401]\n")
        })
        .collect();
    let src = format!("{}{five}", policy(""));
    let e = parse_policy(&src, None).unwrap_err().to_string();
    assert!(
        e.contains("at most 4 limits may have `charge_on_status`"),
        "{e}"
    );
}
