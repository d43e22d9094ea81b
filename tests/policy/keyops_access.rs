//! The key operations' access gate (`weir::policy::keyops::access`): where changes are not
//! enabled a POST reset or unban is refused with 403 and how to enable them, and changes
//! nothing; where they are, a request a browser may have been made to send (another site's
//! `Origin` or `Sec-Fetch-Site`, a form's content type, no `Weir-Key-Action` header) is
//! refused the same way. Inspecting stays open either way.

use serde_json::Value;
use weir::policy::keyops::{key_request, Access, KeyAnswer};
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};

const S: u64 = 1_000_000_000;
const T0: u64 = 1000 * S;

fn engine() -> Engine {
    let src = "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
               [[limit]]\nname = \"l\"\nclass = \"*\"\nzone = \"z\"\n\
               ban = { after = 1, within = \"1m\", duration = \"10m\" }\n";
    Engine::new(parse_policy(src, None).unwrap()).unwrap()
}

fn ask(e: &Engine, method: &str, action: Option<&str>, a: &Access<'_>) -> (KeyAnswer, Value) {
    let mut q = "limit=l&key=192.0.2.1".to_owned();
    if let Some(action) = action {
        q += &format!("&action={action}");
    }
    let ans = key_request(&[e], method.as_bytes(), q.as_bytes(), a, T0);
    let v = serde_json::from_str(&ans.body).unwrap();
    (ans, v)
}

/// The key's state: (remaining, banned).
fn state(e: &Engine) -> (u64, bool) {
    let (a, v) = ask(e, "GET", None, &Access::default());
    assert_eq!(a.status, 200, "{v}");
    (
        v["remaining"].as_u64().unwrap(),
        v["banned"].as_bool().unwrap(),
    )
}

#[test]
fn changes_are_refused_unless_enabled_and_sent_on_purpose() {
    let e = engine();
    let r = OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap());
    assert_eq!(e.evaluate(&r, T0).unwrap().action, Action::Pass);
    assert_eq!(e.evaluate(&r, T0).unwrap().action, Action::Reject);
    assert_eq!(state(&e), (0, true), "rejected and banned");

    // Read-only (every host's default): refused with how to enable changes, whatever else the
    // request carries.
    let read_only = Access {
        key_action: Some(b"reset"),
        ..Access::default()
    };
    for action in ["reset", "unban"] {
        let (a, v) = ask(&e, "POST", Some(action), &read_only);
        let why = v["error"].as_str().unwrap();
        assert_eq!(a.status, 403, "{v}");
        assert!(
            why.contains("weir_status write=on") && why.contains("status_write"),
            "{why}"
        );
        assert!(a.audit.is_none());
    }
    assert_eq!(state(&e), (0, true), "nothing changed");

    // Enabled, but sent by a browser from another site: a cross-site form POST, each of its
    // marks alone, and a POST without the header.
    let form = Access {
        write: true,
        origin: Some(b"http://evil.example"),
        host: Some(b"status.internal:8080"),
        sec_fetch_site: Some(b"cross-site"),
        content_type: Some(b"application/x-www-form-urlencoded"),
        key_action: None,
    };
    let header = Some(&b"unban"[..]);
    let cases = [
        (form, "cross-site"),
        (
            Access {
                sec_fetch_site: None,
                key_action: header,
                ..form
            },
            "another origin",
        ),
        (
            Access {
                sec_fetch_site: None,
                origin: None,
                key_action: header,
                ..form
            },
            "content type",
        ),
        (
            Access {
                write: true,
                ..Access::default()
            },
            "Weir-Key-Action: unban",
        ),
    ];
    for (access, why) in cases {
        let (a, v) = ask(&e, "POST", Some("unban"), &access);
        assert_eq!(a.status, 403, "{access:?}: {v}");
        assert!(v["error"].as_str().unwrap().contains(why), "{why}: {v}");
        assert!(a.audit.is_none());
    }
    assert_eq!(state(&e), (0, true), "nothing changed");

    // Enabled and sent on purpose: a same-origin page, or a client with no browser headers.
    let page = Access {
        write: true,
        origin: Some(b"http://status.internal:8080"),
        host: Some(b"status.internal:8080"),
        sec_fetch_site: Some(b"same-origin"),
        content_type: Some(b"application/json"),
        key_action: Some(b"unban"),
    };
    let (a, v) = ask(&e, "POST", Some("unban"), &page);
    assert_eq!((a.status, v["banned"].as_bool()), (200, Some(false)), "{v}");
    assert!(a.audit.is_some());
    let cli = Access {
        write: true,
        key_action: Some(b"reset"),
        ..Access::default()
    };
    let (a, v) = ask(&e, "POST", Some("reset"), &cli);
    assert_eq!((a.status, v["remaining"].as_u64()), (200, Some(1)), "{v}");
    assert_eq!(e.evaluate(&r, T0).unwrap().action, Action::Pass);

    // Inspection is not gated; the method rules come first.
    assert_eq!(ask(&e, "HEAD", None, &Access::default()).0.status, 200);
    assert_eq!(
        ask(&e, "GET", Some("reset"), &Access::default()).0.status,
        405
    );
    assert_eq!(ask(&e, "DELETE", None, &Access::default()).0.status, 405);
}

/// The gate's rules one by one, on a reset where changes are enabled: `None` when the change
/// went on, else the refusal's message.
fn gate(
    origin: Option<&str>,
    host: Option<&str>,
    site: Option<&str>,
    content_type: Option<&str>,
    key_action: Option<&str>,
) -> Option<String> {
    let e = engine();
    let a = Access {
        write: true,
        origin: origin.map(str::as_bytes),
        host: host.map(str::as_bytes),
        sec_fetch_site: site.map(str::as_bytes),
        content_type: content_type.map(str::as_bytes),
        key_action: key_action.map(str::as_bytes),
    };
    let (ans, v) = ask(&e, "POST", Some("reset"), &a);
    match ans.status {
        200 => None,
        403 => Some(v["error"].as_str().unwrap().to_owned()),
        s => panic!("status {s}: {v}"),
    }
}

#[test]
fn only_same_origin_requests_with_the_header_change() {
    let ok = Some("reset");
    // curl, weir key: no browser headers.
    assert_eq!(gate(None, Some("h:8080"), None, None, ok), None);
    assert_eq!(gate(None, None, None, Some("application/json"), ok), None);
    // A same-origin page (the scheme's default port may be left out), any case and spacing.
    let same = gate(
        Some("http://h:8080"),
        Some("h:8080"),
        Some("same-origin"),
        None,
        ok,
    );
    assert_eq!(same, None);
    assert_eq!(
        gate(Some("http://H"), Some("h:80"), Some("none"), None, ok),
        None
    );
    assert_eq!(
        gate(
            Some("https://h:443"),
            Some("h"),
            None,
            None,
            Some(" RESET ")
        ),
        None
    );
    // Cross-site, by either header.
    let evil = gate(
        Some("http://evil.example"),
        Some("h"),
        Some("cross-site"),
        None,
        ok,
    );
    assert!(evil.unwrap().contains("cross-site"));
    assert!(gate(None, Some("h"), Some("same-site"), None, ok).is_some());
    for o in [
        "http://evil.example",
        "null",
        "http://h.evil",
        "ftp://h",
        "http://h/x",
        "http://u@h",
        "http://",
    ] {
        let why = gate(Some(o), Some("h"), None, None, ok);
        assert!(why.is_some_and(|w| w.contains("another origin")), "{o}");
    }
    assert!(
        gate(Some("http://h"), None, None, None, ok).is_some(),
        "no Host"
    );
    assert!(gate(Some("http://h:8080"), Some("h:8081"), None, None, ok).is_some());
    // Form content types, whatever their parameters and case.
    for ct in [
        "application/x-www-form-urlencoded",
        "Multipart/Form-Data; boundary=x",
        "text/plain;charset=utf-8",
    ] {
        let why = gate(None, Some("h"), None, Some(ct), ok);
        assert!(why.is_some_and(|w| w.contains("form")), "{ct}");
    }
    // The header: present, and naming the query's action.
    let why = gate(None, Some("h"), None, None, None).unwrap();
    assert!(why.contains("Weir-Key-Action: reset"), "{why}");
    let why = gate(None, Some("h"), None, None, Some("unban")).unwrap();
    assert!(why.contains("says unban"), "{why}");
    // Hostile values are cut and escaped in the message.
    let long = format!("\u{1b}[2J{}", "x".repeat(500));
    let why = gate(None, Some("h"), Some(&long), None, ok).unwrap();
    assert!(why.len() < 400 && !why.contains('\u{1b}'), "{why}");
}
