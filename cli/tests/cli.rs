//! The `weir` binary, run for real.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn weir(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(args)
        .arg("--no-progress")
        .output()
        .expect("run weir")
}

fn weir_check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("check")
        .args(args)
        .output()
        .expect("run weir")
}

fn data(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
        .display()
        .to_string()
}

fn repo(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "weir failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn golden_combined_log() {
    let out = weir(&[
        "replay",
        "--policy",
        &data("golden.toml"),
        "--json",
        &data("golden.log"),
    ]);
    let got = json(&out);
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(data("golden.expected.json")).unwrap())
            .unwrap();
    assert_eq!(got, want, "{}", serde_json::to_string_pretty(&got).unwrap());
    // The malformed line is shown with its line number, and the replay went on.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("golden.log:5: malformed"), "{err}");
}

#[test]
fn stdin_and_no_spread() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "replay",
            "--policy",
            &data("golden.toml"),
            "--json",
            "--no-spread",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(data("golden.log")).unwrap())
        .unwrap();
    let v = json(&child.wait_with_output().unwrap());
    // Without spreading, lines 1–3 are simultaneous: per-ip (capacity 2) still rejects the third;
    // line 8 at 1.0 s: TAT 2, 3 − 1 = 2 ≤ 2 → pass. Same totals as the golden run.
    assert_eq!(v["requests"], 7);
    assert_eq!(v["limits"][0]["passed"], 4);
    assert_eq!(v["limits"][0]["rejected"], 1);
}

#[test]
fn caddy_json_gzip_with_verdicts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("caddy.log.gz");
    let t = 1_796_212_800.0f64; // 2026-12-02T12:00:00Z
    let line = |dt: f64, ip: &str, uri: &str, cookie: Option<&str>| {
        let headers = match cookie {
            Some(c) => format!(r#"{{"User-Agent":["Mozilla/5.0"],"Cookie":["{c}"]}}"#),
            None => r#"{"User-Agent":["Mozilla/5.0"]}"#.to_string(),
        };
        format!(
            r#"{{"level":"info","ts":{},"logger":"http.log.access.log0","msg":"handled request","request":{{"remote_ip":"{ip}","remote_port":"41000","client_ip":"{ip}","proto":"HTTP/2.0","method":"GET","host":"wiki.example","uri":"{uri}","headers":{headers}}},"bytes_read":0,"duration":0.004,"size":512,"status":200}}"#,
            t + dt
        )
    };
    let text = [
        line(0.0, "192.0.2.1", "/w/Special:A", None),
        line(0.1, "192.0.2.1", "/w/Special:B", None),
        line(0.2, "192.0.2.1", "/index.php?title=Special:C", None),
        line(0.3, "192.0.2.2", "/healthz", None),
        "not json".to_string(),
        line(0.4, "192.0.2.1", "/wiki/Main", Some("session=1")),
    ]
    .join("\n");
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(&log).unwrap(),
        flate2::Compression::fast(),
    );
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap();
    let verdicts = dir.path().join("v.jsonl");
    let out = weir(&[
        "replay",
        "-p",
        &data("golden.toml"),
        "--format",
        "caddy-json",
        "--json",
        "--verdicts",
        verdicts.to_str().unwrap(),
        log.to_str().unwrap(),
    ]);
    let v = json(&out);
    // 0.0 pass (per-ip TAT 1, dry TAT 60); 0.1: 2 − 0.1 ≤ 2 pass, dry reject; 0.2: 3 − 0.2 > 2
    // reject; 0.3 exempt; 0.4 unmatched (no limit on /wiki/).
    assert_eq!(v["lines"], 6);
    assert_eq!(v["malformed"], 1);
    assert_eq!(v["requests"], 5);
    assert_eq!(v["passed"], 2);
    assert_eq!(v["rejected"], 1);
    assert_eq!(v["exempt"], 1);
    assert_eq!(v["unmatched"], 1);
    assert_eq!(v["limits"][1]["dry_run_rejected"], 1);
    let lines: Vec<Value> = std::fs::read_to_string(&verdicts)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[2]["line"], 3);
    assert_eq!(lines[2]["verdict"], "reject");
    assert_eq!(lines[2]["limit"], "per-ip");
    assert_eq!(lines[2]["key"], "192.0.2.1");
    assert_eq!(lines[2]["time"], "2026-12-02T12:00:00.200Z");
    assert_eq!(lines[1]["dry_run"], "tools-dry");
    assert_eq!(lines[3]["verdict"], "exempt");
}

#[test]
fn check_reports_errors_and_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"10r/w\"\n",
    )
    .unwrap();
    let out = weir_check(&[bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:4:"), "{err}");
    assert!(err.contains(": error: "), "{err}");

    let warn = dir.path().join("warn.toml");
    std::fs::write(
        &warn,
        "[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"10r/s\"\n\
         [[limit]]\nclass = \"*\"\nzone = \"z\"\nkey = \"global\"\nburst = 100\n",
    )
    .unwrap();
    let out = weir_check(&[warn.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warn.toml:8:7: warning: limit \"*/z\" counts everyone in one global bucket"),
        "{err}"
    );
    let out = weir_check(&["-D", warn.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));

    let out = weir_check(&[repo("examples/incident/policy.toml").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The committed incident log is exactly what the generator writes.
#[test]
fn committed_incident_log_matches_generator() {
    let mut generated = Vec::new();
    weir_cli::incident::generate(&mut generated).unwrap();
    let mut committed = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::MultiGzDecoder::new(
            std::fs::File::open(repo("examples/incident/access.log.gz")).unwrap(),
        ),
        &mut committed,
    )
    .unwrap();
    assert!(
        generated == committed,
        "regenerate with: cargo run -p weir-cli --example gen_incident"
    );
}

/// The incident: the crawler is limited; health checks, static assets and logged-in editors pass
/// untouched; readers' pages pass.
#[test]
fn incident_crawler_limited_everyone_else_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let verdicts = dir.path().join("v.jsonl");
    let timeline = dir.path().join("t.html");
    let format = std::fs::read_to_string(repo("examples/incident/log_format")).unwrap();
    let out = weir(&[
        "replay",
        "-p",
        repo("examples/incident/policy.toml").to_str().unwrap(),
        "--format",
        format.trim(),
        "--json",
        "--verdicts",
        verdicts.to_str().unwrap(),
        "--timeline",
        timeline.to_str().unwrap(),
        repo("examples/incident/access.log.gz").to_str().unwrap(),
    ]);
    let v = json(&out);
    assert_eq!(v["malformed"], 0);
    assert_eq!(
        v["late"], 0,
        "every out-of-order line is within the 10 s window"
    );
    assert!(v["reordered"].as_u64().unwrap() > 0);
    let tools = &v["limits"][1];
    assert_eq!(tools["name"], "tools-site-wide");
    // 60r/m burst 30 nodelay, one bucket: the first 31 tool requests pass at once, then one per
    // second from minute 2 (first crawler request) to the end of minute 10: 31 + 479 = 510.
    assert_eq!(tools["passed"], 510);
    assert_eq!(
        v["limits"][0]["rejected"], 0,
        "no address is busy enough for per-ip"
    );

    // group → verdict → count
    let mut groups: HashMap<&str, HashMap<String, u64>> = HashMap::new();
    for l in std::fs::read_to_string(&verdicts).unwrap().lines() {
        let r: Value = serde_json::from_str(l).unwrap();
        let client = r["client"].as_str().unwrap();
        let target = r["target"].as_str().unwrap();
        let group = if client == "10.0.0.2" {
            "health"
        } else if client.starts_with("36.") {
            "crawler"
        } else if client.starts_with("203.0.113.") {
            "editors"
        } else if target.starts_with("/app.css") || target.starts_with("/load.js") {
            "static"
        } else {
            "reader pages"
        };
        *groups
            .entry(group)
            .or_default()
            .entry(r["verdict"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    let only = |g: &str, verdict: &str| {
        let m = &groups[g];
        assert_eq!(m.keys().collect::<Vec<_>>(), vec![verdict], "{g}: {m:?}");
        m[verdict]
    };
    assert_eq!(only("health", "exempt"), 600);
    assert!(only("static", "exempt") > 1000);
    assert!(only("editors", "exempt") > 300);
    assert!(only("reader pages", "pass") > 1000);
    let crawler = &groups["crawler"];
    let (rej, pass) = (crawler["reject"], crawler["pass"]);
    assert_eq!(pass, 510);
    assert!(rej > 20 * pass, "crawler: {crawler:?}");
    assert_eq!(v["limits"][1]["distinct_rejected_clients"], 3000);

    // The status page's charts over the report's data; nothing loaded from elsewhere.
    let html = std::fs::read_to_string(&timeline).unwrap();
    let data = html.split("id=\"data\">").nth(1).unwrap();
    let data: serde_json::Value =
        serde_json::from_str(&data[..data.find("</script>").unwrap()]).unwrap();
    assert_eq!(data["report"]["limits"][1]["name"], "tools-site-wide");
    assert_eq!(
        data["timeline"]["buckets"][1]
            .as_array()
            .map(|b| b.is_empty()),
        Some(false)
    );
    assert!(html.contains("http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'"));
    assert!(!html.contains("<link") && !html.contains("<script src") && !html.contains("<img"));
}

#[test]
fn replay_charges_charge_on_status_limits_with_the_logged_status() {
    let dir = std::env::temp_dir().join(format!("weir-charge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let policy = dir.join("p.toml");
    std::fs::write(
        &policy,
        "[zones.f]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 2\nwindow = \"1h\"\n\
         [[limit]]\nname = \"failures\"\nclass = \"*\"\nzone = \"f\"\ncharge_on_status = [401]\n",
    )
    .unwrap();
    // Three 200s never count; two 401s fill the limit; the next two are refused.
    let line = |status: u16| {
        format!("192.0.2.1 - - [02/Dec/2026:12:00:00 +0000] \"POST /login HTTP/1.1\" {status} 10 \"-\" \"-\"\n")
    };
    let log: String = [200, 200, 401, 200, 401, 200, 401]
        .into_iter()
        .map(line)
        .collect();
    let log_path = dir.join("access.log");
    std::fs::write(&log_path, log).unwrap();
    let got = json(&weir(&[
        "replay",
        "--policy",
        policy.to_str().unwrap(),
        "--json",
        log_path.to_str().unwrap(),
    ]));
    let l = &got["limits"][0];
    assert_eq!(
        (&l["passed"], &l["rejected"]),
        (&5.into(), &2.into()),
        "{l}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
