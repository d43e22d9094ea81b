//! Zones outside a policy (nginx-style directives): limiter tables and exact sliding-log
//! tables, in process memory or a caller's region.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use weir::limiter::{Decision, Permit};
use weir::policy::ledger::Ledger;
use weir::table::Table;

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
    fn new(table: Table) -> weir_zone {
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

impl From<weir::table::TableStats> for weir_zone_stats {
    fn from(s: weir::table::TableStats) -> Self {
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
    guard(|| {
        if out.is_null() {
            return fail(err, WEIR_ERR_NULL, "out is NULL");
        }
        *out = ptr::null_mut();
        match Table::new(bytes, schema, 0) {
            Ok(table) => give(out, weir_zone::new(table)),
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
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
    zone_attach(region, len, schema, clock_base, false, existed, out, err)
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
    zone_attach(region, len, schema, clock_base, true, existed, out, err)
}

#[allow(clippy::too_many_arguments)]
unsafe fn zone_attach(
    region: *mut c_void,
    len: usize,
    schema: u64,
    clock_base: u64,
    zeroed: bool,
    existed: *mut c_int,
    out: *mut *mut weir_zone,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() || region.is_null() {
            return fail(err, WEIR_ERR_NULL, "region or out is NULL");
        }
        *out = ptr::null_mut();
        let made = if zeroed {
            Table::create_or_attach_zeroed(region.cast(), len, schema, clock_base)
        } else {
            Table::create_or_attach(region.cast(), len, schema, clock_base)
        };
        match made {
            Ok((table, kept)) => {
                if !existed.is_null() {
                    *existed = kept as c_int;
                }
                give(out, weir_zone::new(table))
            }
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
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
    guard(|| {
        if z.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        *out = (*z).table.stats().into();
        WEIR_OK
    })
}

fn check_out(d: Decision, v: &weir::limiter::Verdict) -> weir_check {
    weir_check {
        action: match d {
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
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        let h = t.key_hash(key);
        let v = match &(*l).kind {
            LimiterKind::Gcra(g) => t.check(g, h, cost, now),
            LimiterKind::Sliding(s) => t.check(s, h, cost, now),
            LimiterKind::Concurrency(_) => return WEIR_ERR_INVALID,
        };
        *out = check_out(v.decision, &v);
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
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        let h = t.key_hash(key);
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
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        let (v, p) = t.acquire(c, t.key_hash(key), now);
        *out = check_out(v.decision, &v);
        *permit = match p {
            Some(p) => {
                let (key_hash, bucket) = p.into_raw();
                weir_permit {
                    limit: 0,
                    key_hash,
                    bucket,
                    generation: (*z).ledger.take(),
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
        if p.limit >= 0 && (*z).ledger.give_back(p.generation) {
            (*z).table
                .release(c, Permit::from_raw(p.key_hash, p.bucket), now);
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
        let (LimiterKind::Concurrency(c), Ok(key)) = (&(*l).kind, bytes(key, key_len)) else {
            return 0;
        };
        let t = &(*z).table;
        c.in_flight(
            t.peek(t.key_hash(key)).unwrap_or(0),
            now.saturating_sub(t.clock_base()),
        )
    }));
    r.unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Exact sliding-log zones (caddy-ratelimit's semantics; docs/ARCHITECTURE.md)

/// An exact sliding-log zone: at most `events` admissions per key in any `window`, a ring of
/// event times per key, in process memory or a caller's region. Thread-safe; usable from
/// several processes when the region is shared.
pub struct weir_log_zone {
    pub(crate) table: weir::table::LogTable,
}

fn sliding_log(events: u64, window_ns: u64) -> Result<weir::table::SlidingLog, String> {
    weir::table::SlidingLog::new(events, window_ns).map_err(|e| e.to_string())
}

/// Bytes a log zone of `events` per window needs for `capacity` keys (0 when `events` is
/// outside 1..=4096, or when the size does not fit in a `size_t`).
#[no_mangle]
pub extern "C" fn weir_log_zone_bytes(events: u64, capacity: usize) -> usize {
    match sliding_log(events, 1_000_000_000) {
        Ok(log) => match weir::table::LogTable::bytes_for(&log, capacity) {
            usize::MAX => 0,
            bytes => bytes,
        },
        Err(_) => 0,
    }
}

/// A log zone of `bytes` in this process's memory: `events` (1..=4096) per `window_ns`
/// (at least 1 ms; kept in whole milliseconds).
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_new(
    bytes: usize,
    events: u64,
    window_ns: u64,
    out: *mut *mut weir_log_zone,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return fail(err, WEIR_ERR_NULL, "out is NULL");
        }
        *out = ptr::null_mut();
        let log = match sliding_log(events, window_ns) {
            Ok(l) => l,
            Err(e) => return fail(err, WEIR_ERR_INVALID, e),
        };
        match weir::table::LogTable::new(bytes, log, 0) {
            Ok(table) => give(out, weir_log_zone { table }),
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// Creates a log zone in the caller's region (64-byte aligned, outliving the handle), or
/// attaches to the one already there when size and parameters are the same (`*existed`, may
/// be NULL, says which).
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_attach(
    region: *mut c_void,
    len: usize,
    events: u64,
    window_ns: u64,
    clock_base: u64,
    existed: *mut c_int,
    out: *mut *mut weir_log_zone,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        if out.is_null() || region.is_null() {
            return fail(err, WEIR_ERR_NULL, "region or out is NULL");
        }
        *out = ptr::null_mut();
        let log = match sliding_log(events, window_ns) {
            Ok(l) => l,
            Err(e) => return fail(err, WEIR_ERR_INVALID, e),
        };
        match weir::table::LogTable::create_or_attach(region.cast(), len, log, clock_base) {
            Ok((table, kept)) => {
                if !existed.is_null() {
                    *existed = kept as c_int;
                }
                give(out, weir_log_zone { table })
            }
            Err(e) => fail(err, WEIR_ERR_ZONE, e),
        }
    })
}

/// Frees a log zone handle (NULL is ignored); a caller's region is left as it is.
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_free(z: *mut weir_log_zone) {
    take_back(z)
}

/// Checks `key` at `now` and records the event when admitted. A rejection's
/// `retry_after_ns` is when the oldest event in the window leaves it.
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_check(
    z: *const weir_log_zone,
    key: *const u8,
    key_len: usize,
    now: u64,
    out: *mut weir_check,
) -> c_int {
    guard(|| {
        if z.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        let v = t.check(t.key_hash(key), now);
        *out = check_out(v.decision, &v);
        WEIR_OK
    })
}

/// Takes back the event `weir_log_zone_check` recorded at `now` (a later limit refused the
/// request).
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_refund(
    z: *const weir_log_zone,
    key: *const u8,
    key_len: usize,
    now: u64,
) -> c_int {
    guard(|| {
        if z.is_null() {
            return WEIR_ERR_NULL;
        }
        let key = match bytes(key, key_len) {
            Ok(k) => k,
            Err(code) => return code,
        };
        let t = &(*z).table;
        t.refund(t.key_hash(key), now);
        WEIR_OK
    })
}

/// A log zone's counters.
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_get_stats(
    z: *const weir_log_zone,
    out: *mut weir_zone_stats,
) -> c_int {
    guard(|| {
        if z.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        *out = (*z).table.stats().into();
        WEIR_OK
    })
}
