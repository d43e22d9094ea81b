//! loom models of the exact sliding log's protocol: the entry CAS (linearization point), the
//! head helping, refund rollback, and a re-tag racing a writer. Run with
//! `RUSTFLAGS="--cfg loom -C target-feature=+cmpxchg16b" cargo test --release --test loom_log`.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use weir::table::{LogTable, SlidingLog};

const S: u64 = 1_000_000_000;

/// Explores every interleaving with at most `n` preemptions (loom's bound; without it the
/// models with a retry loop that another thread can keep re-triggering — two keys evicting each
/// other from one record — have unbounded executions).
fn bounded(n: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(n);
    b.check(f);
}

fn table(events: u64, keys: usize) -> Arc<LogTable> {
    let log = SlidingLog::new(events, 60 * S).unwrap();
    Arc::new(LogTable::new(LogTable::bytes_for(&log, keys), log, 0).unwrap())
}

fn run(t: &Arc<LogTable>, threads: usize, k: u64, refund: bool) -> usize {
    let hs: Vec<_> = (0..threads)
        .map(|i| {
            let t = t.clone();
            thread::spawn(move || {
                let ok = t.check(k, 5 * S).admitted();
                if ok && refund && i == 0 {
                    t.refund(k, 5 * S);
                    return false;
                }
                ok
            })
        })
        .collect();
    hs.into_iter()
        .map(|h| h.join().unwrap())
        .filter(|&a| a)
        .count()
}

#[test]
fn three_writers_on_two_events_admit_exactly_two() {
    bounded(3, || {
        let t = table(2, 1);
        let k = t.key_hash(b"k");
        assert_eq!(run(&t, 3, k, false), 2);
        // The log is full: nothing more in the window, whatever the interleaving was.
        assert!(!t.check(k, 5 * S).admitted());
        assert!(t.check(k, 65 * S).admitted());
    });
}

#[test]
fn one_event_two_writers_and_helping() {
    loom::model(|| {
        let t = table(1, 1);
        let k = t.key_hash(b"k");
        assert_eq!(run(&t, 2, k, false), 1);
        assert!(!t.check(k, 5 * S).admitted());
    });
}

#[test]
fn refund_racing_an_admission_never_over_admits() {
    loom::model(|| {
        let t = table(1, 1);
        let k = t.key_hash(b"k");
        // Thread 0 admits and refunds; thread 1 admits (if the slot is free when it looks).
        let admitted = run(&t, 2, k, true);
        // Exactly `admitted` events are recorded: one more fits only if none is.
        let more = t.check(k, 5 * S).admitted();
        assert!(admitted <= 1);
        assert_eq!(more, admitted == 0, "admitted {admitted}");
    });
}

#[test]
fn retag_racing_a_writer_never_leaks_into_the_other_key() {
    bounded(3, || {
        // One record, two events per key: a and b each admit once, evicting each other.
        let t = table(2, 1);
        let a = t.key_hash(b"a");
        let b = t.key_hash(b"b");
        let ta = {
            let t = t.clone();
            thread::spawn(move || t.check(a, 5 * S).admitted())
        };
        let tb = {
            let t = t.clone();
            thread::spawn(move || t.check(b, 5 * S).admitted())
        };
        assert!(ta.join().unwrap());
        assert!(tb.join().unwrap());
        // The record's holder has exactly its own one event (remaining 0 after one more);
        // the other key is absent (remaining 1). Had the loser's event leaked into the
        // holder's log, the holder would be full (a rejection).
        let (pa, pb) = (t.predict(a, 5 * S), t.predict(b, 5 * S));
        assert!(pa.admitted() && pb.admitted(), "{pa:?} {pb:?}");
        let mut rem = [pa.remaining.get(), pb.remaining.get()];
        rem.sort();
        assert_eq!(rem, [0, 1]);
    });
}
