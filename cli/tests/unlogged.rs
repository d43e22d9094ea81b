//! `weir replay` names every header and cookie the policy reads that the log format does not
//! record (stderr and `--json`), and says nothing when the format records them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Every place a policy reads a header or cookie: the forwarding header, a class's header test
/// and `present = false` test, an exemption's cookie test, header and cookie key parts.
const POLICY: &str = r#"
trusted_proxies = ["10.0.0.0/8"]
client_ip_header = "x-real-ip"

[zones.z]
size = "64k"
algorithm = "gcra"
rate = "10r/s"

[classes.keyed]
match = [{ header.x-api-key = { present = true } }]

[classes.anonymous]
match = [{ header.x-api-key = { present = false } }]

[exempt.logged-in]
match = [{ cookie.sess = { present = true } }]

[[limit]]
name = "per-key"
class = "keyed"
zone = "z"
key = "header:X-Api-Key"

[[limit]]
name = "per-session"
class = "anonymous"
zone = "z"
key = ["ip", "cookie:sess"]
"#;

const COMBINED_LINE: &str =
    "192.0.2.1 - - [02/Dec/2026:12:00:00 +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"curl\"\n";

/// A fresh directory holding `policy.toml` and `access.log`.
fn setup(test: &str, policy: &str, log: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-unlogged-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("policy.toml"), policy).unwrap();
    std::fs::write(dir.join("access.log"), log).unwrap();
    dir
}

/// `weir replay --json` of `log` with `format`: (stderr lines, the report).
fn run(policy: &Path, log: &Path, format: &str) -> (Vec<String>, Value) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "replay",
            "--no-progress",
            "--json",
            "--format",
            format,
            "--policy",
        ])
        .arg(policy)
        .arg(log)
        .output()
        .expect("run weir");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "weir failed: {stderr}");
    let report = serde_json::from_slice(&out.stdout).expect("JSON report");
    (stderr.lines().map(str::to_string).collect(), report)
}

/// [`run`] in a [`setup`] directory: (stderr lines, the report's `warnings`).
fn replay(dir: &Path, format: &str) -> (Vec<String>, Vec<String>) {
    let (stderr, report) = run(&dir.join("policy.toml"), &dir.join("access.log"), format);
    let warnings = report["warnings"]
        .as_array()
        .expect("warnings array")
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    (stderr, warnings)
}

/// The stderr form of `warnings`: `POLICY: warning: …`.
fn on_stderr(dir: &Path, warnings: &[&str]) -> Vec<String> {
    let p = dir.join("policy.toml");
    warnings
        .iter()
        .map(|w| format!("{}: warning: {w}", p.display()))
        .collect()
}

#[test]
fn combined_names_every_unlogged_header_and_cookie() {
    let dir = setup("combined", POLICY, COMBINED_LINE);
    let (stderr, json) = replay(&dir, "combined");
    let want = [
        "trusted_proxies reads the client address from header \"x-real-ip\", which the combined \
         log format does not record: requests through trusted proxies replay as coming from the \
         proxy",
        "class \"anonymous\" tests header \"x-api-key\", which the combined log format does not \
         record: that test (present = false) passes on every replayed request",
        "class \"keyed\" tests header \"x-api-key\", which the combined log format does not \
         record: that test never matches in this replay",
        "exemption \"logged-in\" tests cookie \"sess\", which the combined log format does not \
         record: that test never matches in this replay",
        "limit \"per-key\" keys on header \"x-api-key\", which the combined log format does not \
         record: every replayed request has the key part of a request without it",
        "limit \"per-session\" keys on cookie \"sess\", which the combined log format does not \
         record: every replayed request has the key part of a request without it",
    ];
    assert_eq!(json, want);
    assert_eq!(stderr, on_stderr(&dir, &want));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_format_that_logs_the_fields_warns_of_nothing() {
    let dir = setup("custom", POLICY, "");
    // Each field by name, then cookies through $http_cookie.
    for format in [
        "$remote_addr [$time_iso8601] \"$request\" \"$http_x_real_ip\" \"$http_x_api_key\" \
         \"$cookie_sess\"",
        "$remote_addr [$time_local] \"$request\" $status \"$http_x_real_ip\" \"$http_cookie\" \
         \"$http_x_api_key\"",
    ] {
        let (stderr, json) = replay(&dir, format);
        assert_eq!(json, Vec::<String>::new(), "{format}");
        assert_eq!(stderr, Vec::<String>::new(), "{format}");
    }
    // One field missing: only the places that read it.
    let (_, json) = replay(
        &dir,
        "$remote_addr [$time_iso8601] \"$request\" \"$http_x_real_ip\" \"$cookie_sess\"",
    );
    assert_eq!(json.len(), 3, "{json:?}");
    assert!(
        json.iter()
            .all(|w| w.contains("header \"x-api-key\", which the log format does not record")),
        "{json:?}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn caddy_json_logs_headers_but_redacts_cookies() {
    let dir = setup("caddy", POLICY, "");
    let (stderr, json) = replay(&dir, "caddy-json");
    let redacted = "which Caddy's access log shows as REDACTED unless the server's \
                    log_credentials option is on: with it off,";
    let want = [
        format!(
            "exemption \"logged-in\" tests cookie \"sess\", {redacted} that test never matches \
             in this replay"
        ),
        format!(
            "limit \"per-session\" keys on cookie \"sess\", {redacted} every replayed request \
             has the key part of a request without it"
        ),
    ];
    assert_eq!(json, want);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(stderr, on_stderr(&dir, &want));
    std::fs::remove_dir_all(dir).unwrap();
}

/// The crawler incident replayed from a combined log: its editors' exemption reads a cookie
/// the format lacks, so it matches nothing, and the replay says so; with the incident's own
/// format (which logs the cookie) it matches and nothing is said.
#[test]
fn incident_exemption_in_a_combined_log() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/incident");
    let run = |format: &str| {
        let (_, r) = run(
            &root.join("policy.toml"),
            &root.join("access.log.gz"),
            format,
        );
        let exemptions = r["exemptions"].as_array().unwrap();
        let logged_in = exemptions
            .iter()
            .find(|e| e["name"] == "logged-in")
            .unwrap();
        (
            logged_in["requests"].as_u64().unwrap(),
            r["warnings"].clone(),
        )
    };
    let (n, w) = run("combined");
    assert_eq!(n, 0);
    assert_eq!(
        w,
        serde_json::json!([
            "exemption \"logged-in\" tests cookie \"wiki_session\", which the \
                            combined log format does not record: that test never matches in \
                            this replay"
        ])
    );
    let format = std::fs::read_to_string(root.join("log_format")).unwrap();
    let (n, w) = run(format.trim_end());
    assert!(
        n > 0,
        "logged-in matched nothing with the incident's format"
    );
    assert_eq!(w, serde_json::json!([]));
}
