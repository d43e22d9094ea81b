//! `weir top`: the snapshot derived from JSON statuses (rates from the per-second history,
//! unknown passes, lenient parsing, versions), the TUI drawn into ratatui's TestBackend, and the
//! binary against a small HTTP server answering canned statuses and errors.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::thread;

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::{json, Value};
use weir_cli::top::fetch::status_url;
use weir_cli::top::snapshot::derive;
use weir_cli::top::status::parse;
use weir_cli::top::ui::{draw, App};

/// A limit's per-second history: 900 seconds, `rejected` per second over the last 60 (2/s),
/// 900 more rejections spread evenly before them (1 per second), and passes known (4/s) in
/// every other second of the last minute only.
fn crawler_limit(name: &str) -> Value {
    let mut rejected = vec![1u64; 840];
    rejected.extend(std::iter::repeat_n(2u64, 60));
    let mut passed: Vec<Value> = vec![Value::Null; 840];
    passed.extend((0..60).map(|i| if i % 2 == 0 { json!(4) } else { Value::Null }));
    let top = json!({
        "keys": [{"key": "* /w/Special:WhatLinksHere", "rejected": 90},
                 {"key": "36.110.0.1", "rejected": 3}],
        "clients": [{"client": "36.110.0.1", "rejected": 3}, {"client": "36.110.0.2", "rejected": 2}],
    });
    let window = |secs: u64, rej: u64| {
        let mut w = top.clone();
        w["seconds"] = json!(secs);
        w["passed"] = json!(120);
        w["delayed"] = json!(0);
        w["rejected"] = json!(rej);
        w["something_new"] = json!({"ignored": true});
        w
    };
    json!({
        "name": name, "passed": 500, "delayed": 0, "rejected": 960, "queued": 0,
        "dry_run_delayed": 0, "dry_run_rejected": 0,
        "last_1m": window(60, 120), "last_15m": window(900, 960),
        "per_second": {"end": 5120, "passed": passed, "delayed": vec![0; 900], "rejected": rejected},
    })
}

fn status(limits: Vec<Value>) -> String {
    json!({"version": 2, "engine": null, "limits": limits, "zones": [], "clusters": [],
           "new_top_level_key": [1, 2]})
    .to_string()
}

fn quiet_limit(name: &str) -> Value {
    json!({"name": name, "passed": 3, "delayed": 0, "rejected": 0,
           "per_second": {"end": 9, "passed": vec![Value::Null; 900], "delayed": vec![0; 900],
                          "rejected": vec![0; 900]}})
}

#[test]
fn rates_come_from_the_per_second_history() {
    let s = parse(&status(vec![crawler_limit("tools-global")])).unwrap();
    let snap = derive(&s, "u", None).unwrap();
    let l = &snap.limits[0];
    assert_eq!(l.name, "tools-global");
    assert_eq!(l.last_1m.rejected_per_s, 2.0);
    assert_eq!(l.last_15m.rejected_per_s, (840.0 + 120.0) / 900.0);
    // Passes over the 30 seconds where they are known, not over 60.
    assert_eq!(l.last_1m.passed_per_s, Some(4.0));
    assert_eq!(
        (l.last_1m.passed_known_s, l.last_15m.passed_known_s),
        (30, 30)
    );
    assert_eq!(l.last_15m.passed_per_s, Some(4.0));
    assert_eq!(l.last_1m.delayed_per_s, 0.0);
    assert_eq!(l.last_1m.keys[0].key, "* /w/Special:WhatLinksHere");
    assert_eq!(l.last_15m.clients[1].client, "36.110.0.2");
    assert_eq!((l.total.passed, l.total.rejected), (500, 960));
}

#[test]
fn unknown_passes_are_null_and_missing_views_are_zero() {
    let mut bare = json!({"name": "bare", "passed": 7});
    bare["unknown"] = json!("x");
    let s = parse(&status(vec![quiet_limit("quiet"), bare])).unwrap();
    let snap = derive(&s, "u", None).unwrap();
    let v = serde_json::to_value(&snap).unwrap();
    assert_eq!(v["weir_top"], 1);
    assert_eq!(v["limits"][0]["last_1m"]["passed_per_s"], Value::Null);
    assert_eq!(v["limits"][0]["last_1m"]["passed_known_s"], 0);
    assert_eq!(v["limits"][0]["last_1m"]["rejected_per_s"], 0.0);
    assert_eq!(v["limits"][0]["bans"], Value::Null);
    assert_eq!(v["limits"][1]["name"], "bare");
    assert_eq!(v["limits"][1]["total"]["passed"], 7);
    assert_eq!(v["limits"][1]["last_15m"]["passed_per_s"], Value::Null);
    assert_eq!(v["limits"][1]["last_15m"]["keys"], json!([]));
}

#[test]
fn short_histories_are_rates_over_the_whole_window() {
    let l = json!({"name": "young", "per_second": {"end": 3, "passed": [1, null, 3],
                   "delayed": [0, 0, 6], "rejected": [30, 0, 0]}});
    let snap = derive(&parse(&status(vec![l])).unwrap(), "u", None).unwrap();
    let w = &snap.limits[0].last_1m;
    assert_eq!(
        (w.passed_per_s, w.delayed_per_s, w.rejected_per_s),
        (Some(2.0), 0.1, 0.5)
    );
}

#[test]
fn bans_are_kept_when_the_status_has_them() {
    let mut l = crawler_limit("tools-global");
    l["bans"] = json!([{"key": "36.110.0.1", "remaining": 42, "extra": 1},
                       {"key": "36.110.0.2", "until": 9000}]);
    let snap = derive(&parse(&status(vec![l])).unwrap(), "u", None).unwrap();
    let v = serde_json::to_value(&snap).unwrap();
    assert_eq!(
        v["limits"][0]["bans"],
        json!([{"key": "36.110.0.1", "remaining": 42.0}, {"key": "36.110.0.2", "until": 9000.0}])
    );
    let text = weir_cli::top::snapshot::text(&snap, 10);
    assert!(
        text.contains("bans: 2") && text.contains("42s  36.110.0.1"),
        "{text}"
    );
}

#[test]
fn a_concurrency_limits_saturation_is_shown() {
    let mut l = crawler_limit("app");
    l["capacity"] = json!({"limit": 19, "auto": true, "in_flight": 17, "queued": 3,
        "noload_latency_ms": 50.1, "latency_ms": 55.3,
        "shed": {"critical": 0, "normal": 12, "sheddable": 340},
        "queue_wait": {"count": 1}});
    let snap = derive(
        &parse(&status(vec![l, quiet_limit("per-ip")])).unwrap(),
        "u",
        None,
    )
    .unwrap();
    let v = serde_json::to_value(&snap).unwrap();
    assert_eq!(v["limits"][0]["capacity"]["limit"], json!(19));
    assert_eq!(
        v["limits"][1].get("capacity"),
        None,
        "rate limits have none"
    );
    let text = weir_cli::top::snapshot::text(&snap, 10);
    let line = "capacity: limit 19 (learned)  in flight 17  queued 3  latency 55.3 ms (no-load 50.1 ms)  shed: sheddable 340 normal 12 critical 0";
    assert!(text.contains(line), "{text}");
    let mut l = crawler_limit("app");
    l["capacity"] = json!({"limit": 19, "auto": true, "in_flight": 17});
    let app = App {
        status: Some(parse(&status(vec![l])).unwrap()),
        ..App::default()
    };
    let all = screen(&app, 160, 40).join("\n");
    assert!(all.contains("limit 19 (learned)  in flight 17"), "{all}");
}

#[test]
fn other_versions_and_non_statuses_are_refused() {
    let e = parse(r#"{"version": 1, "limits": []}"#).unwrap_err();
    assert!(e.contains("version 1") && e.contains("version 2"), "{e}");
    let e = parse(r#"{"version": 3}"#).unwrap_err();
    assert!(e.contains("version 3"), "{e}");
    assert!(parse("# HELP weir_requests_total x")
        .unwrap_err()
        .contains("not a JSON status"));
    assert!(parse(r#"{"limits": []}"#)
        .unwrap_err()
        .contains("no numeric"));
    assert!(parse(r#"{"version": 2, "limits": 5}"#)
        .unwrap_err()
        .contains("malformed"));
}

#[test]
fn limit_filter_names_one_limit() {
    let s = parse(&status(vec![quiet_limit("a"), crawler_limit("b")])).unwrap();
    let snap = derive(&s, "u", Some("b")).unwrap();
    assert_eq!(snap.limits.len(), 1);
    assert_eq!(snap.limits[0].name, "b");
    let e = derive(&s, "u", Some("c")).unwrap_err();
    assert!(e.contains("\"c\"") && e.contains("a, b"), "{e}");
}

#[test]
fn status_urls_ask_for_json() {
    let cases = [
        ("http://h/metrics", "http://h/metrics?format=json"),
        (
            "127.0.0.1:8080/weir_status",
            "http://127.0.0.1:8080/weir_status?format=json",
        ),
        ("http://h/s?x=1", "http://h/s?x=1&format=json"),
        ("http://h/s?", "http://h/s?format=json"),
        ("http://h/s?format=json", "http://h/s?format=json"),
        (
            "http://h:2019/weir/status#frag",
            "http://h:2019/weir/status?format=json",
        ),
    ];
    for (url, want) in cases {
        assert_eq!(status_url(url).unwrap(), want);
    }
    assert!(status_url("https://h/s")
        .unwrap_err()
        .contains("only http://"));
}

/// The screen as lines of text.
fn screen(app: &App, w: u16, h: u16) -> Vec<String> {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| draw(f, app)).unwrap();
    let buf = t.backend().buffer().clone();
    (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect())
        .collect()
}

#[test]
fn the_tui_shows_limits_sparklines_and_top_keys() {
    let s = parse(&status(vec![
        quiet_limit("per-ip"),
        crawler_limit("tools-global"),
    ]))
    .unwrap();
    let mut app = App {
        url: "http://h/s?format=json".into(),
        interval: "1s".into(),
        status: Some(s),
        ..App::default()
    };
    app.select(1);
    let lines = screen(&app, 120, 40);
    let all = lines.join("\n");
    assert!(all.contains("limit tools-global"), "{all}");
    assert!(all.contains("per-ip"), "{all}");
    assert!(
        all.contains("* /w/Special:WhatLinksHere") && all.contains("36.110.0.2"),
        "{all}"
    );
    assert!(!all.contains("bans"), "no bans panel without bans:\n{all}");
    // The rejected/s sparkline: its title, then bars under it (the last minute at 2/s is
    // twice as high as the seconds before).
    let title = lines
        .iter()
        .position(|l| l.contains("rejected/s, last"))
        .expect(&all);
    assert!(lines[title].contains("max 2"), "{all}");
    let bars: String = lines[title + 1..title + 6].concat();
    assert!(bars.contains('█'), "no sparkline bars:\n{all}");
    assert!(all.contains("passed/s, last"), "{all}");
    // 2/s over the last minute in the limits table, red on the selected row.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("tools-global") && l.contains("2.0/s")),
        "{all}"
    );

    let mut l = crawler_limit("tools-global");
    l["bans"] = json!([{"key": "36.110.0.9", "remaining": 30}]);
    app.status = Some(parse(&status(vec![l])).unwrap());
    app.select(0);
    let all = screen(&app, 120, 40).join("\n");
    assert!(
        all.contains("bans (1)") && all.contains("36.110.0.9"),
        "{all}"
    );
}

#[test]
fn the_tui_draws_in_any_terminal_size() {
    let mut l = crawler_limit("tools-global");
    l["bans"] = json!([{"key": "36.110.0.9"}]);
    let app = App {
        status: Some(parse(&status(vec![l, quiet_limit("per-ip")])).unwrap()),
        ..App::default()
    };
    for (w, h) in [(1, 1), (10, 3), (40, 12), (80, 24), (300, 100)] {
        let all = screen(&app, w, h).join("");
        assert_eq!(all.chars().count(), usize::from(w) * usize::from(h));
    }
}

#[test]
fn the_tui_draws_before_the_first_status_and_on_errors() {
    let app = App {
        error: Some("http://h/s: cannot fetch: connection refused".into()),
        ..App::default()
    };
    let all = screen(&app, 100, 20).join("\n");
    assert!(
        all.contains("cannot fetch") && all.contains("waiting for the status"),
        "{all}"
    );
}

/// Serves `responses` (raw HTTP) one per connection on 127.0.0.1; its address.
fn serve(responses: Vec<String>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for r in responses {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(r.as_bytes());
        }
    });
    addr
}

fn http(code: &str, ctype: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {code}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn weir_top(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("top")
        .args(args)
        .output()
        .unwrap();
    let s = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap_or(-1),
        s(out.stdout),
        s(out.stderr),
    )
}

#[test]
fn once_prints_a_snapshot() {
    let body = status(vec![quiet_limit("per-ip"), crawler_limit("tools-global")]);
    let addr = serve(vec![http("200 OK", "application/json", &body); 2]);
    let (code, out, err) = weir_top(&["--once", "--json", "--top", "1", &format!("{addr}/st")]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["url"], format!("http://{addr}/st?format=json"));
    let l = &v["limits"][1];
    assert_eq!(
        (&l["name"], &l["last_1m"]["rejected_per_s"]),
        (&json!("tools-global"), &json!(2.0))
    );
    assert_eq!(
        l["last_1m"]["keys"],
        json!([{"key": "* /w/Special:WhatLinksHere", "rejected": 90}])
    );
    let (code, out, err) = weir_top(&["--once", "--limit", "tools-global", &format!("{addr}/st")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("limit tools-global: total 500 passed, 0 delayed, 960 rejected\n"),
        "{out}"
    );
    assert!(
        out.contains("rejected    2.0/s") && out.contains("90  * /w/Special:WhatLinksHere"),
        "{out}"
    );
    assert!(!out.contains("per-ip"), "{out}");
}

#[test]
fn errors_are_one_line_and_exit_2() {
    let free = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let addr = serve(vec![
        http("404 Not Found", "text/plain", "no"),
        http("200 OK", "text/plain", "# HELP weir_requests_total x\n"),
        http(
            "200 OK",
            "application/json",
            r#"{"version": 1, "limits": []}"#,
        ),
    ]);
    let cases = [
        (free.as_str(), "cannot fetch"),
        (addr.as_str(), "HTTP 404"),
        (addr.as_str(), "not a JSON status"),
        (addr.as_str(), "JSON status version 1"),
        ("https://127.0.0.1/x", "only http://"),
    ];
    for (url, want) in cases {
        let (code, out, err) = weir_top(&["--once", "--json", url]);
        assert_eq!(code, 2, "{url}: {out} {err}");
        assert!(out.is_empty() && err.lines().count() == 1, "{url}: {err}");
        assert!(
            err.starts_with("weir top: ") && err.contains(want),
            "{url}: {err}"
        );
    }
    let (code, _, err) = weir_top(&["--json", &addr]);
    assert_eq!(code, 2);
    assert!(err.contains("--json needs --once"), "{err}");
    // The screen needs a terminal; here standard output is a pipe.
    let (code, _, err) = weir_top(&["127.0.0.1:1"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a terminal: use --once"), "{err}");
}
