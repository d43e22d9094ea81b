use super::*;
use crate::timefmt::NS;

fn parse(fmt: &str, line: &str) -> Result<Entry, Malformed> {
    let f = LogFormat::from_spec(fmt).unwrap();
    let mut e = Entry::default();
    f.parse(line.as_bytes(), &mut e).map(|_| e)
}

#[test]
fn combined() {
    let e = parse(
        "combined",
        r#"192.0.2.7 - - [02/Dec/2026:12:36:45 +0000] "GET /index.php?title=X HTTP/1.1" 200 512 "-" "Mozilla/5.0 (X11) Chrome/120""#,
    )
    .unwrap();
    assert_eq!(e.method(), b"GET");
    assert_eq!(e.target(), b"/index.php?title=X");
    assert_eq!(e.peer, "192.0.2.7".parse::<IpAddr>().unwrap());
    assert_eq!(
        e.header(b"user-agent"),
        Some(&b"Mozilla/5.0 (X11) Chrome/120"[..])
    );
    assert_eq!(e.header(b"referer"), None);
    assert!(e.whole_second);
    assert_eq!(e.ts_ns, 1_796_215_005 * NS);
}

#[test]
fn custom_format_with_cookies_and_uri_args() {
    let fmt = r#"$remote_addr [$time_iso8601] $request_method $uri "$args" $status $request_time "$cookie_wiki_session" "$cookie_lang" "$http_x_forwarded_for""#;
    let e = parse(
        fmt,
        r#"2001:db8::5 [2026-12-02T12:36:45+00:00] POST /w/api.php "action=edit&x=1" 200 0.250 "abc" "en" "198.51.100.1, 10.0.0.1""#,
    )
    .unwrap();
    assert_eq!(e.method(), b"POST");
    assert_eq!(e.target(), b"/w/api.php?action=edit&x=1");
    assert_eq!(e.cookie(b"wiki_session"), Some(&b"abc"[..]));
    assert_eq!(e.cookie(b"lang"), Some(&b"en"[..]));
    assert_eq!(
        e.header(b"x-forwarded-for"),
        Some(&b"198.51.100.1, 10.0.0.1"[..])
    );
    assert_eq!((e.duration_ns, e.status), (Some(250_000_000), Some(200)));
    let e = parse(
        fmt,
        r#"2001:db8::5 [2026-12-02T12:36:45+00:00] GET /x "-" 200 - "-" "-" "-""#,
    )
    .unwrap();
    assert_eq!(e.target(), b"/x");
    assert_eq!(e.header(b"cookie"), None);
}

#[test]
fn malformed_lines() {
    assert!(parse("combined", "garbage").is_err());
    assert!(parse(
        "combined",
        r#"192.0.2.7 - - [02/Dec/2026:12:36:45 +0000] "-" 400 0 "-" "-""#
    )
    .is_err());
    assert!(parse(
        "combined",
        r#"192.0.2.7 - - [02/Dec/2026:12:36 +0000] "GET / HTTP/1.1" 200 1 "-" "-""#
    )
    .is_err());
    assert!(LogFormat::from_spec("$remote_addr$time_local").is_err());
    assert!(LogFormat::from_spec("$remote_addr $status").is_err());
}

#[test]
fn caddy_json() {
    let e = parse(
        "caddy-json",
        r#"{"level":"info","ts":1796215005.25,"logger":"http.log.access","msg":"handled request","request":{"remote_ip":"192.0.2.9","remote_port":"5000","client_ip":"192.0.2.9","proto":"HTTP/2.0","method":"GET","host":"wiki","uri":"/app.css?v=3","headers":{"User-Agent":["curl/8"],"Cookie":["wiki_session=x"]}},"duration":0.001,"status":200}"#,
    )
    .unwrap();
    assert_eq!(e.ts_ns, 1_796_215_005 * NS + NS / 4);
    assert_eq!(e.target(), b"/app.css?v=3");
    assert_eq!(e.cookie(b"wiki_session"), Some(&b"x"[..]));
    assert_eq!(e.header(b"user-agent"), Some(&b"curl/8"[..]));
    assert_eq!(e.status, Some(200));
    assert!(!e.whole_second);
    assert!(parse("caddy-json", r#"{"ts":1,"msg":"x"}"#).is_err());
}
