//! A policy's GCRA zone re-attached with another rate (an nginx reload): every key keeps its
//! excess in requests, read against the new rate, as nginx `limit_req` does.

use weir::clock::monotonic_ns;
use weir::policy::{parse_policy, Action, Engine, OwnedRequest};
use weir::table::Table;

const S: u64 = 1_000_000_000;

/// An engine over the region at `ptr` for a policy whose zone has `rate`.
fn engine(ptr: *mut u8, rate: &str) -> Engine {
    let text = format!(
        "[zones.g]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"{rate}\"\n\
         [[limit]]\nclass = \"*\"\nzone = \"g\"\nburst = 5\nnodelay = true\n"
    );
    let policy = parse_policy(&text, None).unwrap();
    let l = &Engine::layouts(&policy)[0];
    // SAFETY: `ptr` is a live, 64-byte aligned region of `l.bytes` bytes that outlives the
    // engine (the test keeps the buffer until the end).
    let (table, _) = unsafe { Table::create_or_attach(ptr, l.bytes, l.schema, 0) }.unwrap();
    Engine::with_tables(policy, vec![table]).unwrap()
}

fn actions(e: &Engine, n: usize, now: u64) -> Vec<Action> {
    let req = OwnedRequest::new("GET", "/", "192.0.2.7".parse().unwrap());
    (0..n)
        .map(|_| e.evaluate(&req, now).unwrap().action)
        .collect()
}

#[test]
fn a_reattached_zone_reads_each_excess_against_the_new_rate() {
    let layout = std::alloc::Layout::from_size_align(64 << 10, 64).unwrap();
    // SAFETY: a non-zero size; freed at the end with the same layout.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    let now = monotonic_ns();
    let six = [vec![Action::Pass; 6], vec![Action::Reject]].concat();
    assert_eq!(actions(&engine(ptr, "6r/m"), 7, now), six);
    // Lowered: 6 requests of excess at a minute each; one drains after a minute.
    let slow = engine(ptr, "1r/m");
    assert_eq!(actions(&slow, 1, now + 30 * S), [Action::Reject]);
    // Raised: the same excess drains at 100 per second.
    let fast = engine(ptr, "100r/s");
    assert_eq!(actions(&fast, 1, now + S), [Action::Pass]);
    drop((slow, fast));
    // SAFETY: allocated above with `layout`; the engines using it are gone.
    unsafe { std::alloc::dealloc(ptr, layout) };
}
