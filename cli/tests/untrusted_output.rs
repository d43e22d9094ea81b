//! What `weir top`, `weir key` and `weir replay` print from a hostile status server or a crafted
//! log line: never a raw control character (C0 such as ESC and BEL, DEL, C1 such as U+009B
//! CSI), which once set a tmux pane's title and cleared the screen; and `weir top`'s memory is
//! bounded whatever the server sends (peak RSS of the `weir` process, from `/proc`).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::thread;

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::{json, Value};
use weir_cli::top::status::{parse, MAX_BODY_BYTES};
use weir_cli::top::ui::{draw, App};

/// Texts a hostile server answers with: an OSC title, a screen clear, BEL, DEL, a C1 CSI.
const TITLE: &str = "\u{1b}]2;owned\u{7}";
const CLEAR: &str = "\u{1b}[2J\u{1b}[H";
const C1: &str = "\u{9b}31m\u{7f}\u{85}";

fn hostile(s: &str) -> String {
    format!("{s}{TITLE}{CLEAR}{C1}\r")
}

/// The first raw control character of `out` other than a newline, if any.
fn control(out: &[u8]) -> Option<char> {
    String::from_utf8_lossy(out)
        .chars()
        .find(|&c| c.is_control() && c != '\n')
}

/// Serves each of `responses` (raw HTTP) to one connection on 127.0.0.1; its address.
fn serve(responses: Vec<Vec<u8>>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for r in responses {
            let (mut c, _) = l.accept().unwrap();
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = c.write_all(&r);
        }
    });
    addr
}

fn http(code: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// Runs `weir ARGS…`: exit code, stdout, stderr, and its peak RSS in bytes (`VmHWM` of its
/// `/proc` entry, read until it exits: the figure of the program itself, not of this test's
/// memory around the spawn).
fn weir(args: &[&str]) -> (i32, Vec<u8>, Vec<u8>, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run weir");
    let drain = |mut r: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut b = Vec::new();
            r.read_to_end(&mut b).unwrap();
            b
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    let code = loop {
        // Absent once the process has exited (a zombie has no memory left).
        if let Ok(s) = std::fs::read_to_string(&status) {
            if let Some(l) = s.lines().find(|l| l.starts_with("VmHWM:")) {
                let kib = l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
                peak_kib = peak_kib.max(kib);
            }
        }
        if let Some(st) = child.try_wait().unwrap() {
            break st.code().unwrap_or(-1);
        }
        thread::sleep(std::time::Duration::from_millis(2));
    };
    (
        code,
        out.join().unwrap(),
        err.join().unwrap(),
        peak_kib * 1024,
    )
}

/// A status whose texts all carry escapes.
fn hostile_status() -> String {
    let top = json!({
        "keys": [{"key": hostile("key"), "rejected": 9}],
        "clients": [{"client": hostile("192.0.2.1"), "rejected": 9}],
    });
    json!({"version": 2, "limits": [{
        "name": hostile("limit"), "passed": 1, "rejected": 9,
        "last_1m": top, "last_15m": top,
        "bans": [{"key": hostile("banned"), "client": hostile("c"), "remaining": 5}],
    }]})
    .to_string()
}

#[test]
fn top_prints_no_control_characters_from_the_status() {
    let body = hostile_status();
    let addr = serve(vec![http("200 OK", body.as_bytes()); 2]);
    let (code, out, err, _) = weir(&["top", "--once", &addr]);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    let text = String::from_utf8(out.clone()).unwrap();
    assert_eq!(control(&out), None, "{text:?}");
    assert!(
        text.contains("limit limit\\x1B]2;owned\\x07\\x1B[2J") && text.contains("\\u{9B}31m"),
        "{text}"
    );
    assert!(
        text.contains("key\\x1B") && text.contains("banned\\x1B"),
        "{text}"
    );
    let (code, out, err, _) = weir(&["top", "--once", "--json", &addr]);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    assert_eq!(control(&out), None, "{}", String::from_utf8_lossy(&out));
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert!(v["limits"][0]["name"]
        .as_str()
        .unwrap()
        .starts_with("limit\\x1B]2;owned"));

    // The screen: the same texts, drawn.
    let app = App {
        status: Some(parse(&body).unwrap()),
        error: Some(hostile("an error")),
        ..App::default()
    };
    let mut t = Terminal::new(TestBackend::new(160, 40)).unwrap();
    t.draw(|f| draw(f, &app)).unwrap();
    let buf = t.backend().buffer().clone();
    let screen: String = buf.content().iter().map(|c| c.symbol()).collect();
    let raw = screen.chars().find(|c| c.is_control());
    assert_eq!(raw, None, "{screen}");
    assert!(screen.contains("limit\\x1B]2;owned"), "{screen}");
}

#[test]
fn top_errors_quote_no_control_characters() {
    // A value of the wrong type: the parser's message quotes it.
    let wrong = json!({"version": 2, "limits": [{"name": "a", "passed": hostile("x")}]});
    let addr = serve(vec![http("200 OK", wrong.to_string().as_bytes())]);
    let (code, out, err, _) = weir(&["top", "--once", &addr]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    let text = String::from_utf8_lossy(&err);
    assert!(text.contains("malformed JSON status"), "{text}");
    assert_eq!(control(&err), None, "{text:?}");
}

#[test]
fn key_prints_no_control_characters_from_the_answer() {
    let answer = json!({"limit": hostile("login"), "key": hostile("k"), "algorithm": hostile("gcra"),
                        "remaining": 1, "retry_after_s": 0, "banned": false});
    let refusal = json!({"error": hostile("no such key")});
    let addr = serve(vec![
        http("200 OK", answer.to_string().as_bytes()),
        http("200 OK", answer.to_string().as_bytes()),
        http("404 Not Found", refusal.to_string().as_bytes()),
        http("500 Oops", hostile("plain text").as_bytes()),
    ]);
    let (code, out, _, _) = weir(&["key", &addr, "login", "k"]);
    assert_eq!(code, 0);
    let text = String::from_utf8_lossy(&out);
    assert_eq!(control(&out), None, "{text:?}");
    assert!(text.contains("limit login\\x1B]2;owned"), "{text}");
    let (code, out, _, _) = weir(&["key", "--json", &addr, "login", "k"]);
    assert_eq!(code, 0);
    assert_eq!(control(&out), None, "{}", String::from_utf8_lossy(&out));
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v, answer, "--json is the same JSON, only escaped");
    for want in ["HTTP 404: no such key\\x1B", "HTTP 500: plain text\\x1B"] {
        let (code, out, err, _) = weir(&["key", &addr, "login", "k"]);
        assert_eq!(code, 1);
        assert!(out.is_empty());
        let text = String::from_utf8_lossy(&err);
        assert_eq!(control(&err), None, "{text:?}");
        assert!(text.contains(want), "{text}");
    }
}

#[test]
fn replay_shows_crafted_log_lines_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let good = "192.0.2.1 - - [02/Dec/2026:12:00:00 +0000] \"GET /w/Special:A HTTP/1.1\" 200 10 \"-\" \"ua\"\n";
    let crafted = format!("{}\n", hostile("192.0.2.1 - - [garbage"));
    std::fs::write(&log, format!("{good}{crafted}{good}")).unwrap();
    let policy = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden.toml");
    for json in [false, true] {
        let mut args = vec!["replay", "--no-progress", "--policy", policy];
        if json {
            args.push("--json");
        }
        args.push(log.to_str().unwrap());
        let (code, out, err, _) = weir(&args);
        let text = String::from_utf8_lossy(&err);
        assert_eq!(code, 0, "{text}");
        assert!(text.contains("access.log:2: malformed"), "{text}");
        assert!(text.contains("garbage\\x1B]2;owned\\x07"), "{text}");
        assert_eq!(control(&err), None, "{text:?}");
        assert_eq!(control(&out), None, "{}", String::from_utf8_lossy(&out));
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn top_memory_is_bounded_by_the_body_cap() {
    // 50 MB: over the body cap, refused after reading at most the cap.
    let mut big = br#"{"version": 2, "limits": [], "pad": ""#.to_vec();
    big.resize(50_000_000, b'x');
    big.extend_from_slice(b"\"}");
    // Under the cap, the costliest shape there is: empty limits and per-second entries, a few
    // bytes each in JSON and many more once parsed (a JSON tree took 20 times the body).
    let mut dense = br#"{"version": 2, "limits": ["#.to_vec();
    while dense.len() < (MAX_BODY_BYTES - 64 * 1024) as usize {
        dense.extend_from_slice(br#"{"per_second": {"rejected": ["#);
        dense.extend_from_slice(&b"0,".repeat(4000));
        dense.extend_from_slice(b"0]}},{},{},{},{},{},");
    }
    dense.extend_from_slice(b"{}]}");
    let addr = serve(vec![http("200 OK", &big), http("200 OK", &dense)]);
    for (what, want) in [
        ("a 50 MB status", "larger than 32 MiB"),
        ("a dense status", "too large"),
    ] {
        let (code, _, err, rss) = weir(&["top", "--once", "--json", &addr]);
        let text = String::from_utf8_lossy(&err);
        assert_eq!(code, 2, "{what}: {text}");
        assert!(text.contains(want), "{what}: {text}");
        eprintln!("{what}: peak RSS {} MiB", rss / MIB);
        assert!(
            rss > 0 && rss < 256 * MIB,
            "{what}: peak RSS {} MiB",
            rss / MIB
        );
    }
}
