//! `weir replay` on a policy of the most limits, alone in its process (other tests' memory
//! would count in the peak RSS of the `weir` process they fork, read from `wait4`).

mod common;

use common::{replay, MIB};

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
