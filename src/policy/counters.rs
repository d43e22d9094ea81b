//! The engine's counters, in process memory or in a region shared by processes (so that every
//! nginx worker adds to, and `weir_status` reads, the same numbers).
//!
//! Every request adds to them, so they are striped like the tables' counters: a thread adds
//! to the stripe it owns, without a locked instruction, or else to the shared stripe (see
//! `table::owner`), and readers sum the stripes. One shared cache line written by every core
//! on every request costs each request the line's transfer between cores (measured with two
//! threads in docs/PERFORMANCE.md).
//!
//! Layout (all little-endian u64, offsets in words): `[0]` magic, `[1]` number of limits,
//! `[2]` fingerprint of the limit names, `[3..8]` reserved, then [`STRIPES`] stripes, each of
//! its owner word, [`EngineCounters`], and [`LimitCounters`] (6 words) per limit in policy
//! order, padded to whole 64-byte lines.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::table::{add_to_stripe, STRIPES};

const MAGIC: u64 = u64::from_le_bytes(*b"WEIRCNT3");
const HEADER_WORDS: usize = 8;
/// A stripe's first word: its owner.
const OWNER_WORDS: usize = 1;
const TOTAL_WORDS: usize = 4;
const LIMIT_WORDS: usize = 6;
const LINE_WORDS: usize = 8;

/// One stripe's counters of one limit.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct LimitCounters {
    pub passed: AtomicU64,
    pub delayed: AtomicU64,
    pub rejected: AtomicU64,
    pub queued: AtomicU64,
    pub dry_run_delayed: AtomicU64,
    pub dry_run_rejected: AtomicU64,
}

/// One stripe's engine-wide counters.
#[repr(C)]
#[derive(Debug, Default)]
pub(crate) struct EngineCounters {
    pub requests: AtomicU64,
    pub exempt: AtomicU64,
    pub unmatched: AtomicU64,
    pub bad_target: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<LimitCounters>() == LIMIT_WORDS * 8);
const _: () = assert!(std::mem::size_of::<EngineCounters>() == TOTAL_WORDS * 8);

/// A limit's request counts by verdict (a sum over the stripes, read without a lock: counts
/// added meanwhile may or may not show).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LimitCounts {
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
    /// Requests that waited in a concurrency limit's queue.
    pub queued: u64,
    pub dry_run_delayed: u64,
    pub dry_run_rejected: u64,
}

/// Engine-wide request counts (a sum over the stripes, as [`LimitCounts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounts {
    pub requests: u64,
    pub exempt: u64,
    pub unmatched: u64,
    pub bad_target: u64,
}

/// The counter block of one engine.
pub struct Counters {
    /// The block's first word.
    words: NonNull<AtomicU64>,
    limits: usize,
    /// Words per stripe: `stripe_words(limits)`.
    stride: usize,
    _owned: Option<Box<[AtomicU64]>>,
}

// SAFETY: only atomics are reached through `words`, which stays valid for the handle's life
// (owned, or the caller's contract on `attach`).
unsafe impl Send for Counters {}
unsafe impl Sync for Counters {}

/// Words per stripe for `limits` limits: whole cache lines.
fn stripe_words(limits: usize) -> usize {
    (OWNER_WORDS + TOTAL_WORDS + LIMIT_WORDS * limits).div_ceil(LINE_WORDS) * LINE_WORDS
}

impl Counters {
    /// Bytes a block for `limits` limits takes.
    pub fn bytes_for(limits: usize) -> usize {
        (HEADER_WORDS + STRIPES * stripe_words(limits)) * 8
    }

    /// A block in this process's memory (its stripes on their own cache lines).
    pub fn new(limits: usize) -> Counters {
        let words = Self::bytes_for(limits) / 8;
        let owned: Box<[AtomicU64]> = (0..words + LINE_WORDS).map(|_| AtomicU64::new(0)).collect();
        let skip = owned.as_ptr().align_offset(LINE_WORDS * 8).min(LINE_WORDS);
        let start = NonNull::from(&owned[skip]);
        Counters {
            words: start,
            limits,
            stride: stripe_words(limits),
            _owned: Some(owned),
        }
    }

    /// Attaches to a block in a caller's region, keeping its counts when it was made for the
    /// same limits (same count and `fingerprint`) and this layout, and starting from zero
    /// otherwise.
    ///
    /// # Safety
    /// `ptr` must be 8-byte aligned and valid for `len` bytes for the handle's life; when the
    /// block is (re)initialised, no other process may be using it (nginx: the master's zone
    /// init, before workers start).
    pub unsafe fn attach(
        ptr: *mut u8,
        len: usize,
        limits: usize,
        fingerprint: u64,
    ) -> Result<Counters, String> {
        let need = Self::bytes_for(limits);
        if ptr.is_null() || (ptr as usize) % 8 != 0 {
            return Err("counters region must be non-NULL and 8-byte aligned".into());
        }
        if len < need {
            return Err(format!("counters region of {len} bytes, needs {need}"));
        }
        let words = NonNull::new_unchecked(ptr.cast::<AtomicU64>());
        let c = Counters {
            words,
            limits,
            stride: stripe_words(limits),
            _owned: None,
        };
        let same = c.word(0).load(Relaxed) == MAGIC
            && c.word(1).load(Relaxed) == limits as u64
            && c.word(2).load(Relaxed) == fingerprint;
        if !same {
            for i in 1..need / 8 {
                c.word(i).store(0, Relaxed);
            }
            c.word(1).store(limits as u64, Relaxed);
            c.word(2).store(fingerprint, Relaxed);
            c.word(0).store(MAGIC, Relaxed);
        }
        Ok(c)
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < Self::bytes_for(self.limits) / 8);
        // SAFETY: `i` is within the block (see `bytes_for`).
        unsafe { &*self.words.as_ptr().add(i) }
    }

    /// Stripe `s`'s first word.
    #[inline]
    fn stripe(&self, s: usize) -> *const AtomicU64 {
        debug_assert!(s < STRIPES);
        // SAFETY: stripe `s < STRIPES` lies within the block (see `bytes_for`).
        unsafe { self.words.as_ptr().add(HEADER_WORDS + s * self.stride) }
    }

    /// Stripe `s`'s engine-wide counters.
    #[inline]
    fn totals_in(&self, s: usize) -> &EngineCounters {
        // SAFETY: `EngineCounters` is `repr(C)` of 4 atomics, the words after the owner's.
        unsafe { &*self.stripe(s).add(OWNER_WORDS).cast::<EngineCounters>() }
    }

    /// Stripe `s`'s counters of limit `i` (panics when `i` is out of range).
    #[inline]
    fn limit_in(&self, s: usize, i: usize) -> &LimitCounters {
        assert!(i < self.limits, "limit {i} of {}", self.limits);
        // SAFETY: `LimitCounters` is `repr(C)` of 6 atomics; limit `i`'s are in the stripe.
        unsafe {
            &*self
                .stripe(s)
                .add(OWNER_WORDS + TOTAL_WORDS + LIMIT_WORDS * i)
                .cast::<LimitCounters>()
        }
    }

    /// Stripe `s`'s owner word (see `table::owner`).
    #[inline]
    fn owner_in(&self, s: usize) -> &AtomicU64 {
        // SAFETY: a stripe's first word is its owner word.
        unsafe { &*self.stripe(s) }
    }

    /// Adds one to an engine-wide counter, in this thread's stripe.
    #[inline]
    pub(crate) fn add_total(&self, field: impl Fn(&EngineCounters) -> &AtomicU64) {
        add_to_stripe(|s| self.owner_in(s), |s| field(self.totals_in(s)));
    }

    /// Adds one to a counter of limit `i`, in this thread's stripe.
    #[inline]
    pub(crate) fn add_limit(&self, i: usize, field: impl Fn(&LimitCounters) -> &AtomicU64) {
        add_to_stripe(|s| self.owner_in(s), |s| field(self.limit_in(s, i)));
    }

    /// Engine-wide counts.
    pub fn totals(&self) -> EngineCounts {
        let mut t = EngineCounts::default();
        for s in 0..STRIPES {
            let c = self.totals_in(s);
            t.requests += c.requests.load(Relaxed);
            t.exempt += c.exempt.load(Relaxed);
            t.unmatched += c.unmatched.load(Relaxed);
            t.bad_target += c.bad_target.load(Relaxed);
        }
        t
    }

    /// Counts of limit `i` (panics when `i` is out of range).
    pub fn limit(&self, i: usize) -> LimitCounts {
        let mut t = LimitCounts::default();
        for s in 0..STRIPES {
            let c = self.limit_in(s, i);
            t.passed += c.passed.load(Relaxed);
            t.delayed += c.delayed.load(Relaxed);
            t.rejected += c.rejected.load(Relaxed);
            t.queued += c.queued.load(Relaxed);
            t.dry_run_delayed += c.dry_run_delayed.load(Relaxed);
            t.dry_run_rejected += c.dry_run_rejected.load(Relaxed);
        }
        t
    }
}

/// A stable fingerprint of a policy's limit names (FNV-1a), so a block is reused only by the
/// same limits in the same order.
pub fn fingerprint<'a>(names: impl Iterator<Item = &'a str>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for name in names {
        for b in name.bytes().chain([0]) {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_block_keeps_counts_for_the_same_limits_only() {
        let mut region = vec![0u64; Counters::bytes_for(2) / 8];
        let ptr = region.as_mut_ptr().cast::<u8>();
        let len = region.len() * 8;
        let fp = fingerprint(["a", "b"].into_iter());
        let c = unsafe { Counters::attach(ptr, len, 2, fp) }.unwrap();
        for _ in 0..3 {
            c.add_limit(1, |l| &l.rejected);
        }
        for _ in 0..5 {
            c.add_total(|t| &t.requests);
        }
        let again = unsafe { Counters::attach(ptr, len, 2, fp) }.unwrap();
        assert_eq!(again.limit(1).rejected, 3);
        assert_eq!(again.limit(0), LimitCounts::default());
        assert_eq!(again.totals().requests, 5);
        let other =
            unsafe { Counters::attach(ptr, len, 2, fingerprint(["a", "c"].into_iter())) }.unwrap();
        assert_eq!(other.limit(1).rejected, 0);
        assert!(unsafe { Counters::attach(ptr, 8, 2, fp) }.is_err());
    }

    #[test]
    fn threads_beyond_the_stripes_lose_no_count() {
        let c = Counters::new(3);
        std::thread::scope(|s| {
            for t in 0..(2 * STRIPES + 3) {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.add_total(|x| &x.requests);
                        c.add_limit(t % 3, |l| &l.passed);
                        c.add_limit(2, |l| &l.dry_run_rejected);
                    }
                });
            }
        });
        let threads = (2 * STRIPES + 3) as u64;
        assert_eq!(c.totals().requests, 1000 * threads);
        assert_eq!(c.totals().exempt, 0);
        let per = |i: usize| (0..threads).filter(|t| *t as usize % 3 == i).count() as u64;
        for i in 0..3 {
            assert_eq!(c.limit(i).passed, 1000 * per(i), "limit {i}");
        }
        assert_eq!(c.limit(2).dry_run_rejected, 1000 * threads);
        assert_eq!(c.limit(1).dry_run_rejected, 0);
    }
}
