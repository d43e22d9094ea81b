//! The exact sliding log's check and refund allocate nothing (a counting global allocator).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use weir::table::{LogTable, SlidingLog};

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
    let log = SlidingLog::new(10, S).unwrap();
    let table = LogTable::new(LogTable::bytes_for(&log, 1024), log, 0).unwrap();
    table.check(1, S); // warm up the counter stripe's thread-local
    let before = ALLOCS.load(Relaxed);
    for i in 0..100_000u64 {
        let now = S + i * 100_000;
        let key = (i % 5000).to_le_bytes(); // more keys than records: evictions
        let h = table.key_hash(&key);
        if table.check(h, now).admitted() && i % 7 == 0 {
            table.refund(h, now);
        }
        table.predict(h, now);
    }
    let _ = table.stats();
    let n = ALLOCS.load(Relaxed) - before;
    if n == 0 {
        println!("test log_check_path_allocates_nothing ... ok\n1 passed, 0 failed");
    } else {
        println!("test log_check_path_allocates_nothing ... FAILED ({n} allocations)\n0 passed, 1 failed");
        std::process::exit(1);
    }
}
