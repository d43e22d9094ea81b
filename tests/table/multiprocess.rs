//! Forked processes over one MAP_SHARED table: exact admitted counts, concurrency bounds, and
//! SIGKILLed processes that never wedge the table. A plain `main` (no test harness) so that
//! the parent is single-threaded when it forks.

#[path = "../common/mod.rs"]
mod common;

use common::fork::{fork_all, run_scenarios, sigkill_rounds, Tally, PROCS, THREADS};
use common::SharedRegion;
use std::sync::atomic::Ordering::SeqCst;
use weir::limiter::{Concurrency, Delay, Gcra, Rate, SlidingWindow};
use weir::table::Table;

const S: u64 = 1_000_000_000;

fn shared_table(bytes: usize) -> (SharedRegion, Table) {
    let r = SharedRegion::new(bytes);
    // SAFETY: the mapping outlives the table handle (both dropped at scenario end, table first
    // by declaration order of the returned tuple's use).
    let t = unsafe { Table::create(r.ptr, r.len, 1, 0) }.unwrap();
    (r, t)
}

fn one_hot_key_gcra_admits_exactly_the_burst() {
    let (_r, table) = shared_table(1 << 20);
    let g = Gcra::new(Rate::per_second(10), 999, Delay::NoDelay).unwrap();
    let tally = Tally::new();
    let key = table.key_hash(b"hot");
    fork_all(|_, _| {
        for _ in 0..2000 {
            if table.check(&g, key, 1, 100 * S).admitted() {
                tally.at(0).fetch_add(1, SeqCst);
            }
        }
    });
    assert_eq!(tally.at(0).load(SeqCst), 1000);
    let st = table.stats();
    assert_eq!(st.passed, 1000);
    assert_eq!(st.rejected, (PROCS * THREADS * 2000 - 1000) as u64);
}

fn many_keys_each_admit_exactly_their_bound() {
    let (_r, table) = shared_table(1 << 20);
    let g = Gcra::new(Rate::per_second(1), 4, Delay::NoDelay).unwrap();
    let sw = SlidingWindow::new(7, 60 * S).unwrap();
    let (gt, st) = (Tally::new(), Tally::new());
    let (_r2, table2) = shared_table(1 << 20);
    fork_all(|p, t| {
        for round in 0..10 {
            for k in 0..1000u64 {
                // Each thread walks the keys from a different start.
                let k = (k + (p * THREADS + t) as u64 * 131 + round) % 1000;
                let bytes = k.to_le_bytes();
                if table
                    .check(&g, table.key_hash(&bytes), 1, 100 * S)
                    .admitted()
                {
                    gt.at(0).fetch_add(1, SeqCst);
                }
                if table2
                    .check(&sw, table2.key_hash(&bytes), 1, 100 * S)
                    .admitted()
                {
                    st.at(0).fetch_add(1, SeqCst);
                }
            }
        }
    });
    assert_eq!(gt.at(0).load(SeqCst), 1000 * 5);
    assert_eq!(st.at(0).load(SeqCst), 1000 * 7);
    assert_eq!(table.stats().occupancy, 1000);
}

fn concurrency_never_exceeds_max() {
    let (_r, table) = shared_table(1 << 16);
    let c = Concurrency::new(3, 60 * S).unwrap();
    let tally = Tally::new(); // 0: in flight now, 1: highest seen, 2: acquisitions
    let key = table.key_hash(b"slots");
    fork_all(|_, _| {
        for i in 0..20_000u64 {
            let now = 10 * S + i;
            if let (_, Some(permit)) = table.acquire(&c, key, now) {
                let n = tally.at(0).fetch_add(1, SeqCst) + 1;
                tally.at(1).fetch_max(n, SeqCst);
                tally.at(2).fetch_add(1, SeqCst);
                std::hint::spin_loop();
                tally.at(0).fetch_sub(1, SeqCst);
                table.release(&c, permit, now);
            }
        }
    });
    assert!(
        tally.at(1).load(SeqCst) <= 3,
        "in flight reached {}",
        tally.at(1).load(SeqCst)
    );
    assert!(tally.at(2).load(SeqCst) > 0);
    assert_eq!(c.in_flight(table.peek(key).unwrap(), 10 * S), 0);
}

/// Children update keys in a loop and are SIGKILLed at random moments, many times. The table
/// must stay fully usable: every key still updates, nothing is stuck.
fn sigkilled_writers_never_wedge_the_table() {
    let (_r, table) = shared_table(Table::bytes_for(512));
    let g = Gcra::new(Rate::per_second(1000), 5, Delay::NoDelay).unwrap();
    sigkill_rounds(40, |round, p| {
        let mut i = p as u64;
        loop {
            i = i.wrapping_add(7919);
            let key = (i % 2000).to_le_bytes();
            table.check(&g, table.key_hash(&key), 1, (round * 1000 + i % 997) * S);
        }
    });
    // Far in the future every state has expired: every key must pass and be stored again.
    let later = 1_000_000 * S;
    for k in 0..2000u64 {
        let h = table.key_hash(&k.to_le_bytes());
        assert!(table.check(&g, h, 1, later).admitted(), "key {k} stuck");
    }
    // And the table still limits: a hot key admits exactly 1 + burst.
    let h = table.key_hash(b"after");
    let admitted = (0..20)
        .filter(|_| table.check(&g, h, 1, later).admitted())
        .count();
    assert_eq!(admitted, 6);
}

fn sigkilled_permit_holder_is_recovered_by_lease_expiry() {
    let (_r, table) = shared_table(1 << 16);
    let lease = 30 * S;
    let c = Concurrency::new(2, lease).unwrap();
    let key = table.key_hash(b"rails");
    let t0 = 100 * lease + 5 * S;
    // SAFETY: single-threaded parent.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let _a = table.acquire(&c, key, t0).1.unwrap();
        let _b = table.acquire(&c, key, t0).1.unwrap();
        loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
    }
    // Wait until the child holds both permits, then kill it while it holds them.
    while c.in_flight(table.peek(key).unwrap_or(0), t0) < 2 {
        std::thread::yield_now();
    }
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    assert!(
        table.acquire(&c, key, t0 + S).1.is_none(),
        "dead holder's permits still count"
    );
    // Permits from bucket b live until bucket b + 1 ends.
    let expiry = (t0 / lease + 2) * lease;
    assert!(table.acquire(&c, key, expiry - 1).1.is_none());
    let p = table
        .acquire(&c, key, expiry)
        .1
        .expect("permits recovered after the lease");
    table.release(&c, p, expiry);
    assert_eq!(c.in_flight(table.peek(key).unwrap(), expiry), 0);
}

/// The parent counts before and while its children run; each child counts on its main thread
/// (which inherits the parent's thread-locals, owned stripe included) and on five more threads:
/// 25 threads in all write the counters, more than the 15 stripes that can have an owner. Not
/// one count is lost.
fn verdict_counts_stay_exact_across_fork_and_beyond_the_stripes() {
    const N: u64 = 100_000;
    let (_r, table) = shared_table(1 << 16);
    let g = Gcra::new(Rate::per_second(1), 0, Delay::NoDelay).unwrap();
    let key = table.key_hash(b"counted");
    let count = || {
        for _ in 0..N {
            table.check(&g, key, 1, 100 * S);
        }
    };
    count();
    let mut pids = vec![];
    for _ in 0..PROCS {
        // SAFETY: single-threaded parent.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            std::thread::scope(|s| {
                for _ in 0..5 {
                    s.spawn(count);
                }
                count();
            });
            // SAFETY: never return into the parent's code.
            unsafe { libc::_exit(0) };
        }
        pids.push(pid);
    }
    count();
    for pid in pids {
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    let st = table.stats();
    assert_eq!(st.passed, 1);
    assert_eq!(
        st.passed + st.delayed + st.rejected,
        (2 + PROCS as u64 * 6) * N
    );
}

fn main() {
    let scenarios: [(&str, fn()); 6] = [
        (
            "one_hot_key_gcra_admits_exactly_the_burst",
            one_hot_key_gcra_admits_exactly_the_burst,
        ),
        (
            "many_keys_each_admit_exactly_their_bound",
            many_keys_each_admit_exactly_their_bound,
        ),
        (
            "concurrency_never_exceeds_max",
            concurrency_never_exceeds_max,
        ),
        (
            "sigkilled_writers_never_wedge_the_table",
            sigkilled_writers_never_wedge_the_table,
        ),
        (
            "sigkilled_permit_holder_is_recovered_by_lease_expiry",
            sigkilled_permit_holder_is_recovered_by_lease_expiry,
        ),
        (
            "verdict_counts_stay_exact_across_fork_and_beyond_the_stripes",
            verdict_counts_stay_exact_across_fork_and_beyond_the_stripes,
        ),
    ];
    run_scenarios(&scenarios)
}
