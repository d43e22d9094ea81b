//! Which concurrency permits and queue places of one engine are still held, so that giving
//! one back twice (a copy of a C verdict released after the original, a forged raw permit)
//! changes nothing, and so that the process holding them can renew their leases in bulk.
//!
//! A held permit names a ledger entry and the entry's generation. An entry is one `u32` state,
//! `generation << 3 | PENDING | BUSY | HELD`, and a [`Held`] record: what renewing it needs.
//!
//! - free: `g << 3`. Taking it: one compare-exchange to `g | BUSY` (the taker owns the
//!   record), the record written, then a store of `g | HELD`.
//! - held: `g | HELD`. The permit's generation names exactly this value.
//! - renewing: `g | HELD | BUSY`, set by [`Ledger::renew_each`] (one compare-exchange from
//!   held), which then owns the record: it moves the lease and writes the new bucket, and sets
//!   the state back to held (compare-exchange).
//! - handed over: `g | HELD | BUSY | PENDING`: the holder gave the permit back while it was
//!   being renewed. The renewer then releases it (in the renewed bucket) and frees the entry.
//! - given back: from held, the holder takes the entry as a renewer would (compare-exchange to
//!   `g | HELD | BUSY`), reads the record's bucket and frees the entry (`(g + 1) << 3`).
//!
//! Whoever holds `BUSY` owns the record, so a release always gives back the bucket the permit
//! is counted in now, never the one it was taken in, and a renewal never moves a permit that
//! has been released. A stale copy finds another value and gives nothing back.
//!
//! A generation handed out is `tag << 49 | (entry + 1) << 32 | value`: `tag` (never 0) names
//! the ledger, so a permit of another engine names no entry of this one.
//!
//! Invariant: the engine releases a permit in its table only after [`Ledger::give_back`]
//! returned a bucket for it (or the renewal it was handed over to releases it), so each taken
//! permit is released at most once. The entries live in this process's memory: a permit is
//! given back, and renewed, by the process that took it (nginx releases and renews in the
//! worker that admitted the request).
//!
//! Bounded work: taking an entry probes at most [`PROBES`] entries from a per-thread cursor.
//! When all of them are held (more than [`ENTRIES`] permits held at once, or an unlucky run),
//! the permit is untracked ([`UNTRACKED`]): it is released unconditionally, and never renewed.

use std::cell::Cell;

#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::atomic::{
    AtomicUsize,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64};

/// Entries per ledger: permits one process can hold at once and still have copies detected
/// and leases renewed.
#[cfg(not(loom))]
pub const ENTRIES: usize = 1 << 16;
#[cfg(loom)]
pub const ENTRIES: usize = 2;
/// Entries examined for one permit before it goes untracked.
const PROBES: usize = 64;
/// The generation of an untracked permit.
pub const UNTRACKED: u64 = 0;
/// Where a generation's ledger tag starts (above the entry number + 1, which needs 17 bits).
const TAG_SHIFT: u32 = 49;
const _: () = assert!((ENTRIES as u64) < 1 << (TAG_SHIFT - 32));

const HELD: u32 = 1;
const BUSY: u32 = 2;
const PENDING: u32 = 4;
/// One generation step.
const STEP: u32 = 8;

thread_local! {
    /// Where this thread looks for a free entry next (`usize::MAX`: not yet placed).
    static CURSOR: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// What renewing a held permit needs: recorded when it is taken, its bucket kept current by
/// renewals. `tag` is the holder's (the engine: which limit, and whether a queue place); 0
/// means nothing to renew (a deferred charge, a low-level zone's permit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub tag: u32,
    pub key_hash: u64,
    pub bucket: u64,
}

/// The held permits of one engine. Empty (nothing allocated) for policies without
/// concurrency limits.
pub struct Ledger {
    states: Box<[AtomicU32]>,
    /// Per entry: `tag`, `key_hash`, `bucket` (written only by the owner of `BUSY`).
    records: Box<[AtomicU64]>,
    /// This ledger's own tag, shifted into place (1..2^15 ledgers apart from another).
    ledger_tag: u64,
}

impl Ledger {
    /// A ledger of [`ENTRIES`] entries when `needed`, else an empty one. The entries come
    /// zeroed from the allocator (pages are touched only when used).
    pub fn new(needed: bool) -> Ledger {
        let n = if needed { ENTRIES } else { 0 };
        #[cfg(not(loom))]
        let (states, records) = (
            crate::region::alloc::zeroed_u32(n),
            crate::region::alloc::zeroed_u64(3 * n),
        );
        #[cfg(loom)]
        let (states, records) = (
            (0..n).map(|_| AtomicU32::new(0)).collect(),
            (0..3 * n).map(|_| AtomicU64::new(0)).collect(),
        );
        // Ledgers made one after another have different tags (the tag wraps after 32767).
        static NEXT_TAG: AtomicUsize = AtomicUsize::new(0);
        let tag = (NEXT_TAG.fetch_add(1, AcqRel) % ((1 << (64 - TAG_SHIFT)) - 1) + 1) as u64;
        Ledger {
            states,
            records,
            ledger_tag: tag << TAG_SHIFT,
        }
    }

    /// Marks a new permit held, recording `held`; its generation (never [`UNTRACKED`] unless
    /// the ledger is empty or no free entry was found within [`PROBES`]).
    #[inline]
    pub fn take(&self, held: Held) -> u64 {
        let n = self.states.len();
        if n == 0 {
            return UNTRACKED;
        }
        // Under loom every model run starts from entry 0 (a cursor kept across runs would make
        // the model nondeterministic).
        let start = CURSOR.with(|c| match c.get() {
            _ if cfg!(loom) => 0,
            usize::MAX => {
                // Threads start far apart, so they rarely probe the same entries.
                static NEXT: AtomicUsize = AtomicUsize::new(0);
                NEXT.fetch_add(ENTRIES / 16 + 1, AcqRel)
            }
            s => s,
        });
        for i in 0..PROBES.min(n) {
            let index = (start + i) % n;
            let e = &self.states[index];
            let v = e.load(Acquire);
            if v & (HELD | BUSY) == 0 && e.compare_exchange(v, v | BUSY, Acquire, Relaxed).is_ok() {
                self.write(index, held);
                e.store(v | HELD, Release);
                CURSOR.with(|c| c.set(index + 1));
                return self.ledger_tag | ((index as u64 + 1) << 32) | u64::from(v | HELD);
            }
        }
        // A run of held entries (long requests taken one after another): look elsewhere next.
        CURSOR.with(|c| c.set(start.wrapping_add(PROBES)));
        UNTRACKED
    }

    /// Whether the permit of `generation` is still held (not given back yet).
    #[inline]
    pub fn is_held(&self, generation: u64) -> bool {
        generation == UNTRACKED
            || self
                .entry(generation)
                .is_some_and(|(_, e, v)| e.load(Acquire) & !BUSY == v)
    }

    /// Marks the permit of `generation` given back. The bucket to release it in: the one it
    /// is counted in now (`bucket`, the holder's own record, for an untracked permit). `None`
    /// when there is nothing to release: a stale or forged generation, or a permit being
    /// renewed right now, which the renewal releases.
    #[inline]
    pub fn give_back(&self, generation: u64, bucket: u64) -> Option<u64> {
        if generation == UNTRACKED {
            return Some(bucket);
        }
        let (index, e, v) = self.entry(generation)?;
        loop {
            // From held, own the record like a renewer; from renewing, hand it over.
            let (from, to) = match e.load(Acquire) {
                s if s == v => (v, v | BUSY),
                s if s == v | BUSY => (s, s | PENDING),
                _ => return None,
            };
            if e.compare_exchange(from, to, Acquire, Relaxed).is_ok() {
                if from != v {
                    return None;
                }
                let bucket = self.records[3 * index + 2].load(Relaxed);
                e.store(next_free(v), Release);
                return Some(bucket);
            }
            // A renewal started or ended meanwhile: look again.
        }
    }

    /// Renews every held entry with a nonzero tag: `renew` gets its record and answers its
    /// new bucket (the same one when nothing moved). A permit given back meanwhile is then
    /// released by `release`, with its new bucket. Returns how many buckets moved. Work:
    /// O([`ENTRIES`]) loads, plus two compare-exchanges per held entry.
    pub fn renew_each(
        &self,
        mut renew: impl FnMut(Held) -> u64,
        mut release: impl FnMut(Held),
    ) -> usize {
        let mut moved = 0;
        for (index, e) in self.states.iter().enumerate() {
            // The tag read after seeing `v` is that permit's: a later one is written only
            // after the state moved on from `v`, and then the claim fails. So an entry with
            // nothing to renew (a deferred charge) is never claimed, nor handed over here.
            let v = e.load(Acquire);
            if v & (HELD | BUSY) != HELD
                || self.records[3 * index].load(Relaxed) == 0
                || e.compare_exchange(v, v | BUSY, Acquire, Relaxed).is_err()
            {
                continue;
            }
            let mut held = self.read(index);
            let bucket = renew(held);
            if bucket != held.bucket {
                held.bucket = bucket;
                self.records[3 * index + 2].store(bucket, Relaxed);
                moved += 1;
            }
            if e.compare_exchange(v | BUSY, v, Release, Relaxed).is_err() {
                // Given back while renewed (PENDING): release it here, in its new bucket.
                release(held);
                e.store(next_free(v), Release);
            }
        }
        moved
    }

    /// How many entries are held now (a scan, for tests and the status).
    pub fn held(&self) -> usize {
        self.states
            .iter()
            .filter(|e| e.load(Relaxed) & HELD != 0)
            .count()
    }

    fn write(&self, index: usize, held: Held) {
        let r = &self.records[3 * index..3 * index + 3];
        r[0].store(u64::from(held.tag), Relaxed);
        r[1].store(held.key_hash, Relaxed);
        r[2].store(held.bucket, Relaxed);
    }

    fn read(&self, index: usize) -> Held {
        let r = &self.records[3 * index..3 * index + 3];
        Held {
            tag: r[0].load(Relaxed) as u32,
            key_hash: r[1].load(Relaxed),
            bucket: r[2].load(Relaxed),
        }
    }

    /// Whether `generation` is one this ledger hands out (held or not): false for
    /// [`UNTRACKED`], another ledger's and forged ones.
    #[inline]
    pub fn issued(&self, generation: u64) -> bool {
        self.entry(generation).is_some()
    }

    /// The entry a generation names and the state it has while that permit is held.
    fn entry(&self, generation: u64) -> Option<(usize, &AtomicU32, u32)> {
        (generation >> TAG_SHIFT << TAG_SHIFT == self.ledger_tag).then_some(())?;
        let number = (generation & ((1 << TAG_SHIFT) - 1)) >> 32;
        let index = usize::try_from(number).ok()?.checked_sub(1)?;
        let v = generation as u32;
        (v & (HELD | BUSY | PENDING) == HELD).then_some(())?;
        Some((index, self.states.get(index)?, v))
    }
}

/// The free state after held state `v`: the next generation.
fn next_free(v: u32) -> u32 {
    (v & !(STEP - 1)).wrapping_add(STEP)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const H: Held = Held {
        tag: 1,
        key_hash: 7,
        bucket: 3,
    };

    #[test]
    fn a_permit_is_given_back_once() {
        let l = Ledger::new(true);
        let g = l.take(H);
        assert_ne!(g, UNTRACKED);
        assert!(l.is_held(g));
        assert_eq!(l.give_back(g, 0), Some(3));
        assert!(!l.is_held(g));
        assert_eq!(l.give_back(g, 0), None, "a stale copy gives nothing back");
        // The entry is reused with a new generation; the old one stays stale.
        let mut again = l.take(H);
        while again >> 32 != g >> 32 {
            assert!(l.give_back(again, 0).is_some());
            again = l.take(H);
        }
        assert_ne!(again, g);
        assert_eq!(l.give_back(g, 0), None);
        assert!(l.give_back(again, 0).is_some());
    }

    #[test]
    fn forged_generations_give_nothing_back() {
        let l = Ledger::new(true);
        for g in [
            1u64 << 32,
            (ENTRIES as u64 + 1) << 32 | 1,
            u64::MAX,
            1,
            1 << 32 | 3,
        ] {
            assert_eq!(l.give_back(g, 0), None, "{g:#x}");
        }
        assert_eq!(Ledger::new(false).give_back(UNTRACKED, 9), Some(9));
        assert_eq!(Ledger::new(false).take(H), UNTRACKED);
    }

    #[test]
    fn a_release_gives_back_the_renewed_bucket() {
        let l = Ledger::new(true);
        let g = l.take(H);
        let charge = l.take(Held::default());
        assert_eq!(l.renew_each(|h| h.bucket + 1, |_| unreachable!()), 1);
        assert_eq!(l.give_back(g, 3), Some(4));
        assert_eq!(l.give_back(charge, 0), Some(0));
        assert_eq!(l.renew_each(|_| unreachable!(), |_| unreachable!()), 0);
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn a_give_back_during_a_renewal_is_released_by_the_renewal() {
        let l = Ledger::new(true);
        let g = l.take(H);
        let mut released = Vec::new();
        let moved = l.renew_each(
            |h| {
                // The holder gives the permit back while it is being renewed.
                assert_eq!(l.give_back(g, 3), None);
                assert_eq!(l.give_back(g, 3), None, "a copy is still stale");
                h.bucket + 2
            },
            |h| released.push(h.bucket),
        );
        assert_eq!((moved, released), (1, vec![5]));
        assert!(!l.is_held(g));
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn a_run_of_held_entries_does_not_stall_a_thread() {
        let l = Ledger::new(true);
        let held: Vec<u64> = (0..PROBES).map(|_| l.take(H)).collect();
        assert!(held.iter().all(|&g| g != UNTRACKED));
        // Wrap this thread's cursor back onto the run: the next take moves past it.
        let first = ((held[0] & ((1 << TAG_SHIFT) - 1)) >> 32) as usize - 1;
        CURSOR.with(|c| c.set(first));
        assert_eq!(l.take(H), UNTRACKED, "the run is full");
        assert_ne!(l.take(H), UNTRACKED, "the next take looks past it");
    }

    #[test]
    fn another_ledgers_generations_name_nothing() {
        let (a, b) = (Ledger::new(true), Ledger::new(true));
        let (ga, gb) = (a.take(H), b.take(H));
        assert!(a.issued(ga) && b.issued(gb));
        assert!(!a.issued(gb) && !b.issued(ga) && !a.issued(UNTRACKED));
        // Even with the same entry and value, the tag tells them apart.
        let same = ga & !(u64::MAX << TAG_SHIFT) | (gb >> TAG_SHIFT << TAG_SHIFT);
        assert!(a.give_back(same, 0).is_none() && a.is_held(ga));
        assert!(a.give_back(ga, 0).is_some() && b.give_back(gb, 0).is_some());
    }
}
