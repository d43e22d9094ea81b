//! Instruction counts for the core table: GCRA checks in a plain loop, for
//! `valgrind --tool=callgrind` (exact and independent of machine load). Per check =
//! (count at N2 − count at N1) / (N2 − N1), as in `benches/policy_instr.rs`:
//!
//! ```sh
//! BIN=$(cargo bench --bench table_instr --no-run 2>&1 | sed -n 's/.*(\(target[^)]*\)).*/\1/p')
//! for case in hot 1m; do
//!   a=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null $BIN $case 1000000 2>&1 | sed -n 's/.*refs: *//p' | tr -d ,)
//!   b=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null $BIN $case 2000000 2>&1 | sed -n 's/.*refs: *//p' | tr -d ,)
//!   echo "$case $(( (b - a) / 1000000 ))"
//! done
//! ```
//!
//! `hot`: one key; `1m`: 1M distinct keys, shuffled, primed before counting (both runs prime
//! the same way, so the priming cancels out). The key is hashed on every check, as in
//! `benches/table.rs`. Without arguments (as `cargo bench` runs it) it does nothing.

use std::hint::black_box;

use weir::limiter::{Delay, Gcra, Rate};
use weir::table::Table;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(case), Some(n)) = (
        args.first(),
        args.get(1).and_then(|n| n.parse::<u64>().ok()),
    ) else {
        return;
    };
    let count: u64 = match case.as_str() {
        "hot" => 1,
        "1m" => 1 << 20,
        other => panic!("unknown case {other:?} (hot, 1m)"),
    };
    // Keys: `i` times an odd constant (a bijection on u64, so all distinct), scrambled.
    let keys: Vec<u64> = (0..count)
        .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed)
        .collect();
    let table = Table::new(Table::bytes_for((count as usize * 2).max(64)), 1, 0).expect("table");
    // As benches/table.rs: 8 ns per check, each key arriving at 1.25× its rate.
    let interval = count * 8 * 5 / 4;
    let gcra = Gcra::new(
        Rate {
            count: 1,
            period_ns: interval,
        },
        0,
        Delay::NoDelay,
    )
    .expect("gcra");
    let mut now = 1_000_000_000_000u64;
    let mut run = |checks: u64| {
        let mut i = 0usize;
        for _ in 0..checks {
            let k = black_box(keys[i]);
            let v = table.check(&gcra, table.key_hash(&k.to_le_bytes()), 1, now);
            black_box(v.decision);
            i += 1;
            if i == keys.len() {
                i = 0;
            }
            now += 8;
        }
    };
    run(count);
    run(n);
}
