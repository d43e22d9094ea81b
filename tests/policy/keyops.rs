//! Key operations (`weir::policy::keyops`, the status endpoint's `?limit=&key=`): for every
//! kind of key, the text a rejected request's key is rendered as (access logs, top keys)
//! names the very state evaluation charged: inspecting it shows the rejection, resetting it
//! lets the request pass again, and a neighbouring key is untouched. Bans are lifted and
//! leave the status's list; bad text, unknown limits and wrong methods are refused.

use serde_json::Value;
use weir::policy::config::LogLevel;
use weir::policy::keyops::{key_request, Access};
use weir::policy::metrics::{Format, Snapshot};
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};

const S: u64 = 1_000_000_000;
const T0: u64 = 1000 * S;

/// An engine whose key text shows every value (`[key_text] hide = []`).
fn engine(zone: &str, limit: &str) -> Engine {
    engine_hiding("[]", zone, limit)
}

fn engine_hiding(hide: &str, zone: &str, limit: &str) -> Engine {
    let src = format!("[key_text]\nhide = {hide}\n[zones.z]\nsize = \"64k\"\n{zone}\n[[limit]]\nname = \"l\"\nclass = \"*\"\nzone = \"z\"\nlog_level = \"warn\"\n{limit}\n");
    Engine::new(parse_policy(&src, None).unwrap()).unwrap()
}

fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Changes enabled, as `weir key` sends a change: the action header, no browser headers.
fn writer(action: Option<&str>) -> Access<'_> {
    Access {
        write: true,
        key_action: action.map(str::as_bytes),
        ..Access::default()
    }
}

fn op(e: &Engine, method: &str, key: &str, action: Option<&str>, now: u64) -> (u16, Value) {
    let mut q = format!("limit=l&key={}", enc(key));
    if let Some(a) = action {
        q += &format!("&action={a}");
    }
    let a = key_request(&[e], method.as_bytes(), q.as_bytes(), &writer(action), now);
    assert!(a.body.len() <= weir::policy::keyops::MAX_ANSWER);
    assert_eq!(
        a.audit.is_some(),
        a.status == 200 && method == "POST",
        "{a:?}"
    );
    (a.status, serde_json::from_str(&a.body).unwrap())
}

fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

const GCRA: &str = "algorithm = \"gcra\"\nrate = \"1r/m\"";

/// Rejects `hit` (after one pass), checks that its rendered key inspects as rejected, that
/// `other`'s does not, and that a reset lets `hit` pass again.
fn round_trip<'a>(
    e: &Engine,
    hit: &OwnedRequest,
    other: impl Into<Option<&'a OwnedRequest>>,
    want_key: &str,
) {
    let first = e.evaluate(hit, T0).unwrap();
    assert_eq!(first.action, Action::Pass, "{want_key}");
    let mut tries = 0;
    while e.evaluate(hit, T0).unwrap().action != Action::Reject {
        tries += 1;
        assert!(tries < 10, "{want_key}: never rejected");
    }
    let mut key = String::new();
    e.render_key(0, hit, &mut key);
    assert_eq!(key, want_key);
    let (st, j) = op(e, "GET", &key, None, T0);
    assert_eq!(st, 200, "{j}");
    assert_eq!(j["key"], want_key);
    assert_eq!(j["remaining"], 0, "{want_key}: {j}");
    assert!(j["retry_after_s"].as_u64().unwrap() > 0, "{want_key}: {j}");
    assert_eq!(
        (j["action"].as_str(), j["changed"].as_bool()),
        (Some("inspect"), Some(false))
    );
    if let Some(other) = other.into() {
        let mut okey = String::new();
        e.render_key(0, other, &mut okey);
        let (_, j) = op(e, "GET", &okey, None, T0);
        assert_eq!(j["retry_after_s"], 0, "{okey}: {j}");
        assert!(j["remaining"].as_u64().unwrap() > 0, "{okey}: {j}");
    }
    let (st, j) = op(e, "POST", &key, Some("reset"), T0);
    assert_eq!(
        (st, j["changed"].as_bool(), j["retry_after_s"].as_u64()),
        (200, Some(true), Some(0)),
        "{j}"
    );
    assert_eq!(
        e.evaluate(hit, T0).unwrap().action,
        Action::Pass,
        "{want_key} after reset"
    );
    let (_, j) = op(e, "POST", &key, Some("reset"), T0 + S);
    assert_eq!(j["changed"], true, "the pass after the reset was recorded");
}

#[test]
fn every_key_kind_round_trips_through_its_text() {
    let get = |a: &str| OwnedRequest::new("GET", "/a/../p", ip(a));
    // ip with prefixes, both families; the local client.
    let e = engine(GCRA, "key = \"ip\"\nipv4_prefix = 24\nipv6_prefix = 48");
    round_trip(
        &e,
        &get("203.0.113.9"),
        &get("203.0.114.9"),
        "203.0.113.0/24",
    );
    round_trip(
        &e,
        &get("2001:db8:1:2::9"),
        &get("2001:db8:2::9"),
        "2001:db8:1::/48",
    );
    round_trip(
        &e,
        &OwnedRequest::local("GET", "/"),
        &get("192.0.2.1"),
        "local",
    );
    // A full address inside the network names the same key.
    e.evaluate(&get("198.51.100.1"), T0).unwrap();
    let (_, j) = op(&e, "GET", "198.51.100.77", None, T0);
    assert_eq!(
        (j["key"].as_str(), j["remaining"].as_u64()),
        (Some("198.51.100.0/24"), Some(0))
    );
    // header, cookie, path, method, global.
    let e = engine(GCRA, "key = \"header:x-api-key\"");
    let h = |v: &str| get("192.0.2.1").header("X-Api-Key", v);
    round_trip(&e, &h("k\"1 \u{1}é"), &h("k2"), "k%221%20%01%C3%A9");
    // A literal value that reads like a marker is escaped: it names its own key.
    round_trip(&e, &h("(absent)"), &get("192.0.2.1"), "%28absent%29");
    round_trip(&e, &get("192.0.2.1"), &h("k2"), "header:x-api-key=(absent)");
    let e = engine(GCRA, "key = \"cookie:sid\"");
    let c = |v: &str| get("192.0.2.1").header("Cookie", &format!("a=b; sid={v}"));
    round_trip(&e, &c("abc"), &c("abd"), "abc");
    let e = engine(GCRA, "key = \"path\"");
    round_trip(
        &e,
        &get("192.0.2.1"),
        &OwnedRequest::new("GET", "/q", ip("192.0.2.1")),
        "/p",
    );
    let e = engine(GCRA, "key = \"global\"");
    round_trip(&e, &get("192.0.2.1"), None, "global");
    // var: plain and masked; several parts.
    let e = engine(GCRA, "key = \"var:tenant\"");
    round_trip(
        &e,
        &get("192.0.2.1").var(0, "acme"),
        &get("192.0.2.1").var(0, "zz"),
        "acme",
    );
    let e = engine(GCRA, "key = \"var:peer\"\nipv4_prefix = 16");
    round_trip(
        &e,
        &get("192.0.2.1").var(0, "10.1.2.3"),
        &get("192.0.2.1").var(0, "10.2.2.3"),
        "10.1.0.0/16",
    );
    let e = engine(
        GCRA,
        "key = [\"ip\", \"method\", \"path\", \"header:x-k\", \"var:t\"]",
    );
    let m = |v: &str| get("192.0.2.1").header("x-k", v).var(0, "t 1");
    round_trip(
        &e,
        &m("a b path=/x"),
        &m("a"),
        "ip=192.0.2.1 method=GET path=/p header:x-k=a%20b%20path=/x var:t=t%201",
    );
}

#[test]
fn other_algorithms_round_trip() {
    let get = |a: &str| OwnedRequest::new("GET", "/", ip(a));
    for zone in [
        "algorithm = \"sliding\"\nevents = 1\nwindow = \"1m\"",
        "algorithm = \"sliding_log\"\nevents = 1\nwindow = \"1m\"",
        "algorithm = \"sliding\"\nevents = 1\nwindow = \"1m\"\nscope = \"cluster\"\nredis = \"redis://127.0.0.1:1/0\"\nexpected_nodes = 1",
    ] {
        let e = engine(zone, "key = [\"ip\", \"header:x\"]");
        let r = |a: &str| get(a).header("x", "1");
        round_trip(&e, &r("192.0.2.1"), &r("192.0.2.2"), "ip=192.0.2.1 header:x=1");
        let (_, j) = op(&e, "GET", "ip=192.0.2.1 header:x=1", None, T0);
        assert!(j["algorithm"].as_str().unwrap().starts_with("sliding"), "{j}");
    }
}

#[test]
fn concurrency_reset_frees_the_count() {
    let e = engine("algorithm = \"concurrency\"\nmax = 1", "");
    let r = OwnedRequest::new("GET", "/", ip("192.0.2.1"));
    let held = e.evaluate(&r, T0).unwrap();
    assert_eq!(held.action, Action::Pass);
    assert_eq!(e.evaluate(&r, T0).unwrap().action, Action::Reject);
    let (_, j) = op(&e, "GET", "192.0.2.1", None, T0);
    assert_eq!(
        (
            j["algorithm"].as_str(),
            j["in_flight"].as_u64(),
            j["remaining"].as_u64()
        ),
        (Some("concurrency"), Some(1), Some(0)),
        "{j}"
    );
    let (_, j) = op(&e, "POST", "192.0.2.1", Some("reset"), T0);
    assert_eq!(
        (
            j["in_flight"].as_u64(),
            j["remaining"].as_u64(),
            j["changed"].as_bool()
        ),
        (Some(0), Some(1), Some(true)),
        "{j}"
    );
    let again = e.evaluate(&r, T0).unwrap();
    assert_eq!(again.action, Action::Pass);
    // The request admitted before the reset ends: its release lowers the count of the one
    // admitted after (documented: a reset lets up to `max` more in while those run), never
    // below zero.
    e.release(held.permits, T0);
    let (_, j) = op(&e, "GET", "192.0.2.1", None, T0);
    assert_eq!(j["in_flight"], 0, "{j}");
    e.release(again.permits, T0);
    let (_, j) = op(&e, "GET", "192.0.2.1", None, T0);
    assert_eq!(j["in_flight"], 0, "{j}");
}

#[test]
fn unban_lifts_the_ban_and_unlists_it() {
    let e = engine(
        "algorithm = \"gcra\"\nrate = \"1r/s\"",
        "ban = { after = 2, within = \"1m\", duration = \"10m\" }",
    );
    let r = OwnedRequest::new("GET", "/", ip("192.0.2.1"));
    while e.evaluate(&r, T0).unwrap().ban_started.is_none() {}
    let status = |now| -> Value {
        serde_json::from_str(&Snapshot::take(&[&e], &[], now).render(Format::Json)).unwrap()
    };
    assert_eq!(
        status(T0 + 5 * S)["limits"][0]["bans"][0]["key"],
        "192.0.2.1"
    );
    let (_, j) = op(&e, "GET", "192.0.2.1", None, T0 + 5 * S);
    assert_eq!(
        (
            j["banned"].as_bool(),
            j["ban_left_s"].as_u64(),
            j["retry_after_s"].as_u64()
        ),
        (Some(true), Some(595), Some(595)),
        "{j}"
    );
    // A reset leaves the ban in force.
    let (_, j) = op(&e, "POST", "192.0.2.1", Some("reset"), T0 + 5 * S);
    assert_eq!(j["banned"], true);
    let a = key_request(
        &[&e],
        b"POST",
        b"limit=l&key=192.0.2.1&action=unban",
        &writer(Some("unban")),
        T0 + 5 * S,
    );
    let j: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(
        (
            a.status,
            j["banned"].as_bool(),
            j["changed"].as_bool(),
            j["action"].as_str()
        ),
        (200, Some(false), Some(true), Some("unban")),
        "{j}"
    );
    let audit = a.audit.unwrap();
    assert_eq!(
        audit.line,
        "lifting ban of key \"192.0.2.1\" of weir limit \"l\""
    );
    assert_eq!(audit.level, LogLevel::Warn);
    assert_eq!(
        status(T0 + 5 * S)["limits"][0]
            .get("bans")
            .map(|b| b.as_array().unwrap().len()),
        Some(0)
    );
    assert_eq!(e.evaluate(&r, T0 + 5 * S).unwrap().action, Action::Pass);
    let (_, j) = op(&e, "POST", "192.0.2.1", Some("unban"), T0 + 5 * S);
    assert_eq!(j["changed"], false, "nothing left to lift");
}

#[test]
fn refusals_name_why() {
    let e = engine(GCRA, "key = [\"ip\", \"path\"]\nipv4_prefix = 24");
    let ask = |m: &str, q: &str| {
        let a = key_request(&[&e], m.as_bytes(), q.as_bytes(), &writer(None), T0);
        let j: Value = serde_json::from_str(&a.body).unwrap();
        (a.status, j["error"].as_str().unwrap_or("").to_owned())
    };
    let cases = [
        (
            "GET",
            "limit=nope&key=x",
            404,
            "no weir limit named \"nope\"",
        ),
        (
            "GET",
            "limit=l&key=path%3D%2F",
            400,
            "expected part \"ip=\"",
        ),
        (
            "GET",
            "limit=l&key=ip%3D1.2.3.4",
            400,
            "expected part \"path=\"",
        ),
        (
            "GET",
            "limit=l&key=ip%3D1.2.3.0%2F16+path%3D%2F",
            400,
            "by /24, not /16",
        ),
        (
            "GET",
            "limit=l&key=ip%3Dx+path%3D%2F",
            400,
            "not an IP address",
        ),
        (
            "GET",
            "limit=l&key=ip%3D1.2.3.4+path%3D%2Fa%E2%80%A6",
            400,
            "printable ASCII",
        ),
        (
            "GET",
            "limit=l&key=ip%3D1.2.3.4+path%3D%2Fa%28cut%29",
            400,
            "cut",
        ),
        (
            "GET",
            "limit=l&key=ip%3D1.2.3.4+path%3D%2Fa%5Cx22",
            400,
            "%5C",
        ),
        (
            "GET",
            "limit=l&key=ip%3D1.2.3.4+path%3D%2F+%23abc",
            400,
            "16 hex digits",
        ),
        ("GET", "limit=l&key=ip%3Dh%3Aab+path%3D%2F", 400, "hashed"),
        ("GET", "limit=l", 400, "key argument is missing"),
        ("GET", "key=a", 400, "limit argument is missing"),
        (
            "GET",
            "limit=l&key=ip%3D1.2.3.4+path%3D%2F&action=reset",
            405,
            "need POST",
        ),
        (
            "POST",
            "limit=l&key=ip%3D1.2.3.4+path%3D%2F",
            400,
            "action=reset or action=unban",
        ),
        (
            "POST",
            "limit=l&key=ip%3D1.2.3.4+path%3D%2F&action=zap",
            400,
            "unknown action",
        ),
        ("DELETE", "limit=l&key=x", 405, "GET, HEAD"),
    ];
    for (m, q, status, why) in cases {
        let (st, err) = ask(m, q);
        assert_eq!(st, status, "{m} {q}: {err}");
        assert!(err.contains(why), "{m} {q}: {err}");
    }
    assert_eq!(ask("HEAD", "limit=l&key=ip%3D1.2.3.4+path%3D%2F").0, 200);
    // With several engines, the first holding the limit answers.
    let other = engine(GCRA, "key = \"global\"");
    let a = key_request(
        &[&e, &other],
        b"GET",
        b"limit=l&key=ip%3D1.2.3.4+path%3D%2F",
        &Access::default(),
        T0,
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let a = key_request(
        &[&other, &e],
        b"GET",
        b"limit=l&key=global",
        &Access::default(),
        T0,
    );
    assert_eq!(a.status, 200, "{}", a.body);
}
