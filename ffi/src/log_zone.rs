//! Exact sliding-log zones (caddy-ratelimit's semantics; docs/ARCHITECTURE.md), served by the
//! same creation, attach and counter paths as `weir_zone`.

use std::ffi::{c_int, c_void};

use weir::region::{Fresh, Region};
use weir::table::{LogTable, SlidingLog, TableError, TableStats};

use crate::zone::{check_out, zone_attach, zone_key, zone_new, zone_stats, ZoneTable};
use crate::{guard, take_back, weir_check, weir_error, weir_zone_stats, WEIR_ERR_NULL, WEIR_OK};

/// An exact sliding-log zone: at most `events` admissions per key in any `window`, a ring of
/// event times per key, in process memory or a caller's region. Thread-safe; usable from
/// several processes when the region is shared.
pub struct weir_log_zone {
    pub(crate) table: LogTable,
}

fn sliding_log(events: u64, window_ns: u64) -> Result<SlidingLog, String> {
    SlidingLog::new(events, window_ns).map_err(|e| e.to_string())
}

/// Bytes a log zone of `events` per window needs for `capacity` keys (0 when `events` is
/// outside 1..=4096, or when the size does not fit in a `size_t`).
#[no_mangle]
pub extern "C" fn weir_log_zone_bytes(events: u64, capacity: usize) -> usize {
    match sliding_log(events, 1_000_000_000) {
        Ok(log) => match LogTable::bytes_for(&log, capacity) {
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
    zone_new(bytes, || sliding_log(events, window_ns), out, err)
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
    let log = || sliding_log(events, window_ns);
    zone_attach(region, len, log, clock_base, false, existed, out, err)
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
        let h = match zone_key(&*z, key, key_len) {
            Ok(h) => h,
            Err(code) => return code,
        };
        *out = check_out(&(*z).table.check(h, now));
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
        match zone_key(&*z, key, key_len) {
            Ok(h) => (*z).table.refund(h, now),
            Err(code) => return code,
        }
        WEIR_OK
    })
}

/// A log zone's counters.
#[no_mangle]
pub unsafe extern "C" fn weir_log_zone_get_stats(
    z: *const weir_log_zone,
    out: *mut weir_zone_stats,
) -> c_int {
    zone_stats(z, out)
}

impl ZoneTable for weir_log_zone {
    type Params = SlidingLog;
    fn new(bytes: usize, log: SlidingLog) -> Result<Self, TableError> {
        LogTable::new(bytes, log, 0).map(|table| weir_log_zone { table })
    }
    fn create_or_attach(
        region: Region,
        log: SlidingLog,
        clock_base: u64,
        fresh: Fresh,
    ) -> Result<(Self, bool), TableError> {
        let made = LogTable::create_or_attach_in(region, log, clock_base, fresh);
        made.map(|(table, kept)| (weir_log_zone { table }, kept))
    }
    fn stats(&self) -> TableStats {
        self.table.stats()
    }
    fn key_hash(&self, key: &[u8]) -> u64 {
        self.table.key_hash(key)
    }
}
