//! Forked processes over one MAP_SHARED exact-sliding-log table: one hot key admits exactly
//! `events` per window, refunds never over-admit, and SIGKILLed writers never wedge a key.
//! A plain `main` (no harness) so that the parent is single-threaded when it forks.

#[path = "../common/mod.rs"]
mod common;

use common::fork::{fork_all, run_scenarios, sigkill_rounds, Tally, PROCS, THREADS};
use common::SharedRegion;
use std::sync::atomic::Ordering::SeqCst;
use weir::table::{LogTable, SlidingLog};

const S: u64 = 1_000_000_000;
const WINDOWS: u64 = 6;

fn shared(log: SlidingLog, keys: usize) -> (SharedRegion, LogTable) {
    let r = SharedRegion::new(LogTable::bytes_for(&log, keys));
    // SAFETY: the mapping outlives the handle (dropped together at scenario end).
    let t = unsafe { LogTable::create(r.ptr, r.len, log, 0) }.unwrap();
    (r, t)
}

/// All 8 writers hammer one key, window after window (a barrier between windows, in shared
/// memory); each window admits exactly `events`. With `refund_every`, every k-th admission is
/// refunded at once: the net count never exceeds `events`.
fn hot_key(events: u64, refund_every: u64) {
    let log = SlidingLog::new(events, 10 * S).unwrap();
    let (_r, table) = shared(log, 64);
    let tally = Tally::new();
    let key = table.key_hash(b"hot");
    let writers = (PROCS * THREADS) as u64;
    fork_all(|_, _| {
        for w in 0..WINDOWS {
            let now = 1_000 * S + w * 11 * S;
            for i in 0..3 * events {
                if table.check(key, now + i % 1000).admitted() {
                    if refund_every > 0 && i % refund_every == 0 {
                        table.refund(key, now + i % 1000);
                        continue;
                    }
                    tally.at(w as usize).fetch_add(1, SeqCst);
                }
            }
            tally.at(100).fetch_add(1, SeqCst);
            while tally.at(100).load(SeqCst) < (w + 1) * writers {
                std::thread::yield_now();
            }
        }
    });
    for w in 0..WINDOWS {
        let got = tally.at(w as usize).load(SeqCst);
        if refund_every == 0 {
            assert_eq!(got, events, "window {w}");
        } else {
            assert!(got <= events && got > 0, "window {w}: {got}");
        }
    }
}

fn hot_key_admits_exactly_events_per_window() {
    hot_key(500, 0);
    hot_key(3, 0);
}

fn refunds_never_over_admit() {
    hot_key(200, 3);
}

/// Children hammer a few keys and are SIGKILLed at random moments; afterwards every key
/// admits exactly `events` in a fresh window.
fn sigkilled_writers_never_wedge_a_key() {
    let log = SlidingLog::new(5, S).unwrap();
    let (_r, table) = shared(log, 16); // 16 records, 40 keys: evictions too
    sigkill_rounds(30, |round, p| {
        let mut i = p as u64;
        loop {
            i = i.wrapping_add(7919);
            let h = table.key_hash(&(i % 40).to_le_bytes());
            let now = (round * 1000 + i % 900) * S / 1000 + 10 * S;
            if table.check(h, now).admitted() && i % 5 == 0 {
                table.refund(h, now);
            }
        }
    });
    let later = 100_000 * S;
    for k in 0..40u64 {
        let h = table.key_hash(&k.to_le_bytes());
        let admitted = (0..10)
            .filter(|_| table.check(h, later + k * 2 * S).admitted())
            .count();
        assert_eq!(admitted, 5, "key {k}");
    }
}

fn main() {
    let scenarios: [(&str, fn()); 3] = [
        (
            "hot_key_admits_exactly_events_per_window",
            hot_key_admits_exactly_events_per_window,
        ),
        ("refunds_never_over_admit", refunds_never_over_admit),
        (
            "sigkilled_writers_never_wedge_a_key",
            sigkilled_writers_never_wedge_a_key,
        ),
    ];
    run_scenarios(&scenarios)
}
