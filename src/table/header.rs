//! The region header: identity and layout (written once at creation), then counters.
//!
//! Region layout, all offsets from the region start (position-independent, no pointers):
//! `[0, 128)` identity words, `[128, 1152)` 16 counter stripes of one cache line each (see
//! [`crate::region::stripes`]), `[1152, 1152 + 16·capacity)` slots. The exact sliding log
//! (`super::log`) uses the same header under its own magic.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[cfg(not(loom))]
use crate::region::attach::{self, Mismatch};
use crate::region::header::{magic, Ident};
use crate::region::stripes::{self as owner, STRIPES};
#[cfg(not(loom))]
use crate::region::{Fresh, Region, RegionError};

/// "WEIRTBL" + layout version byte.
pub(crate) const MAGIC: u64 = magic(b"WEIRTBL", 3);
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
    /// The thread that writes this stripe (see [`crate::region::stripes`]); 0 = none yet.
    pub owner: AtomicU64,
    pub reserved: AtomicU64,
}

pub(crate) const HEADER_BYTES: usize = std::mem::size_of::<Header>();
const _: () = assert!(HEADER_BYTES == 1152);
const _: () = assert!(std::mem::offset_of!(Header, leader) == 96);
const _: () = assert!(std::mem::offset_of!(Header, region_len) == REGION_LEN * 8);
const _: () = assert!(std::mem::offset_of!(Header, capacity) == CAPACITY * 8);
const _: () = assert!(std::mem::offset_of!(Header, schema) == SCHEMA * 8);

/// Word indexes of the identity words (see [`Header::word`]).
const VERSION: usize = 1;
const REGION_LEN: usize = 2;
const CAPACITY: usize = 3;
const SCHEMA: usize = 9;

/// The identity of a table-like format: the slot table (`MAGIC`, whose version word is
/// checked too) or the exact sliding log (its magic's version byte only).
pub(crate) struct TableIdent {
    pub magic: u64,
    pub versioned: bool,
    pub len: usize,
    pub capacity: usize,
    pub schema: u64,
}

/// How a table-like region is opened.
#[cfg(not(loom))]
#[derive(Clone, Copy)]
pub(crate) enum Open {
    /// Attach; refused when the region holds no table.
    Attach,
    /// Attach, or create with this clock base when the region holds no table.
    CreateOrAttach(Fresh, u64),
    /// Create with this clock base, whatever the region holds.
    Format(Fresh, u64),
}

impl TableIdent {
    /// Opens the table whose header `h` starts `region`; returns whether its state was kept.
    #[cfg(not(loom))]
    pub fn open(&self, region: &Region, h: &Header, how: Open) -> Result<bool, RegionError> {
        let word = |i| h.word(i);
        self.with(|ident| match how {
            Open::Attach => ident.check(word).map(|()| true),
            Open::CreateOrAttach(fresh, clock_base) => {
                let fill = || h.fill(super::random_seed(), clock_base);
                attach::create_or_attach(region, word, ident, Mismatch::Refuse, fresh, fill)
            }
            Open::Format(fresh, clock_base) => {
                let fill = || h.fill(super::random_seed(), clock_base);
                attach::format(region, word, ident, fresh, fill);
                Ok(false)
            }
        })
    }

    /// Runs `f` on the identity words this table must hold.
    pub fn with<R>(&self, f: impl FnOnce(&Ident) -> R) -> R {
        let size = [
            (REGION_LEN, self.len as u64),
            (CAPACITY, self.capacity as u64),
        ];
        let schema = [(SCHEMA, self.schema)];
        f(&Ident {
            magic: self.magic,
            version: self.versioned.then_some((VERSION, LAYOUT_VERSION)),
            size: &size,
            schema: &schema,
        })
    }
}

impl Header {
    /// Identity word `i` (see [`TableIdent`]); the seed and clock base are not identity.
    pub fn word(&self, i: usize) -> &AtomicU64 {
        match i {
            0 => &self.magic,
            VERSION => &self.version,
            REGION_LEN => &self.region_len,
            CAPACITY => &self.capacity,
            SCHEMA => &self.schema,
            _ => unreachable!("table header word {i} is not an identity word"),
        }
    }

    /// Writes the words a new table starts with besides its identity (the version word even
    /// where it is not checked: the log's regions have always carried it).
    pub fn fill(&self, seed: [u64; 4], clock_base: u64) {
        self.version.store(LAYOUT_VERSION, Relaxed);
        for (s, v) in self.seed.iter().zip(seed) {
            s.store(v, Relaxed);
        }
        self.clock_base.store(clock_base, Relaxed);
    }

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
