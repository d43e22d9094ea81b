//! The exact sliding log (`LogTable`) against a plain reference model: a VecDeque of the last
//! `events` admission times per key, with injected time and refunds.

use proptest::prelude::*;
use std::collections::VecDeque;
use weir::limiter::Decision;
use weir::table::{LogTable, SlidingLog, TableError};

const MS: u64 = 1_000_000;
const S: u64 = 1_000 * MS;

/// The reference: each key's admitted events (ms-truncated times), newest last, at most N.
struct Model {
    n: usize,
    window_ns: u64,
    logs: Vec<VecDeque<u64>>,
}

impl Model {
    fn live(&self, ts_ms: u64, now: u64) -> bool {
        now < ts_ms * MS + self.window_ns
    }
    /// (admitted, retry_after_ns)
    fn check(&mut self, key: usize, now: u64) -> (bool, u64) {
        let in_window = self.logs[key]
            .iter()
            .filter(|&&t| self.live(t, now))
            .count();
        if in_window < self.n {
            let log = &mut self.logs[key];
            log.push_back(now / MS);
            if log.len() > self.n {
                log.pop_front();
            }
            (true, 0)
        } else {
            // The oldest of the N events in the window leaves it first.
            let oldest = self.logs[key][self.logs[key].len() - self.n];
            (false, oldest * MS + self.window_ns - now)
        }
    }
    fn refund(&mut self, key: usize) {
        self.logs[key].pop_back();
    }
}

#[derive(Clone, Debug)]
struct Op {
    key: usize,
    advance_ns: u64,
    refund: bool,
}

fn op(window_ms: u64) -> impl Strategy<Value = Op> {
    (
        0usize..3,
        prop_oneof![
            Just(0u64),
            0..2 * MS,
            0..window_ms * MS / 4,
            0..2 * window_ms * MS
        ],
        prop::bool::weighted(0.15),
    )
        .prop_map(|(key, advance_ns, refund)| Op {
            key,
            advance_ns,
            refund,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]
    #[test]
    fn log_matches_the_reference_model(
        n in 1u64..6,
        window_ms in 1u64..50,
        ops in prop::collection::vec(op(50), 1..200),
    ) {
        let log = SlidingLog::new(n, window_ms * MS).unwrap();
        let table = LogTable::new(LogTable::bytes_for(&log, 64), log, 0).unwrap();
        let mut model = Model { n: n as usize, window_ns: window_ms * MS, logs: vec![VecDeque::new(); 3] };
        let mut now = 1_000 * S;
        for o in ops {
            now += o.advance_ns;
            let h = table.key_hash(&(o.key as u64).to_le_bytes());
            let predicted = table.predict(h, now);
            let v = table.check(h, now);
            let (admitted, retry) = model.check(o.key, now);
            prop_assert_eq!(predicted.decision, v.decision);
            prop_assert_eq!(v.decision == Decision::Pass, admitted, "at {} key {}", now, o.key);
            if !admitted {
                prop_assert_eq!(v.retry_after_ns, retry);
            }
            if admitted && o.refund {
                table.refund(h, now);
                model.refund(o.key);
            }
        }
    }
}

#[test]
fn ten_per_minute_like_caddy_ratelimit() {
    let log = SlidingLog::new(10, 60 * S).unwrap();
    let t = LogTable::new(1 << 16, log, 0).unwrap();
    let k = t.key_hash(b"static");
    let t0 = 1_020 * S;
    for _ in 0..10 {
        assert_eq!(t.check(k, t0).decision, Decision::Pass);
    }
    let v = t.check(k, t0);
    assert_eq!((v.decision, v.retry_after_ns), (Decision::Reject, 60 * S));
    let v = t.check(k, t0 + 30 * S);
    assert_eq!((v.decision, v.retry_after_ns), (Decision::Reject, 30 * S));
    assert_eq!(t.check(k, t0 + 60 * S).decision, Decision::Pass);
    let st = t.stats();
    assert_eq!((st.passed, st.rejected, st.occupancy), (11, 2, 1));
}

#[test]
fn full_table_reuses_expired_records_and_counts_active_evictions() {
    let log = SlidingLog::new(2, S).unwrap();
    let t = LogTable::new(LogTable::bytes_for(&log, 8), log, 0).unwrap();
    assert_eq!(t.capacity(), 8);
    for i in 0..100u64 {
        assert_eq!(
            t.check(t.key_hash(&i.to_le_bytes()), 10 * S).decision,
            Decision::Pass
        );
    }
    let st = t.stats();
    assert_eq!(st.evicted_active, 92);
    // Two seconds later every record is expired: new keys reuse them losslessly, and a key
    // that was evicted is simply absent (its quota is whole).
    for i in 100..200u64 {
        let h = t.key_hash(&i.to_le_bytes());
        assert_eq!(t.check(h, 12 * S).decision, Decision::Pass);
        assert_eq!(t.check(h, 12 * S).decision, Decision::Pass);
        assert_eq!(t.check(h, 12 * S).decision, Decision::Reject, "key {i}");
    }
    assert!(t.stats().evicted_expired >= 8);
}

#[test]
fn bad_parameters_and_regions_are_refused() {
    assert!(SlidingLog::new(0, S).is_err());
    assert!(SlidingLog::new(4097, S).is_err());
    assert!(SlidingLog::new(10, 999_999).is_err());
    let log = SlidingLog::new(4096, S).unwrap();
    assert_eq!(log.record_bytes(), 16 + 4096 * 8);
    assert!(matches!(
        LogTable::new(1000, log, 0),
        Err(TableError::TooSmall { .. })
    ));
}

#[test]
fn shared_region_attach_keeps_state_and_refuses_changes() {
    let log = SlidingLog::new(3, 10 * S).unwrap();
    let len = LogTable::bytes_for(&log, 100);
    let layout = std::alloc::Layout::from_size_align(len, 64).unwrap();
    // SAFETY: non-zero size; freed at the end.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
    {
        // SAFETY: exclusive, aligned, `len` bytes, outlives the handles below.
        let (a, kept) = unsafe { LogTable::create_or_attach(ptr, len, log, 0) }.unwrap();
        assert!(!kept);
        let k = a.key_hash(b"k");
        for _ in 0..3 {
            assert!(a.check(k, S).admitted());
        }
        // SAFETY: as above.
        let (b, kept) = unsafe { LogTable::create_or_attach(ptr, len, log, 0) }.unwrap();
        assert!(kept);
        assert_eq!(b.check(b.key_hash(b"k"), S).decision, Decision::Reject);
        let other = SlidingLog::new(4, 10 * S).unwrap();
        // SAFETY: as above.
        assert!(matches!(
            unsafe { LogTable::attach(ptr, len, other) },
            Err(TableError::SchemaChanged { .. })
        ));
        // SAFETY: as above.
        assert!(matches!(
            unsafe { LogTable::attach(ptr, len - 64, log) },
            Err(TableError::SizeChanged { .. })
        ));
        // A slot table's region is not a log table.
        // SAFETY: as above.
        assert!(matches!(
            unsafe { weir::table::Table::attach(ptr, len, log.schema()) },
            Err(TableError::NotATable)
        ));
    }
    // SAFETY: allocated above with this layout; the handles are gone.
    unsafe { std::alloc::dealloc(ptr, layout) };
}
