//! Memory per key: RSS growth while 1M distinct keys are checked, governor's keyed limiter vs a
//! weir table sized for them. `cargo run --release --example governor_memory`.
//!
//! RSS is read from /proc/self/statm (Linux). Numbers include allocator overhead, which is the
//! point: that is what a process pays.

use governor::{Quota, RateLimiter};
use std::num::NonZeroU32;
use weir::limiter::{Delay, Gcra, Rate};
use weir::table::Table;

const KEYS: u64 = 1_000_000;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm rss field");
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

fn key(i: u64) -> u64 {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn main() {
    let before = rss_bytes();
    let limiter = RateLimiter::keyed(Quota::per_second(NonZeroU32::new(10).unwrap()));
    for i in 0..KEYS {
        let _ = std::hint::black_box(limiter.check_key(&key(i)));
    }
    let after = rss_bytes();
    println!(
        "governor keyed (DashMap<u64, _>): {} keys, RSS +{:.1} MiB, {:.1} B/key",
        limiter.len(),
        (after - before) as f64 / (1 << 20) as f64,
        (after - before) as f64 / KEYS as f64
    );
    drop(limiter);

    let before = rss_bytes();
    let table = Table::new(Table::bytes_for(2 * KEYS as usize), 1, 0).expect("table");
    let g = Gcra::new(Rate::per_second(10), 0, Delay::NoDelay).expect("gcra");
    for i in 0..KEYS {
        let h = table.key_hash(&key(i).to_le_bytes());
        std::hint::black_box(table.check(&g, h, 1, 1_000_000_000));
    }
    let after = rss_bytes();
    let stats = table.stats();
    println!(
        "weir table ({} slots = 2x keys): {} keys stored, RSS +{:.1} MiB, {:.1} B/key ({:.1} B/stored key at 50 % load; 16 B/slot)",
        table.capacity(),
        stats.occupancy,
        (after - before) as f64 / (1 << 20) as f64,
        (after - before) as f64 / KEYS as f64,
        (after - before) as f64 / stats.occupancy as f64,
    );
}
