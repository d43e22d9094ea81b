//! The region header: identity and layout (written once at creation), then counters.
//!
//! Region layout, all offsets from the region start (position-independent, no pointers):
//! `[0, 128)` identity words, `[128, 1152)` 16 counter stripes of one cache line each (see
//! [`super::owner`]), `[1152, 1152 + 16·capacity)` slots.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::owner::{self, STRIPES};

/// "WEIRTBL" + layout version byte.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"WEIRTBL\x03");
/// Bumped whenever the meaning of any byte in the region changes (3: stripe owner words).
pub const LAYOUT_VERSION: u64 = 3;

#[repr(C, align(64))]
pub(crate) struct Header {
    pub magic: AtomicU64,
    pub version: AtomicU64,
    pub region_len: AtomicU64,
    pub capacity: AtomicU64,
    pub seed: [AtomicU64; 4],
    pub clock_base: AtomicU64,
    pub schema: AtomicU64,
    pub longest_probe: AtomicU64,
    /// The GCRA emission interval (ns) the states were written with, 0 = not recorded (a
    /// region of another algorithm, or from a build before this word: it was reserved, zero,
    /// so the layout version is unchanged). See [`super::rescale`].
    pub gcra_interval: AtomicU64,
    /// Syncer election (offset 96, 16-byte aligned): `owner (high 64) | heartbeat (low 64)`,
    /// changed only by one 16-byte compare-exchange; all-zero = no leader. Was reserved (zero)
    /// before, so older regions read as "no leader" and the layout version is unchanged.
    pub leader: portable_atomic::AtomicU128,
    /// Kept zero; reserved for later features without a layout change.
    pub reserved_tail: [AtomicU64; 2],
    pub stripes: [Stripe; STRIPES],
}

/// Counters, striped so that threads on different cores rarely share a cache line.
#[repr(C, align(64))]
#[derive(Default)]
pub(crate) struct Stripe {
    pub inserts: AtomicU64,
    pub evicted_expired: AtomicU64,
    pub evicted_active: AtomicU64,
    pub passed: AtomicU64,
    pub delayed: AtomicU64,
    pub rejected: AtomicU64,
    /// The thread that writes this stripe (see [`super::owner`]); 0 = none yet.
    pub owner: AtomicU64,
    pub reserved: AtomicU64,
}

pub(crate) const HEADER_BYTES: usize = std::mem::size_of::<Header>();
const _: () = assert!(HEADER_BYTES == 1152);
const _: () = assert!(std::mem::offset_of!(Header, leader) == 96);

impl Header {
    /// Adds one to a counter, `field` of this thread's stripe.
    #[inline]
    pub fn add(&self, field: impl Fn(&Stripe) -> &AtomicU64) {
        // `% STRIPES`: no bounds check.
        owner::add(
            |k| &self.stripes[k % STRIPES].owner,
            |k| field(&self.stripes[k % STRIPES]),
        );
    }

    /// Counts an insert that evicted a state: expired (an absent key's equal) or still active.
    pub fn count_eviction(&self, expired: bool) {
        self.add(|s| &s.inserts);
        self.add(|s| {
            if expired {
                &s.evicted_expired
            } else {
                &s.evicted_active
            }
        });
    }

    pub fn sum(&self, field: impl Fn(&Stripe) -> &AtomicU64) -> u64 {
        self.stripes.iter().map(|s| field(s).load(Relaxed)).sum()
    }

    /// Raises `longest_probe` to `len` (a plain load first: the common case writes nothing).
    #[inline]
    pub fn note_probe(&self, len: u64) {
        if len > self.longest_probe.load(Relaxed) {
            self.longest_probe.fetch_max(len, Relaxed);
        }
    }
}

#[cfg(loom)]
pub(crate) fn new_boxed() -> Box<Header> {
    // SAFETY: every field is an AtomicU64 (or an array of them), for which all-zero bytes are
    // a valid value.
    unsafe { Box::new(std::mem::zeroed()) }
}
