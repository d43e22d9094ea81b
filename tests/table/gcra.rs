//! The table through its public API: lookups, eviction, shared regions, counters.

use crate::common;

use common::SharedRegion;
use weir::limiter::{Concurrency, Decision, Delay, Gcra, Rate, SlidingWindow};
use weir::table::{Table, TableError, SLOT_BYTES};

const S: u64 = 1_000_000_000;

fn gcra(per_sec: u64, burst: u64) -> Gcra {
    Gcra::new(Rate::per_second(per_sec), burst, Delay::NoDelay).unwrap()
}

#[test]
fn keys_are_limited_independently() {
    let t = Table::new(64 << 10, 1, 0).unwrap();
    let g = gcra(1, 1);
    let (a, b) = (t.key_hash(b"10.0.0.1"), t.key_hash(b"10.0.0.2"));
    assert_ne!(a, b);
    let d = |k| t.check(&g, k, 1, 5 * S).decision;
    assert_eq!(
        [d(a), d(a), d(a)],
        [Decision::Pass, Decision::Pass, Decision::Reject]
    );
    assert_eq!(
        [d(b), d(b), d(b)],
        [Decision::Pass, Decision::Pass, Decision::Reject]
    );
    let st = t.stats();
    assert_eq!(
        (st.passed, st.rejected, st.occupancy, st.inserts),
        (4, 2, 2, 2)
    );
}

#[test]
fn capacity_follows_the_byte_budget_at_16_bytes_per_key() {
    assert_eq!(SLOT_BYTES, 16);
    let bytes = 10 << 20;
    let t = Table::new(bytes, 1, 0).unwrap();
    assert_eq!(t.capacity(), (bytes - 1152) / 16);
    assert_eq!(Table::capacity_for(100), 0);
    assert!(matches!(
        Table::new(100, 1, 0),
        Err(TableError::TooSmall { .. })
    ));
}

#[test]
fn a_full_table_evicts_expired_states_first_and_never_fails() {
    let t = Table::new(Table::bytes_for(64), 1, 0).unwrap();
    let g = gcra(1, 0);
    // Fill well past capacity at one instant: every state is active, evictions are counted.
    for k in 0..1000u64 {
        assert!(t
            .check(&g, t.key_hash(&k.to_le_bytes()), 1, 10 * S)
            .admitted());
    }
    let st = t.stats();
    assert_eq!(st.occupancy, 64);
    assert_eq!(st.evicted_expired, 0);
    assert_eq!(st.evicted_active, 1000 - 64);
    assert!(st.longest_probe < weir::table::PROBE_WINDOW as u64);
}

#[test]
fn expired_states_are_evicted_before_active_ones() {
    // One probe window: all keys compete for the same 8 slots.
    let t = Table::new(Table::bytes_for(8), 1, 0).unwrap();
    let g = gcra(1, 0);
    for k in 0..8u64 {
        t.check(&g, t.key_hash(&k.to_le_bytes()), 1, 10 * S);
    }
    // Two seconds later the eight states have expired: eight newcomers evict them losslessly.
    for k in 8..16u64 {
        assert!(t
            .check(&g, t.key_hash(&k.to_le_bytes()), 1, 12 * S)
            .admitted());
    }
    let st = t.stats();
    assert_eq!(
        (st.evicted_expired, st.evicted_active, st.occupancy),
        (8, 0, 8)
    );
    // A ninth newcomer must evict an active state, and says so.
    t.check(&g, t.key_hash(b"ninth"), 1, 12 * S);
    assert_eq!(t.stats().evicted_active, 1);
}

#[test]
fn eviction_prefers_the_most_refilled_state() {
    // A table with exactly one probe window: every key competes for the same 8 slots.
    let t = Table::new(Table::bytes_for(8), 1, 0).unwrap();
    let g = gcra(1, 100);
    let keys: Vec<u64> = (0..8u64).map(|k| t.key_hash(&k.to_le_bytes())).collect();
    for (i, &k) in keys.iter().enumerate() {
        // Key i spends i + 1 requests: key 0 is the most refilled.
        for _ in 0..=i {
            t.check(&g, k, 1, 10 * S);
        }
    }
    let newcomer = t.key_hash(b"new");
    t.check(&g, newcomer, 1, 10 * S);
    assert!(
        t.peek(keys[0]).is_none(),
        "the least-charged key is the victim"
    );
    assert!(keys[1..].iter().all(|&k| t.peek(k).is_some()));
    assert!(t.peek(newcomer).is_some());
}

#[test]
fn rejected_new_keys_take_no_slot() {
    let t = Table::new(Table::bytes_for(8), 1, 0).unwrap();
    let sw = SlidingWindow::new(1, S).unwrap();
    let v = t.check(&sw, t.key_hash(b"k"), 5, S);
    assert_eq!(v.decision, Decision::Reject);
    assert_eq!(t.stats().occupancy, 0);
}

#[test]
fn reattaching_a_region_keeps_state_and_seed() {
    let r = SharedRegion::new(1 << 16);
    let g = gcra(1, 0);
    // SAFETY: the mapping outlives both handles.
    let first = unsafe { Table::create(r.ptr, r.len, 7, 0) }.unwrap();
    let k = first.key_hash(b"client");
    assert!(first.check(&g, k, 1, 3 * S).admitted());
    drop(first);
    let (again, kept) = unsafe { Table::create_or_attach(r.ptr, r.len, 7, 0) }.unwrap();
    assert!(kept);
    assert_eq!(again.key_hash(b"client"), k);
    assert_eq!(again.check(&g, k, 1, 3 * S).decision, Decision::Reject);
}

#[test]
fn a_different_layout_is_refused_with_a_clear_error() {
    let r = SharedRegion::new(1 << 16);
    unsafe { Table::create(r.ptr, r.len, 7, 0) }.unwrap();
    let e = unsafe { Table::attach(r.ptr, r.len - 4096, 7) }
        .err()
        .unwrap();
    assert_eq!(
        e,
        TableError::SizeChanged {
            created: 1 << 16,
            now: (1 << 16) - 4096
        }
    );
    assert!(e.to_string().contains("cannot change on reload"));
    let e = unsafe { Table::attach(r.ptr, r.len, 8) }.err().unwrap();
    assert!(matches!(
        e,
        TableError::SchemaChanged { created: 7, now: 8 }
    ));
    // Corrupt the layout version byte of the magic.
    unsafe { *r.ptr.add(7) = 99 };
    let e = unsafe { Table::attach(r.ptr, r.len, 7) }.err().unwrap();
    assert_eq!(
        e,
        TableError::LayoutVersion {
            found: 99,
            expected: weir::table::LAYOUT_VERSION
        }
    );
    let blank = SharedRegion::new(1 << 16);
    assert_eq!(
        unsafe { Table::attach(blank.ptr, blank.len, 7) }.err(),
        Some(TableError::NotATable)
    );
    let e = unsafe { Table::attach(blank.ptr.add(8), blank.len - 64, 7) }
        .err()
        .unwrap();
    assert_eq!(e, TableError::Misaligned { align: 64 });
}

#[test]
fn the_clock_base_is_shared_through_the_header() {
    let r = SharedRegion::new(1 << 16);
    let t = unsafe { Table::create(r.ptr, r.len, 1, 1000 * S) }.unwrap();
    let other = unsafe { Table::attach(r.ptr, r.len, 1) }.unwrap();
    assert_eq!(other.clock_base(), 1000 * S);
    let g = gcra(1, 0);
    let k = t.key_hash(b"k");
    assert!(t.check(&g, k, 1, 1000 * S + 5).admitted());
    assert!(!other.check(&g, k, 1, 1000 * S + 6).admitted());
    assert!(other.check(&g, k, 1, 1001 * S + 5).admitted());
}

/// Two callers read the clock on either side of a lease boundary and the later one admits
/// first: the earlier one's permit is counted in the later bucket and says so, so releasing
/// it (with either clock) and renewing it give back exactly that unit.
#[test]
fn a_permit_taken_with_a_trailing_clock_names_the_bucket_it_is_counted_in() {
    let lease = 10 * S;
    let t = Table::new(1 << 16, 3, 0).unwrap();
    let c = Concurrency::new(3, lease).unwrap();
    let k = t.key_hash(b"rails");
    let (_, late) = t.acquire(&c, k, lease + 1);
    let (_, early) = t.acquire(&c, k, lease - 1);
    let (late, early) = (late.unwrap().into_raw(), early.unwrap().into_raw());
    assert_eq!(late.1, 1);
    assert_eq!(early.1, 1, "counted in bucket 1, not its clock's 0");
    let permit = |(k, b)| weir::limiter::Permit::from_raw(k, b);
    let in_flight = |now| c.in_flight(t.peek(k).unwrap_or(0), now);
    assert_eq!(in_flight(lease + 2), 2);
    t.release(&c, permit(early), lease - 1);
    assert_eq!(in_flight(lease + 2), 1);
    // Renewed in bucket 2, released with a clock still in bucket 1.
    let late = t.renew_units(&c, permit(late), 1, 2 * lease + 1).into_raw();
    assert_eq!(late.1, 2);
    t.release(&c, permit(late), 2 * lease - 1);
    assert_eq!(in_flight(2 * lease + 2), 0);
}

#[test]
fn concurrency_permits_release_once_and_never_underflow() {
    let t = Table::new(1 << 16, 3, 0).unwrap();
    let c = Concurrency::new(2, 60 * S).unwrap();
    let k = t.key_hash(b"rails");
    let (_, p1) = t.acquire(&c, k, S);
    let (_, p2) = t.acquire(&c, k, S);
    let (v, p3) = t.acquire(&c, k, S);
    assert_eq!(v.decision, Decision::Reject);
    assert!(p3.is_none());
    t.release(&c, p1.unwrap(), 2 * S);
    let (_, p4) = t.acquire(&c, k, 2 * S);
    assert!(p4.is_some());
    t.release(&c, p2.unwrap(), 3 * S);
    t.release(&c, p4.unwrap(), 3 * S);
    // A forged extra release changes nothing.
    t.release(&c, weir::limiter::Permit::from_raw(k, c.bucket(S)), 3 * S);
    assert_eq!(c.in_flight(t.peek(k).unwrap_or(0), 3 * S), 0);
}
