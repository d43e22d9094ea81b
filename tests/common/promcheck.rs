//! The strict Prometheus text check of the tests (weir's and the tower layer's): Go's expfmt
//! parser, what promtool and Telegraf use, built as `target/caddy/promcheck` (`make promcheck`)
//! and named by `WEIR_PROMCHECK` (`make unit` sets it).

use std::io::Write;
use std::process::{Command, Stdio};

/// Panics unless promcheck accepts `text`; without `WEIR_PROMCHECK` says so and passes.
pub fn promcheck(text: &str) {
    let Some(bin) = std::env::var_os("WEIR_PROMCHECK") else {
        eprintln!("WEIR_PROMCHECK is not set: metrics not checked by promcheck");
        return;
    };
    let mut child = Command::new(bin)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "not valid Prometheus text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
}
