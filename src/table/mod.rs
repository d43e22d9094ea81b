//! A fixed-capacity, lock-free map from key hash to a 64-bit limiter state.
//!
//! The table lives in one contiguous region — process memory, or memory a host shares between
//! processes (an nginx shared-memory zone, a `MAP_SHARED` mapping) — whose layout is described
//! in [`header`]. Every slot is one 16-byte word changed only by compare-exchange (see
//! [`slot`]); there are no locks, so a process killed at any instruction never leaves the
//! table wedged. See docs/ARCHITECTURE.md for the protocols and their invariants.

mod header;
mod log;
mod probe;
mod rescale;
mod slot;

pub use crate::region::{RegionError as TableError, REGION_ALIGN};
pub use header::LAYOUT_VERSION;
/// The stripe-owner protocol, for its loom model (tests/table/loom.rs).
#[cfg(loom)]
#[doc(hidden)]
pub mod owner_model {
    pub use crate::region::stripes::{Me, SHARED, STRIPES};
}
pub use log::{LogTable, SlidingLog, LOG_PROBE_WINDOW, MAX_LOG_EVENTS};

use crate::limiter::{Concurrency, Decision, Permit, RateStep, Verdict};
use crate::region::owner::Backing;
#[cfg(not(loom))]
use crate::region::{Fresh, Region};
#[cfg(not(loom))]
use header::Open;
use header::{Header, Stripe, TableIdent, HEADER_BYTES, MAGIC};
use slot::{pack, SlotWord, EMPTY};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

/// Bytes per slot (one key).
pub const SLOT_BYTES: usize = 16;
/// Slots per bucket: one 64-byte cache line. A key hashes to a bucket, not to a slot, so that
/// finding it costs one cache line and a branch-free comparison of four tags.
pub const BUCKET_SLOTS: usize = 4;
/// Slots examined for one key: its home bucket and the next buckets, wrapping.
pub const PROBE_WINDOW: usize = 16;
/// Fewest slots a table may have (two buckets); capacities are whole buckets.
pub const MIN_CAPACITY: usize = 8;

/// A snapshot of a table's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    pub capacity: u64,
    /// Slots holding a key (slots are never emptied, only reused).
    pub occupancy: u64,
    /// Keys stored (into an empty slot or by eviction).
    pub inserts: u64,
    /// Evictions of states that equalled an absent key (lossless).
    pub evicted_expired: u64,
    /// Evictions of states still limiting something.
    pub evicted_active: u64,
    /// Longest probe distance seen (0 = home slot).
    pub longest_probe: u64,
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
}

/// Loom's model of a table: its header and slots, boxed.
type Model = (Box<Header>, Box<[SlotWord]>);

/// A handle on a table. Cheap to share between threads (`&Table` is enough); each process
/// attaches its own handle to a shared region.
pub struct Table {
    header: NonNull<Header>,
    slots: NonNull<SlotWord>,
    capacity: usize,
    /// `capacity / BUCKET_SLOTS`.
    buckets: usize,
    /// Buckets examined for one key: `PROBE_WINDOW / BUCKET_SLOTS`, at most `buckets`.
    window: usize,
    hasher: ahash::RandomState,
    clock_base: u64,
    /// The CPU has AVX, so an aligned 16-byte `vmovdqa` is an atomic load (see
    /// [`atomic_load_x4`]).
    #[cfg_attr(any(loom, not(target_arch = "x86_64")), allow(dead_code))]
    avx: bool,
    backing: Backing<Model>,
}

// SAFETY: every byte the handle points at is accessed only through atomics, and the region
// outlives the handle (a mapping or model it shares ownership of, or the caller's contract on
// `Region::new`).
unsafe impl Send for Table {}
// SAFETY: as `Send`.
unsafe impl Sync for Table {}

impl Table {
    /// Slots that fit in a region of `bytes` (0 when it is too small for a table).
    pub fn capacity_for(bytes: usize) -> usize {
        let cap = bytes.saturating_sub(HEADER_BYTES) / SLOT_BYTES / BUCKET_SLOTS * BUCKET_SLOTS;
        if cap < MIN_CAPACITY {
            0
        } else {
            cap
        }
    }

    /// Bytes a region needs for `capacity` slots.
    pub fn bytes_for(capacity: usize) -> usize {
        HEADER_BYTES + capacity.max(MIN_CAPACITY).next_multiple_of(BUCKET_SLOTS) * SLOT_BYTES
    }

    /// A table in this process's memory, within a budget of `bytes`. `schema` names what the
    /// states mean (see [`Table::attach`]); `clock_base` is subtracted from every `now`.
    #[cfg(not(loom))]
    pub fn new(bytes: usize, schema: u64, clock_base: u64) -> Result<Table, TableError> {
        let minimum = Table::bytes_for(MIN_CAPACITY);
        if bytes < minimum {
            return Err(TableError::TooSmall { bytes, minimum });
        }
        let map = std::sync::Arc::new(crate::region::alloc::Mapping::new(bytes)?);
        let (mut table, _) =
            Table::create_or_attach_in(map.region(), schema, clock_base, Fresh::Zeroed)?;
        table.backing = Backing::Mapped(map);
        Ok(table)
    }

    /// Under loom, tables are boxed model objects.
    #[cfg(loom)]
    pub fn new(bytes: usize, schema: u64, clock_base: u64) -> Result<Table, TableError> {
        let capacity = Table::capacity_for(bytes);
        let header = header::new_boxed();
        let slots: Box<[SlotWord]> = (0..capacity).map(|_| SlotWord::default()).collect();
        let id = TableIdent {
            magic: MAGIC,
            versioned: true,
            len: bytes,
            capacity,
            schema,
        };
        id.with(|ident| ident.write(|i| header.word(i), || header.fill([1, 2, 3, 4], clock_base)));
        let (h, s) = (NonNull::from(&*header), NonNull::from(&slots[0]));
        let backing = Backing::Model(std::sync::Arc::new((header, slots)));
        Ok(Table::from_parts(h, s, capacity, backing))
    }

    /// Formats `len` bytes at `ptr` as an empty table with a fresh random seed.
    ///
    /// # Safety
    /// As [`Region::new`]: `ptr` must be valid for reads and writes of `len` bytes for as long
    /// as any handle on it lives, and no other handle may use the region while it is created.
    #[cfg(not(loom))]
    pub unsafe fn create(
        ptr: *mut u8,
        len: usize,
        schema: u64,
        clock_base: u64,
    ) -> Result<Table, TableError> {
        Table::format_in(
            Region::new(ptr, len, REGION_ALIGN)?,
            schema,
            clock_base,
            Fresh::Unknown,
        )
    }

    /// Attaches to a region formatted by [`Table::create`], keeping its state. Refused when the
    /// region is not a table of this layout version, its size changed, or it was created with
    /// another `schema`.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for as long as the handle lives.
    #[cfg(not(loom))]
    pub unsafe fn attach(ptr: *mut u8, len: usize, schema: u64) -> Result<Table, TableError> {
        Table::attach_in(Region::new(ptr, len, REGION_ALIGN)?, schema)
    }

    /// Attaches when the region already holds a table, creates one otherwise (an nginx zone
    /// on first start vs. on reload). Returns whether the state was kept.
    ///
    /// # Safety
    /// As [`Table::create`].
    #[cfg(not(loom))]
    pub unsafe fn create_or_attach(
        ptr: *mut u8,
        len: usize,
        schema: u64,
        clock_base: u64,
    ) -> Result<(Table, bool), TableError> {
        let region = Region::new(ptr, len, REGION_ALIGN)?;
        Table::create_or_attach_in(region, schema, clock_base, Fresh::Unknown)
    }

    /// Attaches to the table in `region`, or formats one there when it holds none (`fresh`
    /// says whether it is known to be zero); returns whether the state was kept. A table of
    /// another layout version, size or schema is refused.
    #[cfg(not(loom))]
    pub fn create_or_attach_in(
        region: Region,
        schema: u64,
        clock_base: u64,
        fresh: Fresh,
    ) -> Result<(Table, bool), TableError> {
        Table::open(region, schema, Open::CreateOrAttach(fresh, clock_base))
    }

    /// Attaches to the table in `region` (refused as [`Table::create_or_attach_in`], and when
    /// the region holds no table).
    #[cfg(not(loom))]
    pub fn attach_in(region: Region, schema: u64) -> Result<Table, TableError> {
        Table::open(region, schema, Open::Attach).map(|(t, _)| t)
    }

    /// Formats `region` as an empty table, whatever it held.
    #[cfg(not(loom))]
    pub(crate) fn format_in(
        region: Region,
        schema: u64,
        clock_base: u64,
        fresh: Fresh,
    ) -> Result<Table, TableError> {
        Table::open(region, schema, Open::Format(fresh, clock_base)).map(|(t, _)| t)
    }

    #[cfg(not(loom))]
    fn open(region: Region, schema: u64, how: Open) -> Result<(Table, bool), TableError> {
        let (h, capacity) = table_header(&region)?;
        let len = region.len();
        let id = TableIdent {
            magic: MAGIC,
            versioned: true,
            len,
            capacity,
            schema,
        };
        let kept = id.open(&region, h, how)?;
        Ok((Table::in_region(&region, capacity), kept))
    }

    /// A handle on the table formatted in `region` (a caller's: [`Backing::Borrowed`]).
    #[cfg(not(loom))]
    fn in_region(region: &Region, capacity: usize) -> Table {
        let header = NonNull::new(region.as_ptr().cast::<Header>()).expect("a region is not NULL");
        // SAFETY: `table_header` checked the region holds the header and `capacity` slots.
        let slots = unsafe { NonNull::new_unchecked(region.as_ptr().add(HEADER_BYTES).cast()) };
        Table::from_parts(header, slots, capacity, Backing::Borrowed)
    }

    fn from_parts(
        header: NonNull<Header>,
        slots: NonNull<SlotWord>,
        capacity: usize,
        backing: Backing<Model>,
    ) -> Table {
        // SAFETY: `header` points at an initialised header (callers above).
        let h = unsafe { header.as_ref() };
        let seed = h.seed.each_ref().map(|s| s.load(Relaxed));
        Table {
            header,
            slots,
            capacity,
            buckets: capacity / BUCKET_SLOTS,
            window: (PROBE_WINDOW / BUCKET_SLOTS).min(capacity / BUCKET_SLOTS),
            hasher: ahash::RandomState::with_seeds(seed[0], seed[1], seed[2], seed[3]),
            clock_base: h.clock_base.load(Relaxed),
            // Plain loads would bypass portable-atomic's lock where it takes one.
            #[cfg(all(target_arch = "x86_64", not(loom)))]
            avx: std::arch::is_x86_feature_detected!("avx") && lock_free_128(),
            #[cfg(not(all(target_arch = "x86_64", not(loom))))]
            avx: false,
            backing,
        }
    }

    #[inline]
    fn header(&self) -> &Header {
        // SAFETY: valid for the handle's life (see `unsafe impl Send`).
        unsafe { self.header.as_ref() }
    }

    #[inline]
    fn slot(&self, index: usize) -> &SlotWord {
        debug_assert!(index < self.capacity);
        // SAFETY: index < capacity, and the region holds `capacity` slots after the header.
        unsafe { &*self.slots.as_ptr().add(index) }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The time base every `now` is measured from (stored in the region).
    pub fn clock_base(&self) -> u64 {
        self.clock_base
    }

    /// The length of the table's region in bytes (recorded at creation).
    #[cfg_attr(loom, allow(dead_code))]
    pub(crate) fn region_len(&self) -> usize {
        self.header().region_len.load(Relaxed) as usize
    }

    /// The exact sliding log of a sliding_log zone, kept in this table's slot area (the
    /// slots are never used there, so the area is all zero until the log is created), created
    /// or attached with its state like the header. It shares this table's backing, so it keeps
    /// an in-process table's memory alive.
    #[cfg(not(loom))]
    pub(crate) fn log_in_slots(&self, log: SlidingLog) -> Result<LogTable, TableError> {
        let len = self.region_len();
        // SAFETY: the table's own region (`len` recorded at creation, checked on attach),
        // valid as long as `self.backing`, which the log handle shares below.
        let mut region = unsafe { Region::new(self.header.as_ptr().cast(), len, REGION_ALIGN) }?;
        if let Backing::Mapped(_) = self.backing {
            // This process's own mapping (`Table::new`), as the table's region was.
            region = region.process_private();
        }
        let skip = Table::bytes_for(0) - MIN_CAPACITY * SLOT_BYTES;
        let area = region.part(skip, len - skip);
        let (t, _) = LogTable::create_or_attach_in(area, log, self.clock_base, Fresh::Zeroed)?;
        Ok(t.sharing(self.backing.share()))
    }

    /// The table's keyed 64-bit hash of `key` (seeded per table; never 0).
    #[inline]
    pub fn key_hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key).max(1)
    }

    /// A hasher seeded like [`Table::key_hash`], for keys hashed as a sequence of writes; its
    /// `finish().max(1)` is a key hash for this table.
    pub(crate) fn key_hasher(&self) -> ahash::AHasher {
        use std::hash::BuildHasher;
        self.hasher.build_hasher()
    }

    /// Runs a rate algorithm for `key_hash` at `now` (absolute ns on the table's clock) and
    /// counts the verdict.
    #[inline]
    pub fn check<A: RateStep>(&self, alg: &A, key_hash: u64, cost: u64, now: u64) -> Verdict {
        let now = now.saturating_sub(self.clock_base);
        let verdict = self.modify(
            key_hash,
            |s| alg.residual(s, now),
            |s| alg.step(s, now, cost),
            true,
        );
        self.count(verdict.decision);
        verdict
    }

    /// What [`Table::check`] would answer now, without charging or counting anything.
    #[inline]
    pub fn predict<A: RateStep>(&self, alg: &A, key_hash: u64, cost: u64, now: u64) -> Verdict {
        let now = now.saturating_sub(self.clock_base);
        alg.step(self.peek(key_hash).unwrap_or(0), now, cost).1
    }

    /// Takes back a charge made by [`Table::check`] at `now` (all-or-nothing across limits).
    #[inline]
    pub fn refund<A: RateStep>(&self, alg: &A, key_hash: u64, cost: u64, now: u64) {
        let now = now.saturating_sub(self.clock_base);
        self.modify(
            key_hash,
            |s| alg.residual(s, now),
            |s| (alg.refund(s, now, cost), ()),
            false,
        );
    }

    /// Runs `step(state, now)` on `key_hash`'s state with the update protocol of
    /// [`Table::check`] (`now` made relative to the table's clock, as `residual` also sees it),
    /// for states that are no rate algorithm's (the engine's bans). The result is that of the
    /// step whose write took effect (or of the last read, when it wrote nothing). Without
    /// `insert`, an absent key stays absent.
    #[inline]
    pub(crate) fn update<R>(
        &self,
        key_hash: u64,
        now: u64,
        residual: impl Fn(u64, u64) -> u64,
        step: impl Fn(u64, u64) -> (u64, R),
        insert: bool,
    ) -> R {
        let now = now.saturating_sub(self.clock_base);
        self.modify(key_hash, |s| residual(s, now), |s| step(s, now), insert)
    }

    /// Takes a concurrency permit for `key_hash`, or refuses when `max` are in flight.
    #[inline]
    pub fn acquire(&self, c: &Concurrency, key_hash: u64, now: u64) -> (Verdict, Option<Permit>) {
        self.acquire_units(c, key_hash, 1, now)
    }

    /// Takes a permit worth `units` slots (a limit's `cost`); release it with
    /// [`Table::release_units`] and the same `units`.
    // Always inlined: out of line, its result comes back through memory, written 8 bytes at a
    // time and read back 16 at a time by the engine (a load that waits for those stores).
    #[inline(always)]
    pub fn acquire_units(
        &self,
        c: &Concurrency,
        key_hash: u64,
        units: u64,
        now: u64,
    ) -> (Verdict, Option<Permit>) {
        self.acquire_capped(c, key_hash, units, c.max(), now)
    }

    /// Gives a permit back (exactly once: it is consumed). A permit whose key was evicted or
    /// whose lease expired changes nothing.
    #[inline]
    pub fn release(&self, c: &Concurrency, permit: Permit, now: u64) {
        self.release_units(c, permit, 1, now);
    }

    /// Gives back a permit taken with [`Table::acquire_units`] (the same `units`); how many
    /// were in flight before (0 when the key is gone).
    #[inline]
    pub fn release_units(&self, c: &Concurrency, permit: Permit, units: u64, now: u64) -> u64 {
        let now = now.saturating_sub(self.clock_base);
        self.modify(
            permit.key_hash,
            |s| c.in_flight(s, now),
            |s| {
                (
                    c.release_units(s, now, permit.bucket, units),
                    c.in_flight(s, now),
                )
            },
            false,
        )
    }

    /// [`Table::acquire_units`] with the limit `max` instead of the limiter's own (a learned
    /// limit, or what a lane may fill).
    #[inline(always)]
    pub fn acquire_capped(
        &self,
        c: &Concurrency,
        key_hash: u64,
        units: u64,
        max: u64,
        now: u64,
    ) -> (Verdict, Option<Permit>) {
        let now = now.saturating_sub(self.clock_base);
        // The permit's bucket is the one the admission counted it in: the state's, when this
        // clock read trails the state's bucket (`packed::window`).
        let (verdict, bucket) = self.modify(
            key_hash,
            |s| c.in_flight(s, now),
            |s| {
                let (next, v) = c.acquire_capped(s, now, units, max);
                (next, (v, c.bucket_of(s, now)))
            },
            true,
        );
        self.count(verdict.decision);
        let permit = verdict.admitted().then_some(Permit { key_hash, bucket });
        (verdict, permit)
    }

    /// Renews a permit's lease (for requests held longer than the lease).
    pub fn renew(&self, c: &Concurrency, permit: Permit, now: u64) -> Permit {
        self.renew_units(c, permit, 1, now)
    }

    /// Renews a permit taken with [`Table::acquire_units`] (the same `units`): one
    /// compare-exchange when its bucket is the previous one, nothing otherwise.
    pub fn renew_units(&self, c: &Concurrency, permit: Permit, units: u64, now: u64) -> Permit {
        let rel = now.saturating_sub(self.clock_base);
        let key_hash = permit.key_hash;
        if c.bucket(rel).wrapping_sub(permit.bucket) != 1 {
            return permit;
        }
        let bucket = self.modify(
            key_hash,
            |s| c.in_flight(s, rel),
            |s| c.renew_units(s, rel, permit.bucket, units),
            false,
        );
        Permit { key_hash, bucket }
    }

    /// Stores `state` for `key_hash` whatever was there (inserting, or evicting the slot that
    /// ranks lowest by `alg`'s residual at `now`). For writers that own a key's state outright,
    /// such as the cluster syncer filling a table of remote counts.
    pub fn store<A: RateStep>(&self, alg: &A, key_hash: u64, state: u64, now: u64) {
        let now = now.saturating_sub(self.clock_base);
        self.modify(key_hash, |s| alg.residual(s, now), |_| (state, ()), true);
    }

    /// Calls `f(key_hash, state)` for every stored key whose state is not 0 (a snapshot per
    /// slot, no lock; keys updated meanwhile may show either state). For background scans.
    pub fn for_each(&self, mut f: impl FnMut(u64, u64)) {
        for i in 0..self.capacity {
            let w = self.slot(i).load(Acquire);
            if slot::tag(w) != EMPTY && slot::state(w) != 0 {
                f(slot::tag(w), slot::state(w));
            }
        }
    }

    /// A second handle on this table's region (for a background thread of the same
    /// process); it keeps an in-process table's memory alive as long as it lives.
    pub fn alias(&self) -> Table {
        Table::from_parts(self.header, self.slots, self.capacity, self.backing.clone())
    }

    /// Leader election through the header (e.g. one syncer among the nginx workers sharing a
    /// zone): `owner` (non-zero, unique among the contenders, e.g. a process id) becomes or
    /// stays leader and records `now` as its heartbeat when it already leads, when nobody leads,
    /// or when the leader's heartbeat is more than `stale_after` ns old (the leader died or
    /// hung). One 16-byte compare-exchange; lock-free, so a killed leader holds nothing. Call
    /// it every interval; act as leader only while it returns true. Times are on one clock
    /// (CLOCK_MONOTONIC in every process of a boot).
    pub fn try_lead(&self, owner: u64, now: u64, stale_after: u64) -> bool {
        assert!(owner != 0, "leader id 0 means no leader");
        let leader = &self.header().leader;
        let mut cur = leader.load(Acquire);
        loop {
            let (who, beat) = ((cur >> 64) as u64, cur as u64);
            let stale = now.saturating_sub(beat) > stale_after;
            if who != owner && who != 0 && !stale {
                return false;
            }
            let next = ((owner as u128) << 64) | now as u128;
            match leader.compare_exchange(cur, next, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Gives up leadership if `owner` holds it (a clean shutdown; otherwise it lapses after
    /// `stale_after`).
    pub fn resign(&self, owner: u64) {
        let leader = &self.header().leader;
        let cur = leader.load(Acquire);
        if (cur >> 64) as u64 == owner {
            let _ = leader.compare_exchange(cur, 0, AcqRel, Acquire);
        }
    }

    /// The current leader and its last heartbeat, if any.
    pub fn leader(&self) -> Option<(u64, u64)> {
        let cur = self.header().leader.load(Acquire);
        ((cur >> 64) as u64 != 0).then_some(((cur >> 64) as u64, cur as u64))
    }

    /// The state stored for `key_hash`, if any. The scan ends at the first empty slot: no
    /// key sits after one in its window (the invariant of [`Table::modify`]), so a key with
    /// no entry (an idle key, most of a sparse table) costs one bucket load.
    #[inline]
    pub fn peek(&self, key_hash: u64) -> Option<u64> {
        let home = self.home(key_hash);
        for b in 0..self.window {
            let (words, hit) = self.load_bucket_hits(self.wrap(home + b), key_hash);
            if hit != 0 {
                return Some(probe::state_at(&words, hit.trailing_zeros() as usize));
            }
            if words.iter().any(|&w| slot::tag(w) == EMPTY) {
                return None;
            }
        }
        None
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
            delayed: h.sum(|s| &s.delayed),
            rejected: h.sum(|s| &s.rejected),
        }
    }

    #[inline]
    fn count(&self, d: Decision) {
        self.header().add(|s: &Stripe| match d {
            Decision::Pass => &s.passed,
            Decision::Delay => &s.delayed,
            Decision::Reject => &s.rejected,
        });
    }
}

/// Whether a 16-byte compare-exchange is one lock-free instruction on this CPU (cmpxchg16b,
/// detected at run time unless the build enables it). Without it portable-atomic takes a lock
/// of this process: fine for a table only this process maps, never for a shared region.
#[cfg(not(loom))]
pub(crate) fn lock_free_128() -> bool {
    portable_atomic::AtomicU128::is_lock_free()
}

/// The header of the table in `region` and the slots that fit after it.
#[cfg(not(loom))]
fn table_header(region: &Region) -> Result<(&Header, usize), TableError> {
    let minimum = Table::bytes_for(MIN_CAPACITY);
    header_in(region, Table::capacity_for(region.len()), minimum)
}

/// The header of a table-like format in `region`, which holds `capacity` slots or records
/// after it (0: fewer than one, the region is under `minimum` bytes).
#[cfg(not(loom))]
fn header_in(
    region: &Region,
    capacity: usize,
    minimum: usize,
) -> Result<(&Header, usize), TableError> {
    if region.may_be_shared() && !lock_free_128() {
        return Err(TableError::NoLockFree128);
    }
    if region.as_ptr() as usize % REGION_ALIGN != 0 {
        return Err(TableError::Misaligned {
            align: REGION_ALIGN,
        });
    }
    if capacity == 0 {
        let bytes = region.len();
        return Err(TableError::TooSmall { bytes, minimum });
    }
    // SAFETY: the region is 64-byte aligned and holds a header (1152 bytes) and at least one
    // slot or record; a header of any bytes is valid (atomics only); the region outlives its
    // users (`Region::new`'s contract).
    Ok((unsafe { &*region.as_ptr().cast::<Header>() }, capacity))
}

#[cfg(not(loom))]
pub(crate) fn random_seed() -> [u64; 4] {
    let mut seed = [0u64; 4];
    let bytes = std::mem::size_of_val(&seed);
    // SAFETY: `seed` is a writable buffer of `bytes` bytes.
    let got = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), bytes, 0) };
    if got != bytes as isize {
        // Fall back to the clock and address-space layout: still unpredictable enough to
        // spread keys, though not a secret.
        let t = crate::clock::monotonic_ns();
        seed = [
            t,
            &seed as *const _ as u64,
            t.rotate_left(32),
            std::process::id() as u64,
        ];
    }
    seed
}
