//! The engine's counters, in process memory or in a region shared by processes (so that every
//! nginx worker adds to, and `weir_status` reads, the same numbers).
//!
//! Layout (all little-endian u64, offsets in words): `[0]` magic, `[1]` number of limits,
//! `[2]` fingerprint of the limit names, `[3]` reserved, `[4..8]` [`EngineCounters`], then
//! [`LimitCounters`] (6 words) per limit, in policy order.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const MAGIC: u64 = u64::from_le_bytes(*b"WEIRCNT1");
const HEADER_WORDS: usize = 4;
const TOTAL_WORDS: usize = 4;
const LIMIT_WORDS: usize = 6;

/// Per-limit counters.
#[repr(C)]
#[derive(Debug, Default)]
pub struct LimitCounters {
    pub passed: AtomicU64,
    pub delayed: AtomicU64,
    pub rejected: AtomicU64,
    pub queued: AtomicU64,
    pub dry_run_delayed: AtomicU64,
    pub dry_run_rejected: AtomicU64,
}

/// Engine-wide counters.
#[repr(C)]
#[derive(Debug, Default)]
pub struct EngineCounters {
    pub requests: AtomicU64,
    pub exempt: AtomicU64,
    pub unmatched: AtomicU64,
    pub bad_target: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<LimitCounters>() == LIMIT_WORDS * 8);
const _: () = assert!(std::mem::size_of::<EngineCounters>() == TOTAL_WORDS * 8);

/// The counter block of one engine.
pub struct Counters {
    words: NonNull<AtomicU64>,
    limits: usize,
    _owned: Option<Box<[AtomicU64]>>,
}

// SAFETY: only atomics are reached through `words`, which stays valid for the handle's life
// (owned, or the caller's contract on `attach`).
unsafe impl Send for Counters {}
unsafe impl Sync for Counters {}

impl Counters {
    /// Bytes a block for `limits` limits takes.
    pub fn bytes_for(limits: usize) -> usize {
        (HEADER_WORDS + TOTAL_WORDS + LIMIT_WORDS * limits) * 8
    }

    /// A block in this process's memory.
    pub fn new(limits: usize) -> Counters {
        let owned: Box<[AtomicU64]> = (0..Self::bytes_for(limits) / 8)
            .map(|_| AtomicU64::new(0))
            .collect();
        let words = NonNull::from(&owned[0]);
        Counters {
            words,
            limits,
            _owned: Some(owned),
        }
    }

    /// Attaches to a block in a caller's region, keeping its counts when it was made for the
    /// same limits (same count and `fingerprint`), and starting from zero otherwise.
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

    /// Engine-wide counters.
    pub fn totals(&self) -> &EngineCounters {
        // SAFETY: `EngineCounters` is `repr(C)` of 4 atomics, at words 4..8.
        unsafe {
            &*self
                .words
                .as_ptr()
                .add(HEADER_WORDS)
                .cast::<EngineCounters>()
        }
    }

    /// Counters of limit `i` (panics when `i` is out of range).
    pub fn limit(&self, i: usize) -> &LimitCounters {
        assert!(i < self.limits, "limit {i} of {}", self.limits);
        // SAFETY: `LimitCounters` is `repr(C)` of 6 atomics; limit `i`'s are in the block.
        unsafe {
            &*self
                .words
                .as_ptr()
                .add(HEADER_WORDS + TOTAL_WORDS + LIMIT_WORDS * i)
                .cast::<LimitCounters>()
        }
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
        c.limit(1).rejected.fetch_add(3, Relaxed);
        c.totals().requests.fetch_add(5, Relaxed);
        let again = unsafe { Counters::attach(ptr, len, 2, fp) }.unwrap();
        assert_eq!(again.limit(1).rejected.load(Relaxed), 3);
        assert_eq!(again.totals().requests.load(Relaxed), 5);
        let other =
            unsafe { Counters::attach(ptr, len, 2, fingerprint(["a", "c"].into_iter())) }.unwrap();
        assert_eq!(other.limit(1).rejected.load(Relaxed), 0);
        assert!(unsafe { Counters::attach(ptr, 8, 2, fp) }.is_err());
    }
}
