//! loom models of the table's compare-exchange protocols, of the live top keys' summary and
//! per-second history (`weir::policy::topkeys`), and of the permit ledger's renewals
//! (`weir::policy::ledger`). Run with `make loom`
//! (`LOOM_MAX_PREEMPTIONS=4 RUSTFLAGS="--cfg loom" cargo test --release --test loom`).
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;
use weir::limiter::{Delay, Gcra, Rate};
use weir::policy::ledger::{Held, Ledger};
use weir::table::Table;

const S: u64 = 1_000_000_000;

fn gcra(burst: u64) -> Gcra {
    Gcra::new(Rate::per_second(1), burst, Delay::NoDelay).unwrap()
}

/// A table of 8 slots (two buckets of 4): smaller than one probe window, so every key may use
/// every slot.
fn small_table() -> Arc<Table> {
    Arc::new(Table::new(Table::bytes_for(8), 1, 0).unwrap())
}

/// Runs `threads` concurrent checks of key `k`; returns how many were admitted.
fn admitted_by_threads(t: &Arc<Table>, g: Gcra, k: u64, threads: usize) -> usize {
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let t = t.clone();
            thread::spawn(move || t.check(&g, k, 1, 5 * S).admitted())
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|&a| a)
        .count()
}

#[test]
fn two_inserts_of_one_key_race_for_one_empty_slot() {
    loom::model(|| {
        let t = small_table();
        let g = gcra(0);
        let k = t.key_hash(b"k");
        let admitted = admitted_by_threads(&t, g, k, 2);
        assert_eq!(admitted, 1, "burst 0 admits exactly one request");
        assert_eq!(t.stats().occupancy, 1, "the key is stored once");
    });
}

#[test]
fn two_keys_race_for_one_empty_slot() {
    loom::model(|| {
        let t = small_table();
        let g = gcra(0);
        // Two keys with the same home bucket (multiply-shift onto 2 buckets of 4 slots).
        let home = |h: u64| (h as u128 * 2) >> 64;
        let a = t.key_hash(b"a");
        let b = (0u64..)
            .map(|i| t.key_hash(&i.to_le_bytes()))
            .find(|&h| h != a && home(h) == home(a))
            .unwrap();
        let ta = {
            let t = t.clone();
            thread::spawn(move || t.check(&g, a, 1, 5 * S).admitted())
        };
        let tb = {
            let t = t.clone();
            thread::spawn(move || t.check(&g, b, 1, 5 * S).admitted())
        };
        assert!(ta.join().unwrap() && tb.join().unwrap());
        assert!(t.peek(a).is_some() && t.peek(b).is_some());
        assert_eq!(t.stats().occupancy, 2);
    });
}

#[test]
fn eviction_races_an_update() {
    loom::model(|| {
        let t = small_table();
        let g = gcra(3);
        let keys: Vec<u64> = (0..8u64).map(|i| t.key_hash(&i.to_le_bytes())).collect();
        // Key 0 is charged least (once, the others three times), so it is the victim.
        for (i, &k) in keys.iter().enumerate() {
            for _ in 0..if i == 0 { 1 } else { 3 } {
                t.check(&g, k, 1, 5 * S);
            }
        }
        let before = t.peek(keys[0]).unwrap();
        let newcomer = t.key_hash(b"new");
        let updater = {
            let (t, k) = (t.clone(), keys[0]);
            thread::spawn(move || t.check(&g, k, 1, 5 * S).admitted())
        };
        let evictor = {
            let t = t.clone();
            thread::spawn(move || t.check(&g, newcomer, 1, 5 * S).admitted())
        };
        assert!(updater.join().unwrap() && evictor.join().unwrap());
        // Nine keys, eight slots: the loser is key 0 or the newcomer (both charged least);
        // the heavier keys are never touched, and no state is torn or mixed.
        assert!(keys[1..].iter().all(|&k| t.peek(k) == Some(5 * S + 3 * S)));
        match (t.peek(keys[0]), t.peek(newcomer)) {
            // Key 0 was updated in place, or evicted and then stored afresh.
            (Some(s), None) => assert!(s == before + S || s == before),
            (None, Some(s)) => assert_eq!(s, 6 * S),
            other => panic!("exactly one of key 0 and the newcomer must hold a slot: {other:?}"),
        }
        assert_eq!(t.stats().occupancy, 8);
    });
}

#[test]
fn concurrent_updates_of_one_key_admit_exactly_the_burst() {
    loom::model(|| {
        let t = small_table();
        let g = gcra(1);
        let k = t.key_hash(b"hot");
        let admitted = admitted_by_threads(&t, g, k, 3);
        assert_eq!(admitted, 2);
    });
}

/// Two threads that ask for the same counter stripe, free at first or owned by a thread that
/// is gone: at most one owns it (and adds without a locked instruction), the other adds to the
/// shared stripe, and no count is lost.
#[test]
fn two_threads_claim_one_stripe_and_lose_no_count() {
    use loom::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use weir::table::owner_model::{Me, SHARED, STRIPES};

    for previous_owner in [0, 99] {
        loom::model(move || {
            let owner = Arc::new(AtomicU64::new(previous_owner));
            let counters: Arc<Vec<AtomicU64>> =
                Arc::new((0..STRIPES).map(|_| AtomicU64::new(0)).collect());
            let handles: Vec<_> = [1u64, 2]
                .into_iter()
                .map(|tid| {
                    let (owner, counters) = (owner.clone(), counters.clone());
                    thread::spawn(move || {
                        let me = Me { tid, stripe: 3 };
                        for _ in 0..2 {
                            let lane = me.lane_with(&*owner, || true, |t| t == 99);
                            assert!(lane.stripe == 3 || lane.stripe == SHARED);
                            lane.add(&counters[lane.stripe]);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            let sum: u64 = counters.iter().map(|c| c.load(Relaxed)).sum();
            assert_eq!(sum, 4);
            assert!([1, 2].contains(&owner.load(Relaxed)));
        });
    }
}

/// Two threads count a rejection in a per-second slot still stamped with an older second:
/// one restamps it, the other adds to the new stamp; both counts are kept.
#[test]
fn two_rejections_restamp_one_second_and_both_count() {
    use loom::sync::atomic::AtomicU64;
    use weir::policy::topkeys::Ring;

    loom::model(|| {
        // Two slots of 4 words; second 5 shares slot 1 with second 3 (count 7).
        let words: Arc<Vec<AtomicU64>> = Arc::new((0..8).map(|_| AtomicU64::new(0)).collect());
        Ring { words: &words[..] }.rejected(3);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let words = words.clone();
                thread::spawn(move || Ring { words: &words[..] }.rejected(5))
            })
            .collect();
        // Each gets its own number in the second (the sampling of names relies on it).
        let mut numbers: Vec<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        numbers.sort_unstable();
        assert_eq!(numbers, [1, 2]);
        let p = Ring { words: &words[..] }.read(5, 0);
        assert_eq!(p.rejected[p.rejected.len() - 1], 2);
        assert_eq!(
            p.rejected[p.rejected.len() - 3],
            0,
            "second 3's count is gone"
        );
    });
}

/// Two writers race for a one-entry summary while a reader reads it: the reader never sees a
/// name under another name's tag (the sequence lock), and no record is counted twice.
#[test]
fn summary_writers_race_for_one_entry_and_readers_see_no_torn_name() {
    use loom::sync::atomic::AtomicU64;
    use weir::policy::topkeys::Summary;

    fn check(got: &[weir::policy::topkeys::Counted]) {
        for c in got {
            let want = if c.tag == 1 { "a" } else { "b" };
            assert_eq!(c.name, want, "torn entry {c:?}");
        }
    }
    loom::model(|| {
        // One entry of 4 words: meta, count, tag, one word of name.
        let words: Arc<Vec<AtomicU64>> = Arc::new((0..4).map(|_| AtomicU64::new(0)).collect());
        let writers: Vec<_> = [(1u64, "a"), (2, "b")]
            .into_iter()
            .map(|(tag, name)| {
                let words = words.clone();
                thread::spawn(move || {
                    let s = Summary {
                        words: &words[..],
                        width: 4,
                    };
                    s.record(9, tag, name.as_bytes(), 1);
                })
            })
            .collect();
        let s = Summary {
            words: &words[..],
            width: 4,
        };
        let mut during = Vec::new();
        s.read(9, &mut during);
        check(&during);
        for h in writers {
            h.join().unwrap();
        }
        let mut after = Vec::new();
        s.read(9, &mut after);
        check(&after);
        assert_eq!(after.len(), 1);
        assert!((1..=2).contains(&after[0].count), "{after:?}");
    });
}

const PERMIT: Held = Held {
    tag: 1,
    key_hash: 7,
    bucket: 3,
};

/// A holder gives a permit back while a renewal moves it: it is released exactly once, in the
/// bucket it counts in (the renewed one once the renewal wrote it), by whichever side ends
/// up owning the entry; the entry is free afterwards.
#[test]
fn a_give_back_racing_a_renewal_releases_once_in_the_current_bucket() {
    loom::model(|| {
        let l = Arc::new(Ledger::new(true));
        let g = l.take(PERMIT);
        // Bits 0..8: the bucket the renewer released; bit 8: it renewed the permit.
        let renewer_saw = Arc::new(AtomicU64::new(0));
        let renewer = {
            let (l, saw) = (l.clone(), renewer_saw.clone());
            thread::spawn(move || {
                l.renew_each(
                    |h| {
                        saw.fetch_or(1 << 8, SeqCst);
                        h.bucket + 1
                    },
                    |h| {
                        saw.fetch_or(h.bucket, SeqCst);
                    },
                )
            })
        };
        let mine = l.give_back(g, PERMIT.bucket);
        renewer.join().unwrap();
        let saw = renewer_saw.load(SeqCst);
        let (renewed, by_renewer) = (saw & 1 << 8 != 0, saw & 0xff);
        match mine {
            Some(b) => {
                assert_eq!(by_renewer, 0, "released twice");
                assert_eq!(b, if renewed { 4 } else { 3 }, "a stale bucket");
            }
            None => assert_eq!(by_renewer, 4, "handed over, so the renewal releases it"),
        }
        assert_eq!(l.held(), 0);
        assert_eq!(
            l.give_back(g, PERMIT.bucket),
            None,
            "a copy gives nothing back"
        );
    });
}

/// A renewal racing a new permit taking a reused entry sees the new record whole, or skips
/// the entry; never the old permit's record, never a mix.
#[test]
fn a_renewal_racing_a_take_sees_the_whole_record() {
    loom::model(|| {
        let l = Arc::new(Ledger::new(true));
        // Fill both entries and free them, so the next take reuses one with an old record.
        let (a, b) = (l.take(PERMIT), l.take(PERMIT));
        assert!(l.give_back(a, 3).is_some() && l.give_back(b, 3).is_some());
        let next = Held {
            tag: 2,
            key_hash: 9,
            bucket: 5,
        };
        let renewer = {
            let l = l.clone();
            thread::spawn(move || {
                l.renew_each(
                    |h| {
                        assert_eq!(h, next, "a torn or stale record");
                        h.bucket
                    },
                    |_| panic!("nothing was given back"),
                )
            })
        };
        let g = l.take(next);
        assert_eq!(renewer.join().unwrap(), 0);
        assert_eq!(l.give_back(g, 0), Some(5));
    });
}
