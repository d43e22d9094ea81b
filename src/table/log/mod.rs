//! An exact sliding log per key: admits a request iff fewer than `events` requests of the same
//! key were admitted in the last `window` (the semantics of caddy-ratelimit's ring of
//! timestamps), in fixed memory, lock-free, in process memory or a shared region.
//!
//! Region layout (position-independent, offsets from the region start): the table header of
//! [`super::header`] (1152 bytes; magic `"WEIRLOG"` + version, capacity = records, schema =
//! [`SlidingLog::schema`]), then `capacity` records of `stride` bytes:
//!
//! ```text
//! record = hdr: 16 bytes  tag (high 64) | head (low 64), changed only by 16-byte CAS
//!          entries: N × 8 bytes  seq (24 bits) | ts (40 bits), changed only by 8-byte CAS
//!          (padding to a multiple of 16 bytes)
//! ```
//!
//! `head` counts the key's admissions (positions); admission number `p` lives in entry
//! `p mod N` with `seq = p mod 2^24` and `ts = milliseconds since the clock base + 1` (ts 0 =
//! no event: never written, or refunded). The last N positions `[head − N, head)` are the log.
//! Protocol and invariants: docs/ARCHITECTURE.md, "The exact sliding log".

#[cfg(not(loom))]
use super::header::Open;
use super::header::{Header, Stripe, TableIdent, HEADER_BYTES};
use super::slot::{pack, tag, SlotWord, EMPTY};
#[cfg(not(loom))]
use super::REGION_ALIGN;
use super::{TableError, TableStats};
use crate::limiter::{Decision, ParamError, Remaining, Verdict};
use crate::region::header::magic;
use crate::region::owner::Backing;
#[cfg(not(loom))]
use crate::region::{Fresh, Region};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

#[cfg(loom)]
use loom::sync::atomic::AtomicU64 as EntryWord;
#[cfg(not(loom))]
use std::sync::atomic::AtomicU64 as EntryWord;

mod admit;

/// "WEIRLOG" + layout version byte.
const LOG_MAGIC: u64 = magic(b"WEIRLOG", 2);
/// Largest `events` of a sliding_log zone (every key stores `events` 8-byte entries).
pub const MAX_LOG_EVENTS: u64 = 4096;
/// Records examined for one key: its home record and the next ones, wrapping.
pub const LOG_PROBE_WINDOW: usize = 8;
/// Bytes per record header (tag | head).
const RECORD_HDR: usize = 16;
const SEQ_BITS: u32 = 24;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const TS_BITS: u32 = 40;
const TS_MASK: u64 = (1 << TS_BITS) - 1;
/// Entry sequence distances at or beyond this are "ahead of the head" (mod 2^24).
const AHEAD: u64 = 1 << (SEQ_BITS - 1);
const NS_PER_MS: u64 = 1_000_000;
/// Longest window: timestamps are 40-bit milliseconds.
const MAX_WINDOW_MS: u64 = 1 << 36;

/// Parameters of an exact sliding log: at most `events` admissions per key in any `window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingLog {
    events: u64,
    window_ms: u64,
}

impl SlidingLog {
    /// `events` in 1..=4096; `window_ns` at least 1 ms (kept in whole milliseconds, truncated).
    pub fn new(events: u64, window_ns: u64) -> Result<SlidingLog, ParamError> {
        if events == 0 || events > MAX_LOG_EVENTS {
            return Err(ParamError(format!(
                "a sliding_log zone keeps 1 to {MAX_LOG_EVENTS} events per key, got {events}"
            )));
        }
        let window_ms = window_ns / NS_PER_MS;
        if window_ms == 0 || window_ms > MAX_WINDOW_MS {
            return Err(ParamError(format!(
                "a sliding_log zone's window must be between 1 ms and {MAX_WINDOW_MS} ms, got {window_ns} ns"
            )));
        }
        Ok(SlidingLog { events, window_ms })
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn window_ns(&self) -> u64 {
        self.window_ms * NS_PER_MS
    }

    /// The region schema: `'L' (8 bits) | events (13 bits) | window in ms (43 bits)`.
    pub fn schema(&self) -> u64 {
        (0x4c << 56) | (self.events << 43) | self.window_ms
    }

    /// Bytes per key.
    pub fn record_bytes(&self) -> usize {
        RECORD_HDR + (self.events as usize).next_multiple_of(2) * 8
    }
}

#[inline]
fn entry(seq: u64, ts: u64) -> u64 {
    ((seq & SEQ_MASK) << TS_BITS) | (ts & TS_MASK)
}

#[inline]
fn seq_of(e: u64) -> u64 {
    e >> TS_BITS
}

#[inline]
fn ts_of(e: u64) -> u64 {
    e & TS_MASK
}

#[inline]
fn head(w: u128) -> u64 {
    w as u64
}

/// How far position `h` is past sequence number `seq` (mod 2^24).
#[inline]
fn dist(h: u64, seq: u64) -> u64 {
    h.wrapping_sub(seq) & SEQ_MASK
}

/// Loom's model of a log table: header, record headers and entries, boxed.
type Model = (Box<Header>, Box<[SlotWord]>, Box<[EntryWord]>);

/// A handle on an exact-sliding-log table (one zone). `&LogTable` is shared between threads;
/// each process attaches its own handle to a shared region.
pub struct LogTable {
    header: NonNull<Header>,
    #[cfg_attr(loom, allow(dead_code))]
    records: NonNull<u8>,
    capacity: usize,
    #[cfg_attr(loom, allow(dead_code))]
    stride: usize,
    n: u64,
    log: SlidingLog,
    hasher: ahash::RandomState,
    clock_base: u64,
    backing: Backing<Model>,
}

// SAFETY: the region is accessed only through atomics and outlives the handle (as `Table`).
unsafe impl Send for LogTable {}
// SAFETY: as `Send`.
unsafe impl Sync for LogTable {}

impl LogTable {
    /// Records (keys) that fit in `bytes` (0 when too small for one).
    pub fn capacity_for(log: &SlidingLog, bytes: usize) -> usize {
        bytes.saturating_sub(HEADER_BYTES) / log.record_bytes()
    }

    /// Bytes a region needs for `capacity` keys (`usize::MAX` when that does not fit).
    pub fn bytes_for(log: &SlidingLog, capacity: usize) -> usize {
        capacity
            .max(1)
            .saturating_mul(log.record_bytes())
            .saturating_add(HEADER_BYTES)
    }

    /// A table in this process's memory within a budget of `bytes`.
    #[cfg(not(loom))]
    pub fn new(bytes: usize, log: SlidingLog, clock_base: u64) -> Result<LogTable, TableError> {
        let minimum = LogTable::bytes_for(&log, 1);
        if bytes < minimum {
            return Err(TableError::TooSmall { bytes, minimum });
        }
        // As the slot table's (`Table::new`): zero pages, touched only when a key lands there.
        let map = std::sync::Arc::new(crate::region::alloc::Mapping::new(bytes)?);
        let (t, _) = LogTable::create_or_attach_in(map.region(), log, clock_base, Fresh::Zeroed)?;
        Ok(t.sharing(Backing::Mapped(map)))
    }

    /// Under loom: boxed model objects with `capacity_for(bytes)` records.
    #[cfg(loom)]
    pub fn new(bytes: usize, log: SlidingLog, clock_base: u64) -> Result<LogTable, TableError> {
        let capacity = LogTable::capacity_for(&log, bytes).max(1);
        let header = super::header::new_boxed();
        let hdrs: Box<[SlotWord]> = (0..capacity).map(|_| SlotWord::default()).collect();
        let entries: Box<[EntryWord]> = (0..capacity * log.events as usize)
            .map(|_| EntryWord::new(0))
            .collect();
        let id = ident(&log, bytes, capacity);
        id.with(|ident| ident.write(|i| header.word(i), || header.fill([1, 2, 3, 4], clock_base)));
        let h = NonNull::from(&*header);
        let backing = Backing::Model(std::sync::Arc::new((header, hdrs, entries)));
        Ok(LogTable::from_parts(
            h,
            NonNull::dangling(),
            capacity,
            log,
            backing,
        ))
    }

    /// Formats `len` bytes at `ptr` as an empty log table with a fresh random seed.
    ///
    /// # Safety
    /// As [`super::Table::create`].
    #[cfg(not(loom))]
    pub unsafe fn create(
        ptr: *mut u8,
        len: usize,
        log: SlidingLog,
        clock_base: u64,
    ) -> Result<LogTable, TableError> {
        LogTable::format_in(
            Region::new(ptr, len, REGION_ALIGN)?,
            log,
            clock_base,
            Fresh::Unknown,
        )
    }

    /// Attaches to a region formatted by [`LogTable::create`] with the same size and
    /// parameters, keeping its state.
    ///
    /// # Safety
    /// As [`super::Table::attach`].
    #[cfg(not(loom))]
    pub unsafe fn attach(
        ptr: *mut u8,
        len: usize,
        log: SlidingLog,
    ) -> Result<LogTable, TableError> {
        let region = Region::new(ptr, len, REGION_ALIGN)?;
        LogTable::open(region, log, Open::Attach).map(|(t, _)| t)
    }

    /// Attaches when the region holds this log table, creates one otherwise; returns whether
    /// the state was kept.
    ///
    /// # Safety
    /// As [`LogTable::create`].
    #[cfg(not(loom))]
    pub unsafe fn create_or_attach(
        ptr: *mut u8,
        len: usize,
        log: SlidingLog,
        clock_base: u64,
    ) -> Result<(LogTable, bool), TableError> {
        let region = Region::new(ptr, len, REGION_ALIGN)?;
        LogTable::create_or_attach_in(region, log, clock_base, Fresh::Unknown)
    }

    /// Attaches to the log table in `region`, or formats one there when it holds none;
    /// returns whether the state was kept. Another version, size or parameters are refused.
    #[cfg(not(loom))]
    pub fn create_or_attach_in(
        region: Region,
        log: SlidingLog,
        clock_base: u64,
        fresh: Fresh,
    ) -> Result<(LogTable, bool), TableError> {
        LogTable::open(region, log, Open::CreateOrAttach(fresh, clock_base))
    }

    #[cfg(not(loom))]
    fn format_in(
        region: Region,
        log: SlidingLog,
        clock_base: u64,
        fresh: Fresh,
    ) -> Result<LogTable, TableError> {
        LogTable::open(region, log, Open::Format(fresh, clock_base)).map(|(t, _)| t)
    }

    #[cfg(not(loom))]
    fn open(region: Region, log: SlidingLog, how: Open) -> Result<(LogTable, bool), TableError> {
        let (h, capacity) = log_header(&region, &log)?;
        let kept = ident(&log, region.len(), capacity).open(&region, h, how)?;
        Ok((LogTable::in_region(&region, capacity, log), kept))
    }

    /// A handle on the log table formatted in `region` (a caller's, until [`Self::sharing`]).
    #[cfg(not(loom))]
    fn in_region(region: &Region, capacity: usize, log: SlidingLog) -> LogTable {
        let header = NonNull::new(region.as_ptr().cast::<Header>()).expect("a region is not NULL");
        // SAFETY: `log_header` checked the region holds the header and `capacity` records.
        let records = unsafe { NonNull::new_unchecked(region.as_ptr().add(HEADER_BYTES)) };
        LogTable::from_parts(header, records, capacity, log, Backing::Borrowed)
    }

    /// This handle, its memory freed by `backing` (a mapping of this process).
    #[cfg_attr(loom, allow(dead_code))]
    pub(super) fn sharing(mut self, backing: Backing<Model>) -> LogTable {
        self.backing = backing;
        self
    }

    fn from_parts(
        header: NonNull<Header>,
        records: NonNull<u8>,
        capacity: usize,
        log: SlidingLog,
        backing: Backing<Model>,
    ) -> LogTable {
        // SAFETY: `header` points at an initialised header.
        let h = unsafe { header.as_ref() };
        let seed = h.seed.each_ref().map(|s| s.load(Relaxed));
        LogTable {
            header,
            records,
            capacity,
            stride: log.record_bytes(),
            n: log.events,
            log,
            hasher: ahash::RandomState::with_seeds(seed[0], seed[1], seed[2], seed[3]),
            clock_base: h.clock_base.load(Relaxed),
            backing,
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn log(&self) -> SlidingLog {
        self.log
    }

    pub fn clock_base(&self) -> u64 {
        self.clock_base
    }

    /// The table's keyed 64-bit hash of `key` (never 0).
    #[inline]
    pub fn key_hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key).max(1)
    }

    #[inline]
    fn header(&self) -> &Header {
        // SAFETY: valid for the handle's life.
        unsafe { self.header.as_ref() }
    }

    #[cfg(not(loom))]
    #[inline]
    fn hdr(&self, r: usize) -> &SlotWord {
        debug_assert!(r < self.capacity);
        // SAFETY: r < capacity; the record starts 16-byte aligned (the region is 64-aligned,
        // the header 1152 bytes, the stride a multiple of 16).
        unsafe {
            &*self
                .records
                .as_ptr()
                .add(r * self.stride)
                .cast::<SlotWord>()
        }
    }

    #[cfg(not(loom))]
    #[inline]
    fn ent(&self, r: usize, p: u64) -> &EntryWord {
        let i = (p % self.n) as usize;
        // SAFETY: r < capacity, i < N: inside record r.
        unsafe {
            &*self
                .records
                .as_ptr()
                .add(r * self.stride + RECORD_HDR + i * 8)
                .cast::<EntryWord>()
        }
    }

    #[cfg(loom)]
    fn hdr(&self, r: usize) -> &SlotWord {
        match &self.backing {
            Backing::Model(m) => &m.1[r],
            _ => unreachable!(),
        }
    }

    #[cfg(loom)]
    fn ent(&self, r: usize, p: u64) -> &EntryWord {
        match &self.backing {
            Backing::Model(m) => &m.2[r * self.n as usize + (p % self.n) as usize],
            _ => unreachable!(),
        }
    }

    /// Is entry `e` an event still inside the window at `now` (ns since the clock base)?
    #[inline]
    fn live(&self, e: u64, now: u64) -> bool {
        let ts = ts_of(e);
        ts != 0 && now < (ts - 1 + self.log.window_ms) * NS_PER_MS
    }

    /// Checks and, when admitted, records one event of `key_hash` at `now` (absolute ns on the
    /// table's clock). Never allocates, never blocks.
    pub fn check(&self, key_hash: u64, now: u64) -> Verdict {
        let now = now.saturating_sub(self.clock_base);
        let v = self.admit(key_hash, now);
        self.header().add(|s: &Stripe| match v.decision {
            Decision::Reject => &s.rejected,
            _ => &s.passed,
        });
        v
    }

    /// What [`LogTable::check`] would answer now, recording and counting nothing.
    pub fn predict(&self, key_hash: u64, now: u64) -> Verdict {
        let now = now.saturating_sub(self.clock_base);
        let Some((r, w)) = self.find(key_hash, now, false) else {
            let v = self.passed(None, 0, now);
            return Verdict {
                remaining: Remaining::units(v.remaining.get() - 1),
                reset_ns: self.log.window_ns(),
                ..v
            };
        };
        let h = head(w);
        let e = self.ent(r, h).load(Acquire);
        let d = dist(h, seq_of(e));
        if d == self.n % (1 << SEQ_BITS) && self.live(e, now) {
            return self.rejected(e, now);
        }
        // As if this request were recorded too.
        let v = self.passed(Some(r), h, now);
        Verdict {
            remaining: Remaining::units(v.remaining.get().saturating_sub(1)),
            reset_ns: self.log.window_ns(),
            ..v
        }
    }

    /// Takes back an event recorded by [`LogTable::check`] at `now` (a later limit refused the
    /// request). Exact when no other event of the key was recorded since (the head is rolled
    /// back); otherwise the newest event at `now` is turned into a hole (ts 0), which counts as
    /// no event — conservative only in that the admission rule still looks at position
    /// `head − N` until the hole leaves the log.
    pub fn refund(&self, key_hash: u64, now: u64) {
        let now = now.saturating_sub(self.clock_base);
        let t = (now / NS_PER_MS + 1) & TS_MASK;
        for _ in 0..8 {
            let Some((r, w)) = self.find(key_hash, now, false) else {
                return;
            };
            let h = head(w);
            let hdr = self.hdr(r);
            if dist(h, seq_of(self.ent(r, h).load(Acquire))) == 0 {
                // An admission at `h` is recorded but the head not advanced: help, then retry.
                let _ = hdr.compare_exchange(w, pack(key_hash, h + 1), AcqRel, Acquire);
                continue;
            }
            let newest = h.wrapping_sub(1);
            let slot = self.ent(r, newest);
            let e = slot.load(Acquire);
            if seq_of(e) == newest & SEQ_MASK && ts_of(e) == t {
                if slot
                    .compare_exchange(e, entry(newest.wrapping_sub(self.n), 0), AcqRel, Acquire)
                    .is_ok()
                {
                    // Roll the head back when nobody advanced since; otherwise the position
                    // stays a hole.
                    let _ = hdr.compare_exchange(w, pack(key_hash, newest), AcqRel, Acquire);
                    return;
                }
                continue;
            }
            // Not the newest: the newest event at `now` further back becomes a hole.
            for k in 2..=self.n {
                let p = h.wrapping_sub(k);
                let slot = self.ent(r, p);
                let e = slot.load(Acquire);
                if seq_of(e) != p & SEQ_MASK || (ts_of(e) != 0 && ts_of(e) < t) {
                    return;
                }
                if ts_of(e) == t {
                    if slot
                        .compare_exchange(e, entry(p, 0), AcqRel, Acquire)
                        .is_ok()
                    {
                        return;
                    }
                    break;
                }
            }
        }
    }

    /// Forgets every event of `key_hash` (each becomes a hole, which counts as no event), as
    /// if the key had never been seen; whether it had a live event at `now`. For operators
    /// (`weir key --reset`), not the request path.
    pub fn forget(&self, key_hash: u64, now: u64) -> bool {
        let now = now.saturating_sub(self.clock_base);
        let Some((r, w)) = self.find(key_hash, now, false) else {
            return false;
        };
        let h = head(w);
        let mut live = false;
        for k in 0..=self.n {
            let p = h.wrapping_sub(k);
            let slot = self.ent(r, p);
            let e = slot.load(Acquire);
            if seq_of(e) == p & SEQ_MASK && ts_of(e) != 0 {
                live |= self.live(e, now);
                let _ = slot.compare_exchange(e, entry(p, 0), AcqRel, Acquire);
            }
        }
        live
    }

    pub fn stats(&self) -> TableStats {
        let h = self.header();
        let inserts = h.sum(|s| &s.inserts);
        let evicted_expired = h.sum(|s| &s.evicted_expired);
        let evicted_active = h.sum(|s| &s.evicted_active);
        TableStats {
            capacity: self.capacity as u64,
            occupancy: inserts - evicted_expired - evicted_active,
            inserts,
            evicted_expired,
            evicted_active,
            longest_probe: h.longest_probe.load(Relaxed),
            passed: h.sum(|s| &s.passed),
            delayed: 0,
            rejected: h.sum(|s| &s.rejected),
        }
    }
}

/// The identity a log table of `len` bytes and `capacity` records holds (the log's regions
/// carry the table's version word but are checked by their magic's version byte only).
fn ident(log: &SlidingLog, len: usize, capacity: usize) -> TableIdent {
    TableIdent {
        magic: LOG_MAGIC,
        versioned: false,
        len,
        capacity,
        schema: log.schema(),
    }
}

/// The header of the log table in `region` and the records that fit after it.
#[cfg(not(loom))]
fn log_header<'r>(region: &'r Region, log: &SlidingLog) -> Result<(&'r Header, usize), TableError> {
    let capacity = LogTable::capacity_for(log, region.len());
    super::header_in(region, capacity, LogTable::bytes_for(log, 1))
}
