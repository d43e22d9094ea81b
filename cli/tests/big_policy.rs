//! `weir replay` on a policy of the most limits, alone in its process (other tests' memory
//! would count in the peak RSS of the `weir` process they fork, read from `wait4`).

use std::io::Read;
use std::process::{Command, Stdio};

use serde_json::Value;

const MIB: u64 = 1 << 20;

/// Runs `weir replay --json ARGS…`: the report, stderr, and the process's peak RSS in bytes.
fn replay(args: &[&str]) -> (Value, String, u64) {
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

/// A policy of the most limits costs memory for what its limits count, not for its whole
/// counter block (reserved, its pages faulted in only when used): replaying a few passing
/// requests stays far below the block's size.
#[test]
fn the_most_limits_cost_memory_in_proportion_to_use() {
    let most = weir::policy::config::MAX_LIMITS;
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.toml");
    let mut src =
        String::from("[zones.z]\nsize = \"1m\"\nalgorithm = \"gcra\"\nrate = \"10r/s\"\n");
    for i in 0..most {
        src += &format!("[[limit]]\nname = \"l{i}\"\nclass = \"*\"\nzone = \"z\"\nburst = 100\n");
    }
    std::fs::write(&policy, src).unwrap();
    let log = dir.path().join("access.log");
    let line = |i: u32| {
        format!("192.0.2.{i} - - [02/Dec/2026:12:00:00 +0000] \"GET /p HTTP/1.1\" 200 10 \"-\" \"ua\"\n")
    };
    std::fs::write(&log, (1..=20).map(line).collect::<String>()).unwrap();
    let (v, err, rss) = replay(&["--policy", policy.to_str().unwrap(), log.to_str().unwrap()]);
    assert_eq!(v["lines"].as_u64(), Some(20), "{err}");
    let block = weir::policy::counters::Counters::bytes_for(most) as u64;
    assert!(block > 256 * MIB, "the block is {} MiB", block / MIB);
    assert!(
        rss < block / 2,
        "peak RSS {} MiB for a counter block of {} MiB",
        rss / MIB,
        block / MIB
    );
}
