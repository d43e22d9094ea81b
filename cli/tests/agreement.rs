//! `weir replay` on a log that records the host's decisions (`$weir_action`, `$weir_limit`):
//! logged vs replayed decisions compared, per limit, in the JSON and the text report.

use std::process::Command;

use serde_json::{json, Value};

const POLICY: &str = r#"
[zones.ip]
size = "1m"
algorithm = "gcra"
rate = "1r/m"
[[limit]]
name = "per-ip"
class = "*"
zone = "ip"
"#;

const FORMAT: &str =
    r#"$remote_addr [$time_iso8601] "$request" $status $weir_action $weir_limit $weir_key"#;

// Lines 1 and 2 agree with the replay; line 3 logged a rejection the replay passes, line 4 a
// pass the replay rejects.
const LOG: &str = r#"192.0.2.1 [2026-12-02T12:00:00+00:00] "GET / HTTP/1.1" 200 pass - -
192.0.2.1 [2026-12-02T12:00:01+00:00] "GET / HTTP/1.1" 429 reject per-ip 192.0.2.1
192.0.2.2 [2026-12-02T12:00:02+00:00] "GET / HTTP/1.1" 429 reject per-ip 192.0.2.2
192.0.2.1 [2026-12-02T12:00:03+00:00] "GET / HTTP/1.1" 200 pass - -
"#;

fn replay(dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["replay", "--no-progress", "--policy"])
        .arg(dir.join("p.toml"))
        .args(["--format", FORMAT])
        .args(extra)
        .arg(dir.join("access.log"))
        .output()
        .expect("run weir");
    assert!(
        out.status.success(),
        "weir failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn logged_and_replayed_decisions_compared_per_limit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), POLICY).unwrap();
    std::fs::write(dir.path().join("access.log"), LOG).unwrap();
    let v: Value = serde_json::from_slice(&replay(dir.path(), &["--json"]).stdout).unwrap();
    assert_eq!(
        v["agreement"],
        json!({
            "compared": 4,
            "matched": 2,
            "limits": [
                { "limit": "-", "logged": 2, "replayed": 2, "matched": 1 },
                { "limit": "per-ip", "logged": 2, "replayed": 2, "matched": 1 },
            ]
        }),
        "{v:#}"
    );
    let text = String::from_utf8(replay(dir.path(), &[]).stdout).unwrap();
    assert!(
        text.contains("logged vs replayed decisions: 2 of 4 requests agree"),
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("per-ip ") && l.split_whitespace().count() == 5);
    assert_eq!(
        row.map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["per-ip", "2", "2", "1", "2"]),
        "{text}"
    );
}

#[test]
fn no_agreement_without_the_fields() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("p.toml"), POLICY).unwrap();
    let plain: String = LOG
        .lines()
        .map(|l| {
            format!(
                "{} - - [02/Dec/2026:12:00:00 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n",
                &l[..9]
            )
        })
        .collect();
    std::fs::write(dir.path().join("access.log"), plain).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["replay", "--no-progress", "--json", "--policy"])
        .arg(dir.path().join("p.toml"))
        .arg(dir.path().join("access.log"))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("agreement").is_none(), "{v:#}");
}
