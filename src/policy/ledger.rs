//! Which concurrency permits and queue places of one engine are still held, so that giving
//! one back twice (a copy of a C verdict released after the original, a forged raw permit)
//! changes nothing.
//!
//! A held permit names a ledger entry and the entry's generation. An entry is one `u32`:
//! `generation << 1 | held`. Taking a free entry sets `held` (one compare-exchange); giving
//! it back clears `held` and advances the generation (one compare-exchange from exactly the
//! value the permit recorded). A stale copy finds another value and gives nothing back.
//!
//! A generation handed out is `tag << 49 | (entry + 1) << 32 | value`: `tag` (never 0) names
//! the ledger, so a permit of another engine names no entry of this one.
//!
//! Invariant: the engine releases a permit in its table only after [`Ledger::give_back`]
//! returned true for it, so each taken permit is released at most once. The entries live in
//! this process's memory: a permit is given back by the process that took it (nginx releases
//! in the worker that admitted the request).
//!
//! Bounded work: taking an entry probes at most [`PROBES`] entries from a per-thread cursor.
//! When all of them are held (more than [`ENTRIES`] permits held at once, or an unlucky run),
//! the permit is untracked (generation 0) and is released unconditionally, as before ledgers.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::AcqRel, Ordering::Acquire};

/// Entries per ledger: permits one process can hold at once and still have copies detected.
pub const ENTRIES: usize = 1 << 16;
/// Entries examined for one permit before it goes untracked.
const PROBES: usize = 64;
/// The generation of an untracked permit.
pub const UNTRACKED: u64 = 0;
/// Where a generation's ledger tag starts (above the entry number + 1, which needs 17 bits).
const TAG_SHIFT: u32 = 49;
const _: () = assert!((ENTRIES as u64) < 1 << (TAG_SHIFT - 32));

thread_local! {
    /// Where this thread looks for a free entry next (`usize::MAX`: not yet placed).
    static CURSOR: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The held permits of one engine. Empty (nothing allocated) for policies without
/// concurrency limits.
pub struct Ledger {
    entries: Box<[AtomicU32]>,
    /// This ledger's tag, shifted into place (1..2^15 ledgers apart from another).
    tag: u64,
}

impl Ledger {
    /// A ledger of [`ENTRIES`] entries when `needed`, else an empty one. The entries come
    /// zeroed from the allocator (pages are touched only when used).
    pub fn new(needed: bool) -> Ledger {
        let entries = if needed {
            crate::region::alloc::zeroed_u32(ENTRIES)
        } else {
            Box::new([])
        };
        // Ledgers made one after another have different tags (the tag wraps after 32767).
        static NEXT_TAG: AtomicUsize = AtomicUsize::new(0);
        let tag = (NEXT_TAG.fetch_add(1, AcqRel) % ((1 << (64 - TAG_SHIFT)) - 1) + 1) as u64;
        Ledger {
            entries,
            tag: tag << TAG_SHIFT,
        }
    }

    /// Marks a new permit held; its generation (never [`UNTRACKED`] unless the ledger is
    /// empty or no free entry was found within [`PROBES`]).
    #[inline]
    pub fn take(&self) -> u64 {
        let n = self.entries.len();
        if n == 0 {
            return UNTRACKED;
        }
        let start = CURSOR.with(|c| match c.get() {
            usize::MAX => {
                // Threads start far apart, so they rarely probe the same entries.
                static NEXT: AtomicUsize = AtomicUsize::new(0);
                NEXT.fetch_add(ENTRIES / 16 + 1, AcqRel)
            }
            s => s,
        });
        for i in 0..PROBES {
            let index = (start + i) % n;
            let e = &self.entries[index];
            let v = e.load(Acquire);
            if v & 1 == 0 && e.compare_exchange(v, v | 1, AcqRel, Acquire).is_ok() {
                CURSOR.with(|c| c.set(index + 1));
                return self.tag | ((index as u64 + 1) << 32) | u64::from(v | 1);
            }
        }
        UNTRACKED
    }

    /// Whether the permit of `generation` is still held (not given back yet).
    #[inline]
    pub fn is_held(&self, generation: u64) -> bool {
        generation == UNTRACKED
            || self
                .entry(generation)
                .is_some_and(|(e, v)| e.load(Acquire) == v)
    }

    /// Marks the permit of `generation` given back. True when it was held (the caller then
    /// releases it) or untracked; false for a stale or forged generation.
    #[inline]
    pub fn give_back(&self, generation: u64) -> bool {
        if generation == UNTRACKED {
            return true;
        }
        self.entry(generation).is_some_and(|(e, v)| {
            e.compare_exchange(v, v.wrapping_add(1), AcqRel, Acquire)
                .is_ok()
        })
    }

    /// Whether `generation` is one this ledger hands out (held or not): false for
    /// [`UNTRACKED`], another ledger's and forged ones.
    #[inline]
    pub fn issued(&self, generation: u64) -> bool {
        self.entry(generation).is_some()
    }

    /// The entry a generation names and the value it has while that permit is held.
    fn entry(&self, generation: u64) -> Option<(&AtomicU32, u32)> {
        (generation >> TAG_SHIFT << TAG_SHIFT == self.tag).then_some(())?;
        let number = (generation & ((1 << TAG_SHIFT) - 1)) >> 32;
        let index = usize::try_from(number).ok()?.checked_sub(1)?;
        let v = generation as u32;
        (v & 1 == 1).then_some(())?;
        Some((self.entries.get(index)?, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permit_is_given_back_once() {
        let l = Ledger::new(true);
        let g = l.take();
        assert_ne!(g, UNTRACKED);
        assert!(l.is_held(g));
        assert!(l.give_back(g));
        assert!(!l.is_held(g));
        assert!(!l.give_back(g), "a stale copy gives nothing back");
        // The entry is reused with a new generation; the old one stays stale.
        let mut again = l.take();
        while again >> 32 != g >> 32 {
            assert!(l.give_back(again));
            again = l.take();
        }
        assert_ne!(again, g);
        assert!(!l.give_back(g));
        assert!(l.give_back(again));
    }

    #[test]
    fn forged_generations_give_nothing_back() {
        let l = Ledger::new(true);
        for g in [1u64 << 32, (ENTRIES as u64 + 1) << 32 | 1, u64::MAX, 1] {
            assert!(!l.give_back(g), "{g:#x}");
        }
        assert!(Ledger::new(false).give_back(UNTRACKED));
        assert_eq!(Ledger::new(false).take(), UNTRACKED);
    }

    #[test]
    fn another_ledgers_generations_name_nothing() {
        let (a, b) = (Ledger::new(true), Ledger::new(true));
        let (ga, gb) = (a.take(), b.take());
        assert!(a.issued(ga) && b.issued(gb));
        assert!(!a.issued(gb) && !b.issued(ga) && !a.issued(UNTRACKED));
        // Even with the same entry and value, the tag tells them apart.
        let same = ga & !(u64::MAX << TAG_SHIFT) | (gb >> TAG_SHIFT << TAG_SHIFT);
        assert!(!a.give_back(same) && a.is_held(ga));
        assert!(a.give_back(ga) && b.give_back(gb));
    }
}
