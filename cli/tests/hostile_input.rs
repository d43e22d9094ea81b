//! `weir replay` on hostile input, run for real: impossible timestamps are malformed lines,
//! and memory is bounded by the options, not by the input (peak RSS of the `weir` process,
//! from `wait4`, against a bound far below the input's size).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use flate2::write::GzEncoder;

mod common;

use common::{replay, MIB};

const POLICY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden.toml");

/// Writes `chunks` gzip-compressed (fast) into `path`.
fn gzip(path: &Path, chunks: impl Iterator<Item = Vec<u8>>) {
    let mut gz = GzEncoder::new(File::create(path).unwrap(), flate2::Compression::fast());
    for c in chunks {
        gz.write_all(&c).unwrap();
    }
    gz.finish().unwrap();
}

#[test]
fn impossible_timestamps_are_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let line = |time: &str| {
        format!("192.0.2.1 - - [{time}] \"GET /w/Special:A HTTP/1.1\" 200 10 \"-\" \"ua\"\n")
    };
    let bad = [
        "01/Jan/0000:00:00:00 +0000",
        "29/Feb/2025:12:00:00 +0000",
        "31/Jun/2026:12:00:00 +0000",
        "02/Dec/2026:12:00:00 -9959",
        "02/Dec/2026:12:00:00 +0075",
        "02/Dec/2026:12:00:00 +1500",
        "02/Dec/2026:25:00:00 +0000",
        "31/Dec/9999:23:59:59 +0000",
    ];
    let log = dir.path().join("access.log");
    let mut text = line("02/Dec/2026:12:00:00 +0000");
    for b in bad {
        text += &line(b);
    }
    text += &line("29/Feb/2028:12:00:00 +0000");
    std::fs::write(&log, text).unwrap();
    let (v, err, _) = replay(&[
        "--policy",
        POLICY,
        "--show-malformed",
        "100",
        log.to_str().unwrap(),
    ]);
    assert_eq!(
        (v["lines"].as_u64(), v["malformed"].as_u64()),
        (Some(10), Some(8)),
        "{err}"
    );
    assert_eq!(v["requests"], 2);
    assert_eq!(v["last_time"], "2028-02-29T12:00:00.000Z");
    assert!(
        err.contains("access.log:2: malformed (bad $time_local)"),
        "{err}"
    );

    // Caddy: `ts` as a number out of range, and as impossible text.
    let caddy = |ts: &str| {
        format!(r#"{{"ts":{ts},"request":{{"remote_ip":"192.0.2.1","method":"GET","uri":"/"}}}}"#)
            + "\n"
    };
    let log = dir.path().join("caddy.log");
    let lines = [
        "1796212800.5",
        "-1e18",
        "1e18",
        "9.3e9",
        "\"0000-01-01T00:00:00Z\"",
        "\"2025-02-29T00:00:00Z\"",
        "\"99999999999999999\"",
    ];
    std::fs::write(&log, lines.map(caddy).concat()).unwrap();
    let (v, err, _) = replay(&[
        "--policy",
        POLICY,
        "--format",
        "caddy-json",
        log.to_str().unwrap(),
    ]);
    assert_eq!(
        (v["requests"].as_u64(), v["malformed"].as_u64()),
        (Some(1), Some(6)),
        "{err}"
    );
    assert_eq!(v["last_time"], "2026-12-02T12:00:00.500Z");
}

#[test]
fn a_line_without_end_is_not_held_whole() {
    // 256 MiB of zeros without a newline (gzip: 256 KiB); the default --max-line-bytes is 4m.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("zeros.gz");
    gzip(&log, (0..256).map(|_| vec![0u8; MIB as usize]));
    let (v, err, rss) = replay(&["--policy", POLICY, log.to_str().unwrap()]);
    assert_eq!(
        (v["lines"].as_u64(), v["malformed"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(
        err.contains("malformed (268435456 bytes, over --max-line-bytes 4194304)"),
        "{err}"
    );
    assert!(rss < 48 * MIB, "peak RSS {} MiB", rss / MIB);
}

#[test]
fn reorder_buffer_is_bounded_in_bytes() {
    // 200 lines of 1 MiB each (a long user agent), all in one second: the reorder window
    // alone would hold all 200 MiB.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("long.gz");
    let ua = "a".repeat(MIB as usize);
    gzip(
        &log,
        (0..200).map(|i| {
            format!(
                "192.0.2.{} - - [02/Dec/2026:12:00:00 +0000] \"GET /w/Special:A HTTP/1.1\" 200 \
                 10 \"-\" \"{ua}\"\n",
                i % 250
            )
            .into_bytes()
        }),
    );
    let (v, err, rss) = replay(&[
        "--policy",
        POLICY,
        "--max-buffered-bytes",
        "16m",
        log.to_str().unwrap(),
    ]);
    assert_eq!(
        (v["requests"].as_u64(), v["malformed"].as_u64()),
        (Some(200), Some(0)),
        "{err}"
    );
    assert!(rss < 64 * MIB, "peak RSS {} MiB", rss / MIB);
    // Over --max-line-bytes, the same lines are malformed and never buffered.
    let (v, _, rss) = replay(&[
        "--policy",
        POLICY,
        "--max-line-bytes",
        "64k",
        log.to_str().unwrap(),
    ]);
    assert_eq!(
        (v["lines"].as_u64(), v["malformed"].as_u64()),
        (Some(200), Some(200))
    );
    assert!(rss < 32 * MIB, "peak RSS {} MiB", rss / MIB);
}
