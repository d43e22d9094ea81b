//! The region layer on its own and under each format: identity checks and their messages,
//! attaching bytes a previous process image left, zeroed creation.

use std::sync::atomic::Ordering::Relaxed;

use super::alloc::Mapping;
use super::attach::{create_or_attach, Mismatch};
use super::header::{magic, Ident};
use super::*;
use crate::cluster::{shared_bytes, ClusterShared};
use crate::limiter::{Decision, SlidingWindow};
use crate::policy::counters::Counters;
use crate::table::{LogTable, SlidingLog, Table};

const TEST_MAGIC: u64 = magic(b"WEIRTST", 2);

/// A test format: magic, version word 1, size word 2, schema word 3.
fn ident<'a>(size: &'a [(usize, u64)], schema: &'a [(usize, u64)]) -> Ident<'a> {
    Ident {
        magic: TEST_MAGIC,
        version: Some((1, 7)),
        size,
        schema,
    }
}

#[test]
fn each_identity_mismatch_is_named_with_its_message() {
    let m = Mapping::new(4096).unwrap();
    let r = m.region();
    let w = r.words(8);
    let id = ident(&[(2, 4096)], &[(3, 0xab)]);
    let check = || id.check(|i| &w[i]);
    // Zero bytes (and another format) are "not a table": formats create there.
    assert_eq!(check(), Err(RegionError::NotATable));
    w[0].store(magic(b"WEIROTH", 2), Relaxed);
    assert_eq!(check(), Err(RegionError::NotATable));
    id.write(|i| &w[i], || {});
    assert_eq!(check(), Ok(()));
    let msg = |e: RegionError| e.to_string();

    w[0].store(magic(b"WEIRTST", 1), Relaxed);
    let e = check().unwrap_err();
    assert_eq!(
        e,
        RegionError::LayoutVersion {
            found: 1,
            expected: 2
        }
    );
    assert_eq!(
        msg(e),
        "region holds a table of layout version 1, this build uses 2; restart instead of reloading"
    );
    w[0].store(TEST_MAGIC, Relaxed);

    w[1].store(6, Relaxed);
    let e = check().unwrap_err();
    assert_eq!(
        e,
        RegionError::LayoutVersion {
            found: 6,
            expected: 7
        }
    );
    w[1].store(7, Relaxed);

    w[2].store(8192, Relaxed);
    let e = check().unwrap_err();
    assert_eq!(
        msg(e),
        "region was created with 8192 bytes and is now 4096 bytes; a zone's size cannot change on reload"
    );
    w[2].store(4096, Relaxed);

    w[3].store(0xcd, Relaxed);
    let e = check().unwrap_err();
    assert_eq!(
        e,
        RegionError::SchemaChanged {
            created: 0xcd,
            now: 0xab
        }
    );
    assert_eq!(
        msg(e),
        "region was created for schema 0xcd, now asked for 0xab (the zone's algorithm or key changed); use a new zone name or restart"
    );
    assert_eq!(
        msg(RegionError::NotATable),
        "region does not hold a weir table"
    );
}

#[test]
fn a_mismatch_is_refused_or_reformatted_as_the_format_says() {
    let m = Mapping::new(4096).unwrap();
    let r = m.region();
    let w = r.words(8);
    let id = ident(&[(2, 4096)], &[(3, 1)]);
    let fresh = Fresh::Unknown;
    assert_eq!(
        create_or_attach(&r, |i| &w[i], &id, Mismatch::Refuse, fresh, || {}),
        Ok(false)
    );
    w[5].store(99, Relaxed);
    assert_eq!(
        create_or_attach(&r, |i| &w[i], &id, Mismatch::Refuse, fresh, || {}),
        Ok(true)
    );
    assert_eq!(w[5].load(Relaxed), 99, "attaching keeps the state");
    let other = ident(&[(2, 4096)], &[(3, 2)]);
    assert!(matches!(
        create_or_attach(&r, |i| &w[i], &other, Mismatch::Refuse, fresh, || {}),
        Err(RegionError::SchemaChanged { created: 1, now: 2 })
    ));
    assert_eq!(w[5].load(Relaxed), 99, "a refusal writes nothing");
    assert_eq!(
        create_or_attach(&r, |i| &w[i], &other, Mismatch::Reformat, fresh, || {}),
        Ok(false)
    );
    assert_eq!(w[5].load(Relaxed), 0, "a reformat starts from zero");
    assert_eq!(other.check(|i| &w[i]), Ok(()));
}

#[test]
fn zeroed_creation_writes_only_the_header_and_unknown_bytes_are_cleared() {
    let bytes = Table::bytes_for(64);
    let m = Mapping::new(bytes).unwrap();
    let r = m.region();
    let last = r.view::<AtomicU64>(bytes - 8);
    // A byte in the slot area: Fresh::Zeroed trusts the caller and leaves it alone.
    last.store(0x5a5a, Relaxed);
    let (_, kept) = Table::create_or_attach_in(r, 9, 0, Fresh::Zeroed).unwrap();
    assert!(!kept);
    assert_eq!(
        last.load(Relaxed),
        0x5a5a,
        "zeroed creation wrote only the header"
    );
    let (_, kept) = Table::create_or_attach_in(r, 9, 0, Fresh::Zeroed).unwrap();
    assert!(kept, "the zeroed-created table attaches");
    // Unknown bytes under another format are cleared before the table is written.
    r.words(1)[0].store(0, Relaxed);
    let (_, kept) = Table::create_or_attach_in(r, 9, 0, Fresh::Unknown).unwrap();
    assert!(!kept);
    assert_eq!(
        last.load(Relaxed),
        0,
        "creation over unknown bytes zeroed them"
    );
}

/// Copies `len` bytes of `from` into a new mapping (another address: the bytes a previous
/// process image left in a zone, as nginx hands them to the next one).
fn copy_of(from: &Region) -> Mapping {
    let to = Mapping::new(from.len()).unwrap();
    // SAFETY: two distinct mappings of at least `len` bytes; nobody else uses the copy yet.
    unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), to.region().as_ptr(), from.len()) };
    to
}

#[test]
fn every_format_attaches_the_bytes_a_previous_image_left() {
    let sw = SlidingWindow::new(3, 1_000_000_000).unwrap();
    let now = 5_000_000_000;

    // Slot table.
    let bytes = Table::bytes_for(64);
    let old = Mapping::new(bytes).unwrap();
    let (t, _) = Table::create_or_attach_in(old.region(), 7, 11, Fresh::Zeroed).unwrap();
    let k = t.key_hash(b"client");
    for _ in 0..3 {
        t.check(&sw, k, 1, now);
    }
    drop(t);
    let new = copy_of(&old.region());
    drop(old);
    let (t, kept) = Table::create_or_attach_in(new.region(), 7, 0, Fresh::Zeroed).unwrap();
    assert!(kept);
    assert_eq!(t.clock_base(), 11, "the clock base is the region's");
    assert_eq!(t.key_hash(b"client"), k, "the seed is the region's");
    assert_eq!(t.check(&sw, k, 1, now).decision, Decision::Reject);

    // Exact sliding log.
    let log = SlidingLog::new(2, 1_000_000_000).unwrap();
    let bytes = LogTable::bytes_for(&log, 16);
    let old = Mapping::new(bytes).unwrap();
    let (l, _) = LogTable::create_or_attach_in(old.region(), log, 0, Fresh::Zeroed).unwrap();
    let k = l.key_hash(b"client");
    l.check(k, now);
    l.check(k, now);
    let new = copy_of(&old.region());
    let (l, kept) = LogTable::create_or_attach_in(new.region(), log, 0, Fresh::Zeroed).unwrap();
    assert!(kept);
    assert_eq!(l.check(k, now).decision, Decision::Reject);

    // Cluster region.
    let bytes = shared_bytes(64);
    let old = Mapping::new(bytes).unwrap();
    let (c, kept) = ClusterShared::create_or_attach_in(old.region(), 64, 3, Fresh::Zeroed).unwrap();
    assert!(!kept);
    drop(c);
    old.region().view::<AtomicU64>(64 + 8).store(41, Relaxed); // stats.syncs_ok
    let new = copy_of(&old.region());
    let (_, kept) = ClusterShared::create_or_attach_in(new.region(), 64, 3, Fresh::Zeroed).unwrap();
    assert!(kept);
    assert_eq!(new.region().view::<AtomicU64>(72).load(Relaxed), 41);
    let (_, kept) =
        ClusterShared::create_or_attach_in(new.region(), 64, 4, Fresh::Unknown).unwrap();
    assert!(!kept, "another schema starts the cluster view over");
    assert_eq!(new.region().view::<AtomicU64>(72).load(Relaxed), 0);

    // Counters.
    let bytes = Counters::bytes_for(2);
    let old = Mapping::new(bytes).unwrap();
    let c = Counters::attach_in(old.region(), 2, 77, Fresh::Zeroed).unwrap();
    c.add_limit(1, |l| &l.rejected);
    let new = copy_of(&old.region());
    let c = Counters::attach_in(new.region(), 2, 77, Fresh::Zeroed).unwrap();
    assert_eq!(c.limit(1).rejected, 1);
}

/// The identity words every format writes, at the offsets docs/ARCHITECTURE.md gives: a
/// region written by an older build has these bytes, so it must attach.
#[test]
fn identity_words_keep_their_byte_layout() {
    let le = |r: &Region, at: usize| r.view::<AtomicU64>(at).load(Relaxed).to_le_bytes();
    let bytes = Table::bytes_for(64);
    let m = Mapping::new(bytes).unwrap();
    let r = m.region();
    Table::create_or_attach_in(r, 0x1234, 99, Fresh::Zeroed).unwrap();
    assert_eq!(&le(&r, 0), b"WEIRTBL\x03");
    assert_eq!(u64::from_le_bytes(le(&r, 8)), 3);
    assert_eq!(u64::from_le_bytes(le(&r, 16)), bytes as u64);
    assert_eq!(u64::from_le_bytes(le(&r, 24)), 64);
    assert_eq!(u64::from_le_bytes(le(&r, 64)), 99);
    assert_eq!(u64::from_le_bytes(le(&r, 72)), 0x1234);

    let log = SlidingLog::new(2, 1_000_000_000).unwrap();
    let bytes = LogTable::bytes_for(&log, 16);
    let m = Mapping::new(bytes).unwrap();
    let r = m.region();
    LogTable::create_or_attach_in(r, log, 0, Fresh::Zeroed).unwrap();
    assert_eq!(&le(&r, 0), b"WEIRLOG\x02");
    assert_eq!(
        u64::from_le_bytes(le(&r, 8)),
        3,
        "the log carries the table's version word"
    );
    assert_eq!(u64::from_le_bytes(le(&r, 72)), log.schema());

    let m = Mapping::new(shared_bytes(64)).unwrap();
    let r = m.region();
    ClusterShared::create_or_attach_in(r, 64, 5, Fresh::Zeroed).unwrap();
    assert_eq!(&le(&r, 0), b"WEIRCLS\x02");
    let words: Vec<u64> = (1..5).map(|i| u64::from_le_bytes(le(&r, 8 * i))).collect();
    assert_eq!(words, [shared_bytes(64) as u64, 5, 64, 0]);
    assert_eq!(
        &le(&r, 192),
        b"WEIRTBL\x03",
        "the remote table follows the head"
    );

    let m = Mapping::new(Counters::bytes_for(3)).unwrap();
    let r = m.region();
    Counters::attach_in(r, 3, 0xfeed, Fresh::Zeroed).unwrap();
    assert_eq!(&le(&r, 0), b"WEIRCNT7");
    assert_eq!(u64::from_le_bytes(le(&r, 8)), 3);
    assert_eq!(u64::from_le_bytes(le(&r, 16)), 0xfeed);
}

#[test]
fn regions_refuse_null_and_misalignment_and_views_stay_inside() {
    // SAFETY: NULL is refused before anything is read.
    let e = unsafe { Region::new(std::ptr::null_mut(), 64, 1) }.unwrap_err();
    assert_eq!(e.to_string(), "region must be aligned to 1 bytes");
    let m = Mapping::new(4096).unwrap();
    let r = m.region();
    // SAFETY: inside the mapping, which outlives `odd`.
    let odd = unsafe { Region::new(r.as_ptr().add(8), 128, REGION_ALIGN) };
    assert_eq!(odd.unwrap_err(), RegionError::Misaligned { align: 64 });
    let part = r.part(64, 64);
    assert_eq!(part.len(), 64);
    assert!(std::panic::catch_unwind(|| r.part(64, 4096)).is_err());
    assert!(std::panic::catch_unwind(|| r.view::<AtomicU64>(4092)).is_err());
    assert!(std::panic::catch_unwind(|| r.view::<AtomicU64>(4)).is_err());
}

/// A caller's region may be shared between processes, so where a 16-byte compare-exchange is
/// not lock-free (portable-atomic would take a lock private to this process) tables and logs
/// refuse it with an operator's message; in-process ones work either way. The lock path runs
/// in a build with `--cfg portable_atomic_no_outline_atomics` and no `+cmpxchg16b`
/// (scripts/crate-outside.sh), which sets `WEIR_EXPECT_LOCK_FREE=0` so the test knows which
/// path it must have taken.
#[test]
fn shared_regions_need_a_lock_free_16_byte_cas() {
    let lock_free = crate::table::lock_free_128();
    if let Ok(expected) = std::env::var("WEIR_EXPECT_LOCK_FREE") {
        assert_eq!(
            lock_free,
            expected == "1",
            "WEIR_EXPECT_LOCK_FREE={expected}"
        );
    }
    let sw = SlidingWindow::new(1, 1_000_000_000).unwrap();
    let log = SlidingLog::new(1, 1_000_000_000).unwrap();

    // In-process: this process's own mapping, whatever the CPU.
    let t = Table::new(Table::bytes_for(256), 1, 0).unwrap();
    let k = t.key_hash(b"client");
    assert_eq!(t.check(&sw, k, 1, 1).decision, Decision::Pass);
    assert_eq!(t.check(&sw, k, 1, 2).decision, Decision::Reject);
    let l = t.log_in_slots(log).unwrap();
    assert_eq!(l.check(k, 1).decision, Decision::Pass);
    assert_eq!(l.check(k, 2).decision, Decision::Reject);
    let l = LogTable::new(LogTable::bytes_for(&log, 16), log, 0).unwrap();
    assert_eq!(l.check(k, 1).decision, Decision::Pass);
    let m = Mapping::new(Table::bytes_for(64)).unwrap();
    assert!(!m.region().part(64, 64).may_be_shared());

    // A caller's region (here the same kind of mapping, handed over as a host would).
    // SAFETY: the mapping is valid for its length while `m` lives, which outlives the handles.
    let shared = unsafe { Region::new(m.region().as_ptr(), m.region().len(), REGION_ALIGN) };
    let shared = shared.unwrap();
    assert!(shared.may_be_shared() && shared.part(64, 64).may_be_shared());
    let table = Table::create_or_attach_in(shared, 1, 0, Fresh::Zeroed).map(|_| ());
    let log = LogTable::create_or_attach_in(shared, log, 0, Fresh::Unknown).map(|_| ());
    if lock_free {
        assert_eq!(table, Ok(()));
        assert_eq!(log, Ok(()));
    } else {
        assert_eq!(table, Err(RegionError::NoLockFree128));
        assert_eq!(log, Err(RegionError::NoLockFree128));
        let msg = RegionError::NoLockFree128.to_string();
        assert!(
            msg.contains("cmpxchg16b") && msg.contains("shared"),
            "{msg}"
        );
    }
}
