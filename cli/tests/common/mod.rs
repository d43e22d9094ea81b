//! What several CLI test binaries share: running `weir replay` as a child and reading its peak
//! memory.

use std::io::Read;
use std::process::{Command, Stdio};

use serde_json::Value;

pub const MIB: u64 = 1 << 20;

/// Runs `weir replay --json ARGS…`: the report, stderr, and the process's peak RSS in bytes.
pub fn replay(args: &[&str]) -> (Value, String, u64) {
    // Reaped by wait4 below, which also gives the child's own rusage.
    #[allow(clippy::zombie_processes)]
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["replay", "--json", "--no-progress"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run weir");
    let (mut out, mut err) = (Vec::new(), String::new());
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 reaps our own child (std does not wait for it
    // afterwards) and writes only into `status` and `usage`.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "weir failed ({status}): {err}"
    );
    let report = serde_json::from_slice(&out).expect("JSON report");
    // ru_maxrss is in KiB on Linux.
    (report, err, usage.ru_maxrss as u64 * 1024)
}
