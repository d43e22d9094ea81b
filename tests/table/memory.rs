//! A table costs memory for the keys it holds, not for its size: creating one writes only its
//! header, and its empty slots are zero pages nobody touched.

use weir::limiter::{Delay, Gcra, Rate};
use weir::policy::{parse_policy, Engine, OwnedRequest};
use weir::table::{LogTable, SlidingLog, Table};

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

const GIB: usize = 1 << 30;
/// Far below any of the sizes created here.
const BUDGET: u64 = 64 << 20;

#[test]
fn large_tables_cost_nothing_until_used() {
    let before = rss();
    let t = Table::new(GIB, 1, 0).unwrap();
    let log = LogTable::new(GIB, SlidingLog::new(100, 1_000_000_000).unwrap(), 0).unwrap();
    let policy = parse_policy(
        "[zones.z]\nsize = \"1g\"\nalgorithm = \"gcra\"\nrate = \"10r/s\"\n\
         [zones.l]\nsize = \"1g\"\nalgorithm = \"log\"\nevents = 10\nwindow = \"1m\"\n\
         [[limit]]\nclass = \"*\"\nzone = \"z\"\n[[limit]]\nclass = \"*\"\nzone = \"l\"\n",
        None,
    )
    .unwrap();
    let engine = Engine::new(policy).unwrap();
    let created = rss();
    assert!(
        created < before + BUDGET,
        "4 GiB of tables made RSS grow by {} MiB",
        (created - before) >> 20
    );

    // They work. (A key's page is backed when the key lands there: a 2 MiB huge page where
    // transparent huge pages are on, so the keys here stay few.)
    let g = Gcra::new(Rate::per_second(10), 5, Delay::NoDelay).unwrap();
    let now = 1_000_000_000_000;
    for k in 0u64..4 {
        assert!(t.check(&g, t.key_hash(&k.to_le_bytes()), 1, now).admitted());
        assert!(log.check(log.key_hash(&k.to_le_bytes()), now).admitted());
        let ip = std::net::Ipv4Addr::from(k as u32 + 1);
        let out = engine
            .evaluate(&OwnedRequest::new("GET", "/", ip.into()), now)
            .unwrap();
        assert_eq!(out.action, weir::policy::Action::Pass);
    }
    assert_eq!(t.stats().occupancy, 4);
    let used = rss();
    assert!(used < before + 2 * BUDGET, "{} MiB", (used - before) >> 20);
}
