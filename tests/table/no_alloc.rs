//! The check paths allocate nothing: a counting global allocator watches a burst of checks of
//! the slot table (GCRA, sliding window, concurrency) and of the exact sliding log.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use weir::limiter::{Concurrency, Delay, Gcra, Rate, SlidingWindow};
use weir::table::{LogTable, SlidingLog, Table};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static A: Counting = Counting;

fn main() {
    const S: u64 = 1_000_000_000;
    let table = Table::new(Table::bytes_for(1024), 1, 0).unwrap();
    let g = Gcra::new(Rate::per_second(5), 3, Delay::After(1)).unwrap();
    let sw = SlidingWindow::new(10, S).unwrap();
    let c = Concurrency::new(4, 60 * S).unwrap();
    // Warm up thread-locals (the counter stripe index) before counting.
    table.check(&g, 1, 1, S);
    let before = ALLOCS.load(Relaxed);
    for i in 0..100_000u64 {
        let now = S + i * 1000;
        let key = (i % 5000).to_le_bytes(); // more keys than slots: inserts and evictions
        let h = table.key_hash(&key);
        table.check(&g, h, 1, now);
        table.check(&sw, h ^ 1, 1, now);
        if let (_, Some(p)) = table.acquire(&c, h ^ 2, now) {
            table.release(&c, p, now);
        }
    }
    let _ = table.stats();
    let slots = ALLOCS.load(Relaxed) - before;

    let log = SlidingLog::new(10, S).unwrap();
    let logs = LogTable::new(LogTable::bytes_for(&log, 1024), log, 0).unwrap();
    let before = ALLOCS.load(Relaxed);
    for i in 0..100_000u64 {
        let now = S + i * 100_000;
        let key = (i % 5000).to_le_bytes(); // more keys than records: evictions
        let h = logs.key_hash(&key);
        if logs.check(h, now).admitted() && i % 7 == 0 {
            logs.refund(h, now);
        }
        logs.predict(h, now);
    }
    let _ = logs.stats();
    let log_allocs = ALLOCS.load(Relaxed) - before;

    let mut failed = 0;
    for (name, n) in [
        ("check_path_allocates_nothing", slots),
        ("log_check_path_allocates_nothing", log_allocs),
    ] {
        if n == 0 {
            println!("test {name} ... ok");
        } else {
            println!("test {name} ... FAILED ({n} allocations)");
            failed += 1;
        }
    }
    println!("{} passed, {failed} failed", 2 - failed);
    if failed > 0 {
        std::process::exit(1);
    }
}
