//! Zones outside a policy (nginx-style directives): limiter tables and exact sliding-log
//! tables, in process memory or a caller's region.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use weir::limiter::{Decision, Permit};
use weir::policy::ledger::{Held, Ledger};
use weir::region::{Fresh, Region, REGION_ALIGN};
use weir::table::{Table, TableError, TableStats};

use crate::evaluate::NO_PERMIT;
use crate::limiter::LimiterKind;
use crate::{bytes, fail, give, guard, take_back, weir_error, weir_limiter};
use crate::{weir_permit, WEIR_DELAY, WEIR_PASS, WEIR_REJECT};
use crate::{WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_ERR_ZONE, WEIR_OK};

/// One limiter table (an nginx-style zone), in process memory or in a caller's region.
/// Thread-safe; usable from several processes when the region is shared.
pub struct weir_zone {
    pub(crate) table: Table,
    /// The permits `weir_zone_acquire` handed out in this process and not yet released.
    pub(crate) ledger: Ledger,
}

impl weir_zone {
    fn with(table: Table) -> weir_zone {
        weir_zone {
            table,
            ledger: Ledger::new(true),
        }
    }
}

/// One low-level check (`weir_zone_check`, `weir_zone_acquire`).
#[repr(C)]
pub struct weir_check {
    /// WEIR_PASS, WEIR_DELAY or WEIR_REJECT.
    pub action: i32,
    pub wait_ns: u64,
    pub retry_after_ns: u64,
    /// Quota, remaining and time to full quota (for RateLimit headers).
    pub limit: u64,
    pub remaining: u64,
    pub reset_ns: u64,
}

/// A zone's counters.
#[repr(C)]
pub struct weir_zone_stats {
    pub capacity: u64,
    pub occupancy: u64,
    pub inserts: u64,
    pub evicted_expired: u64,
    pub evicted_active: u64,
    pub longest_probe: u64,
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
}

impl From<TableStats> for weir_zone_stats {
    fn from(s: TableStats) -> Self {
        weir_zone_stats {
            capacity: s.capacity,
            occupancy: s.occupancy,
            inserts: s.inserts,
            evicted_expired: s.evicted_expired,
            evicted_active: s.evicted_active,
            longest_probe: s.longest_probe,
            passed: s.passed,
            delayed: s.delayed,
            rejected: s.rejected,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// What both zone families share: one table type per family, created in process memory or in a
// caller's region, keyed by a hash of the caller's key.

/// A zone family's table: `weir_zone` (limiter states under a schema) or `weir_log_zone`
/// (rings of event times under a sliding log's parameters).
pub(crate) trait ZoneTable: Sized {
    /// What fixes the table's layout besides its size.
    type Params: Copy;
    fn new(bytes: usize, params: Self::Params) -> Result<Self, TableError>;
    /// Creates the table in `region` or attaches to the one there; `true` when it existed.
    fn create_or_attach(
        region: Region,
        params: Self::Params,
        clock_base: u64,
        fresh: Fresh,
    ) -> Result<(Self, bool), TableError>;
    fn stats(&self) -> TableStats;
    fn key_hash(&self, key: &[u8]) -> u64;
}

/// A zone of `bytes` in process memory; `params` gives its parameters, or why the caller's
/// were refused.
pub(crate) unsafe fn zone_new<Z: ZoneTable>(
    bytes: usize,
    params: impl FnOnce() -> Result<Z::Params, String>,
    out: *mut *mut Z,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return fail(err, WEIR_ERR_NULL, "out is NULL");
        }
        *out = ptr::null_mut();
        let params = match params() {
            Ok(p) => p,
            Err(e) => return fail(err, WEIR_ERR_INVALID, e),
        };
        match Z::new(bytes, params) {
            Ok(z) => give(out, z),
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// A zone created in, or attached to, the caller's region (`*existed`, may be NULL, says
/// which); `params` as for [`zone_new`].
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn zone_attach<Z: ZoneTable>(
    region: *mut c_void,
    len: usize,
    params: impl FnOnce() -> Result<Z::Params, String>,
    clock_base: u64,
    zeroed: bool,
    existed: *mut c_int,
    out: *mut *mut Z,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() || region.is_null() {
            return fail(err, WEIR_ERR_NULL, "region or out is NULL");
        }
        *out = ptr::null_mut();
        let params = match params() {
            Ok(p) => p,
            Err(e) => return fail(err, WEIR_ERR_INVALID, e),
        };
        // SAFETY: the caller's contract for the region (weir.h): writable for `len` bytes while
        // the handle lives, formatted before other processes use it; with `zeroed`, a region
        // without a table holds only zero bytes.
        let made = Region::new(region.cast(), len, REGION_ALIGN)
            .and_then(|r| Z::create_or_attach(r, params, clock_base, Fresh::from_zeroed(zeroed)));
        match made {
            Ok((z, kept)) => {
                if !existed.is_null() {
                    *existed = kept as c_int;
                }
                give(out, z)
            }
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// A zone's counters into `*out`.
pub(crate) unsafe fn zone_stats<Z: ZoneTable>(z: *const Z, out: *mut weir_zone_stats) -> c_int {
    guard(|| {
        let Some(z) = z.as_ref() else {
            return WEIR_ERR_NULL;
        };
        if out.is_null() {
            return WEIR_ERR_NULL;
        }
        *out = z.stats().into();
        WEIR_OK
    })
}

/// The hash of the caller's key (`key[..key_len]`) in zone `z`.
pub(crate) unsafe fn zone_key<Z: ZoneTable>(
    z: &Z,
    key: *const u8,
    key_len: usize,
) -> Result<u64, c_int> {
    bytes(key, key_len).map(|k| z.key_hash(k))
}

pub(crate) fn check_out(v: &weir::limiter::Verdict) -> weir_check {
    weir_check {
        action: match v.decision {
            Decision::Pass => WEIR_PASS,
            Decision::Delay => WEIR_DELAY,
            Decision::Reject => WEIR_REJECT,
        },
        wait_ns: v.wait_ns,
        retry_after_ns: v.retry_after_ns,
        limit: v.limit,
        remaining: v.remaining.get(),
        reset_ns: v.reset_ns,
    }
}

impl ZoneTable for weir_zone {
    type Params = u64;
    fn new(bytes: usize, schema: u64) -> Result<Self, TableError> {
        Table::new(bytes, schema, 0).map(weir_zone::with)
    }
    fn create_or_attach(
        region: Region,
        schema: u64,
        clock_base: u64,
        fresh: Fresh,
    ) -> Result<(Self, bool), TableError> {
        let made = Table::create_or_attach_in(region, schema, clock_base, fresh);
        made.map(|(t, kept)| (weir_zone::with(t), kept))
    }
    fn stats(&self) -> TableStats {
        self.table.stats()
    }
    fn key_hash(&self, key: &[u8]) -> u64 {
        self.table.key_hash(key)
    }
}

// ---------------------------------------------------------------------------------------------
// Zones and limiters (the low level that nginx-style directives use)

/// Bytes a zone needs at least.
#[no_mangle]
pub extern "C" fn weir_zone_min_bytes() -> usize {
    Table::bytes_for(weir::table::MIN_CAPACITY)
}

/// A zone of `bytes` in this process's memory.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_new(
    bytes: usize,
    schema: u64,
    out: *mut *mut weir_zone,
    err: *mut *mut weir_error,
) -> c_int {
    zone_new(bytes, || Ok(schema), out, err)
}

/// Creates a zone in the caller's region, or attaches to the one already there (keeping its
/// state) when it has the same size and schema; `*existed` (may be NULL) tells which. The region
/// must be 64-byte aligned and outlive the handle; share it between processes to share limits.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_attach(
    region: *mut c_void,
    len: usize,
    schema: u64,
    clock_base: u64,
    existed: *mut c_int,
    out: *mut *mut weir_zone,
    err: *mut *mut weir_error,
) -> c_int {
    zone_attach(
        region,
        len,
        || Ok(schema),
        clock_base,
        false,
        existed,
        out,
        err,
    )
}

/// As `weir_zone_attach`, for a region that holds only zero bytes when it holds no zone (fresh
/// shared memory: an nginx zone, an anonymous `mmap`): a new zone writes only its header, so its
/// pages are first touched when keys land in them.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_attach_zeroed(
    region: *mut c_void,
    len: usize,
    schema: u64,
    clock_base: u64,
    existed: *mut c_int,
    out: *mut *mut weir_zone,
    err: *mut *mut weir_error,
) -> c_int {
    zone_attach(
        region,
        len,
        || Ok(schema),
        clock_base,
        true,
        existed,
        out,
        err,
    )
}

/// Frees a zone handle (NULL is ignored); a caller's region is left as it is.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_free(z: *mut weir_zone) {
    take_back(z)
}

/// A zone's counters.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_get_stats(
    z: *const weir_zone,
    out: *mut weir_zone_stats,
) -> c_int {
    zone_stats(z, out)
}

/// Checks and charges `cost` for `key` in a rate zone (GCRA or sliding limiter) at `now`.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_check(
    z: *const weir_zone,
    l: *const weir_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now: u64,
    out: *mut weir_check,
) -> c_int {
    guard(|| {
        if z.is_null() || l.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        let h = match zone_key(&*z, key, key_len) {
            Ok(h) => h,
            Err(code) => return code,
        };
        let t = &(*z).table;
        let v = match &(*l).kind {
            LimiterKind::Gcra(g) => t.check(g, h, cost, now),
            LimiterKind::Sliding(s) => t.check(s, h, cost, now),
            LimiterKind::Concurrency(_) => return WEIR_ERR_INVALID,
        };
        *out = check_out(&v);
        WEIR_OK
    })
}

/// Takes back a charge `weir_zone_check` made at `now` (when a later limit rejected the
/// request: all-or-nothing across limits).
#[no_mangle]
pub unsafe extern "C" fn weir_zone_refund(
    z: *const weir_zone,
    l: *const weir_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now: u64,
) -> c_int {
    guard(|| {
        if z.is_null() || l.is_null() {
            return WEIR_ERR_NULL;
        }
        let h = match zone_key(&*z, key, key_len) {
            Ok(h) => h,
            Err(code) => return code,
        };
        let t = &(*z).table;
        match &(*l).kind {
            LimiterKind::Gcra(g) => t.refund(g, h, cost, now),
            LimiterKind::Sliding(s) => t.refund(s, h, cost, now),
            LimiterKind::Concurrency(_) => return WEIR_ERR_INVALID,
        }
        WEIR_OK
    })
}

/// Takes a concurrency permit for `key`. When admitted, `*permit` holds it (release it once
/// with `weir_zone_release`); when refused, `*permit` is empty (`limit == -1`).
#[no_mangle]
pub unsafe extern "C" fn weir_zone_acquire(
    z: *const weir_zone,
    l: *const weir_limiter,
    key: *const u8,
    key_len: usize,
    now: u64,
    out: *mut weir_check,
    permit: *mut weir_permit,
) -> c_int {
    guard(|| {
        if z.is_null() || l.is_null() || out.is_null() || permit.is_null() {
            return WEIR_ERR_NULL;
        }
        let LimiterKind::Concurrency(c) = &(*l).kind else {
            return WEIR_ERR_INVALID;
        };
        let h = match zone_key(&*z, key, key_len) {
            Ok(h) => h,
            Err(code) => return code,
        };
        let (v, p) = (*z).table.acquire(c, h, now);
        *out = check_out(&v);
        *permit = match p {
            Some(p) => {
                let (key_hash, bucket) = p.into_raw();
                weir_permit {
                    limit: 0,
                    key_hash,
                    bucket,
                    // Tag 0: never renewed; the record keeps the bucket to release.
                    generation: (*z).ledger.take(Held {
                        tag: 0,
                        key_hash,
                        bucket,
                    }),
                }
            }
            None => NO_PERMIT,
        };
        WEIR_OK
    })
}

/// Releases a permit from `weir_zone_acquire` and empties it (a second call does nothing, nor
/// does releasing a copy of a permit already released).
#[no_mangle]
pub unsafe extern "C" fn weir_zone_release(
    z: *const weir_zone,
    l: *const weir_limiter,
    permit: *mut weir_permit,
    now: u64,
) -> c_int {
    guard(|| {
        if z.is_null() || l.is_null() || permit.is_null() {
            return WEIR_ERR_NULL;
        }
        let LimiterKind::Concurrency(c) = &(*l).kind else {
            return WEIR_ERR_INVALID;
        };
        let p = std::mem::replace(&mut *permit, NO_PERMIT);
        // A copy of a permit already released (or a forged one) gives nothing back.
        if p.limit >= 0 {
            if let Some(bucket) = (*z).ledger.give_back(p.generation, p.bucket) {
                (*z).table
                    .release(c, Permit::from_raw(p.key_hash, bucket), now);
            }
        }
        WEIR_OK
    })
}

/// The in-flight count of `key` at `now` (concurrency limiters), or 0.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_in_flight(
    z: *const weir_zone,
    l: *const weir_limiter,
    key: *const u8,
    key_len: usize,
    now: u64,
) -> u64 {
    let r = catch_unwind(AssertUnwindSafe(|| {
        if z.is_null() || l.is_null() {
            return 0;
        }
        let (LimiterKind::Concurrency(c), Ok(h)) = (&(*l).kind, zone_key(&*z, key, key_len)) else {
            return 0;
        };
        let t = &(*z).table;
        c.in_flight(t.peek(h).unwrap_or(0), now.saturating_sub(t.clock_base()))
    }));
    r.unwrap_or(0)
}
