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

/// Shared regions for successive policies, as nginx gives them on reloads: a zone keeps its
/// memory while its name and layout stay; the counter block while the limits' names stay.
#[derive(Default)]
struct Reloads {
    zones: Vec<(
        weir::policy::engine::ZoneLayout,
        crate::common::SharedRegion,
    )>,
    counters: Vec<(u64, crate::common::SharedRegion)>,
    /// The counter block of the last engine (nginx: the running configuration's).
    last: Option<u64>,
}

impl Reloads {
    fn attach(&mut self, text: &str) -> Engine {
        use weir::policy::engine::HostRegions;
        let policy = parse_policy(text, None).unwrap();
        let region = |m: &crate::common::SharedRegion| {
            // SAFETY: the mappings live as long as `self`, after every engine over them.
            unsafe { weir::region::Region::new(m.ptr, m.len, 64) }.unwrap()
        };
        let mut zones = Vec::new();
        for l in Engine::layouts(&policy) {
            let same = |(k, _): &&(weir::policy::engine::ZoneLayout, _)| {
                (&k.name, k.schema, k.bytes) == (&l.name, l.schema, l.bytes)
            };
            if !self.zones.iter().any(|z| same(&z)) {
                let map = crate::common::SharedRegion::new(l.bytes);
                self.zones.push((l.clone(), map));
            }
            zones.push(region(&self.zones.iter().find(same).unwrap().1));
        }
        let (bytes, fp) = Engine::counters_layout(&policy);
        if !self.counters.iter().any(|(f, _)| *f == fp) {
            self.counters
                .push((fp, crate::common::SharedRegion::new(bytes)));
        }
        let counters = region(&self.counters.iter().find(|(f, _)| *f == fp).unwrap().1);
        let regions = HostRegions {
            zones: &zones,
            cluster: None,
            counters: Some(counters),
        };
        let opts = AttachOptions {
            clock_base: 0,
            start_syncers: false,
            fresh: Fresh::Zeroed,
        };
        let engine = Engine::attach(policy, regions, opts).unwrap();
        // A new block (the limits changed): the bans listed in the old one carry over.
        if let Some(old) = self.last.filter(|&old| old != fp) {
            let old = region(&self.counters.iter().find(|(f, _)| *f == old).unwrap().1);
            engine.carry_bans(old, weir::clock::monotonic_ns());
        }
        self.last = Some(fp);
        engine
    }
}

/// `login` (every /login request, 1 a second with a burst of 1 in a bucket it shares with
/// `site`: one request passes at a time) bans a client after 2 rejections; `site` (every
/// request, same zone and key, so the same ban entry but for the limit) has a ban it never
/// reaches; `extra` limits (in zone x) come first.
fn login_policy(extra: &[&str], login_ban: bool, order_site_first: bool) -> String {
    let mut text = String::from(
        "[zones.ip]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
         [zones.x]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
         [classes.login]\nmatch = [{ path = \"/login\" }]\n\
         [classes.x]\nmatch = [{ path = \"/x\" }]\n",
    );
    for name in extra {
        text += &format!("[[limit]]\nname = \"{name}\"\nclass = \"x\"\nzone = \"x\"\n");
    }
    let login = format!(
        "[[limit]]\nname = \"login\"\nclass = \"login\"\nzone = \"ip\"\nburst = 1\n{}\n",
        if login_ban {
            "ban = { after = 2, within = \"1m\", duration = \"10m\" }"
        } else {
            ""
        }
    );
    let site =
        "[[limit]]\nname = \"site\"\nclass = \"*\"\nzone = \"ip\"\nburst = 100\nnodelay = true\n\
                ban = { after = 1000, within = \"1m\", duration = \"10m\" }\n";
    if order_site_first {
        text + site + &login
    } else {
        text + &login + site
    }
}

fn get(path: &str) -> OwnedRequest {
    OwnedRequest::new("GET", path, "192.0.2.1".parse().unwrap())
}

/// Limit `name`'s listed bans in the JSON status (`None`: it has no `ban`).
fn listed(engine: &Engine, name: &str, now: u64) -> Option<Vec<String>> {
    let j = json(engine, now);
    let limit = j["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap();
    let bans = limit.get("bans")?.as_array().unwrap().iter();
    Some(
        bans.map(|b| b["key"].as_str().unwrap().to_string())
            .collect(),
    )
}

/// Bans 192.0.2.1 through `login` at `t0`.
fn ban_login(engine: &Engine, t0: u64) {
    let login = engine.limit_index("login").unwrap();
    for _ in 0..10 {
        let out = engine.evaluate(&get("/login"), t0).unwrap();
        if out.ban_started.is_some() {
            assert_eq!(out.limit, Some(login as u16));
            return;
        }
    }
    panic!("login never banned");
}

/// Asserts that `login` refuses 192.0.2.1 as banned (lists it) and that no other limit does.
fn banned_by_login_only(engine: &Engine, now: u64, what: &str) {
    let login = engine.limit_index("login").unwrap();
    let out = engine.evaluate(&get("/login"), now).unwrap();
    assert_eq!(
        (out.action, out.banned, out.limit),
        (Action::Reject, true, Some(login as u16)),
        "{what}: login no longer bans the client"
    );
    let site = engine.evaluate(&get("/page"), now).unwrap();
    assert_eq!(
        (site.action, site.banned),
        (Action::Pass, false),
        "{what}: another limit bans the client"
    );
    assert_eq!(
        listed(engine, "login", now).unwrap(),
        ["192.0.2.1"],
        "{what}"
    );
    assert_eq!(
        listed(engine, "site", now).unwrap(),
        Vec::<String>::new(),
        "{what}"
    );
}

#[test]
fn a_ban_stays_with_its_limit_when_limits_are_added_removed_and_reordered() {
    let mut host = Reloads::default();
    let t0 = weir::clock::monotonic_ns();
    let first = host.attach(&login_policy(&[], true, false));
    ban_login(&first, t0);
    banned_by_login_only(&first, t0 + S, "before any edit");
    // A limit prepended (the incident page's step 2): login moves from index 0 to 1.
    let prepended = host.attach(&login_policy(&["tools"], true, false));
    banned_by_login_only(&prepended, t0 + 2 * S, "a limit prepended");
    // Reordered: site first (login's former index), and two limits before both.
    let reordered = host.attach(&login_policy(&["a", "b"], true, true));
    banned_by_login_only(&reordered, t0 + 3 * S, "limits reordered");
    // Back to the first policy: still the one ban, with what is left of it.
    let back = host.attach(&login_policy(&[], true, false));
    banned_by_login_only(&back, t0 + 4 * S, "limits removed");
    let out = back.evaluate(&get("/login"), t0 + 60 * S).unwrap();
    assert_eq!(out.retry_after_s(), 540);
}

#[test]
fn removing_ban_lifts_the_bans_and_putting_it_back_starts_with_none() {
    let mut host = Reloads::default();
    let t0 = weir::clock::monotonic_ns();
    let first = host.attach(&login_policy(&[], true, false));
    ban_login(&first, t0);
    // `ban` removed: the limit refuses by its rate only, lists nothing, and a key operation
    // sees no ban (the counter block is the same: same limits).
    let without = host.attach(&login_policy(&[], false, false));
    let now = t0 + 5 * S;
    let out = without.evaluate(&get("/login"), now).unwrap();
    assert_eq!((out.action, out.banned), (Action::Pass, false), "{out:?}");
    assert_eq!(listed(&without, "login", now), None);
    // `ban` put back while the old ban would still run: it is not resurrected, nor listed.
    let again = host.attach(&login_policy(&[], true, false));
    let now = t0 + 10 * S;
    let out = again.evaluate(&get("/login"), now).unwrap();
    assert_eq!((out.action, out.banned), (Action::Pass, false), "{out:?}");
    assert_eq!(listed(&again, "login", now).unwrap(), Vec::<String>::new());
    // ... and bans anew.
    ban_login(&again, now);
    banned_by_login_only(&again, now + S, "a new ban after ban came back");
}

#[test]
fn a_renamed_or_moved_limit_leaves_its_bans_behind_for_good() {
    let mut host = Reloads::default();
    let t0 = weir::clock::monotonic_ns();
    let first = host.attach(&login_policy(&[], true, false));
    ban_login(&first, t0);
    // Renamed: the bans stay with the old name, which no limit has now.
    let renamed = host
        .attach(&login_policy(&[], true, false).replace("\"login\"\nclass", "\"signin\"\nclass"));
    let out = renamed.evaluate(&get("/login"), t0 + 5 * S).unwrap();
    assert_eq!((out.action, out.banned), (Action::Pass, false), "{out:?}");
    // Named back: the old bans do not come back.
    let back = host.attach(&login_policy(&[], true, false));
    let out = back.evaluate(&get("/login"), t0 + 10 * S).unwrap();
    assert!(!out.banned, "{out:?}");
    ban_login(&back, t0 + 10 * S);
    // Moved to zone x: its bans stayed in zone ip; moved back, they do not come back.
    let moved = host.attach(&login_policy(&[], true, false).replace(
        "class = \"login\"\nzone = \"ip\"",
        "class = \"login\"\nzone = \"x\"",
    ));
    let out = moved.evaluate(&get("/login"), t0 + 20 * S).unwrap();
    assert!(!out.banned, "{out:?}");
    assert_eq!(
        listed(&moved, "login", t0 + 20 * S).unwrap(),
        Vec::<String>::new()
    );
    let home = host.attach(&login_policy(&[], true, false));
    let out = home.evaluate(&get("/login"), t0 + 30 * S).unwrap();
    assert!(!out.banned, "{out:?}");
    assert_eq!(
        listed(&home, "login", t0 + 30 * S).unwrap(),
        Vec::<String>::new()
    );
}
