//! The engine's counters for operators: Prometheus text or the JSON status (docs/METRICS.md),
//! both from one snapshot (`weir::policy::metrics`).
//!
//! Every function here follows weir_metrics' buffer contract.

use std::ffi::c_int;
use std::ptr;

use weir::policy::metrics::{self, Format};

use crate::{bytes, guard, weir_engine, weir_zone};
use crate::{WEIR_ERR_BUFFER_TOO_SMALL, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};

/// Prometheus text format 0.0.4 (`Content-Type: text/plain; version=0.0.4; charset=utf-8`).
pub const WEIR_FORMAT_PROMETHEUS: c_int = 0;
/// The JSON status, schema version 1 (`Content-Type: application/json`).
pub const WEIR_FORMAT_JSON: c_int = 1;

/// A zone outside the policy (nginx's `weir_req_zone`) for weir_metrics, and the name its
/// numbers carry (`zone="…"`, the JSON `name`). A NULL `zone` is skipped.
#[repr(C)]
pub struct weir_named_zone {
    pub zone: *const weir_zone,
    pub name: *const u8,
    pub name_len: usize,
}

/// Renders the counters of engine `e` (may be NULL) and of `zones[0..n]` in `format`
/// (WEIR_FORMAT_PROMETHEUS or WEIR_FORMAT_JSON; another value is WEIR_ERR_INVALID): the zones
/// join the policy's zones (the `weir_zone_*` families, the JSON `zones`). In Prometheus text
/// each metric family appears once (one HELP and one TYPE line, all its samples under them).
///
/// Buffer contract: `*written` receives the length (no NUL is added); when `cap` is too small,
/// WEIR_ERR_BUFFER_TOO_SMALL is returned, nothing is written and `*written` is the size
/// needed. Counters may gain digits between two calls: leave room to spare.
#[no_mangle]
pub unsafe extern "C" fn weir_metrics(
    e: *const weir_engine,
    zones: *const weir_named_zone,
    n: usize,
    format: c_int,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> c_int {
    guard(|| {
        if written.is_null() || (buf.is_null() && cap > 0) || (zones.is_null() && n > 0) {
            return WEIR_ERR_NULL;
        }
        let format = match format {
            WEIR_FORMAT_PROMETHEUS => Format::Prometheus,
            WEIR_FORMAT_JSON => Format::Json,
            _ => return WEIR_ERR_INVALID,
        };
        let named: &[weir_named_zone] = if n == 0 {
            &[]
        } else {
            // SAFETY: the caller passes n readable entries (checked non-NULL above).
            std::slice::from_raw_parts(zones, n)
        };
        let mut stats = Vec::with_capacity(n);
        for z in named.iter().filter(|z| !z.zone.is_null()) {
            let name = match bytes(z.name, z.name_len) {
                Ok(b) => String::from_utf8_lossy(b),
                Err(rc) => return rc,
            };
            // SAFETY: a non-NULL zone is a live handle from weir_zone_new / weir_zone_attach.
            stats.push((name, (*z.zone).table.stats()));
        }
        let stats: Vec<(&str, _)> = stats.iter().map(|(n, s)| (n.as_ref(), *s)).collect();
        let text = metrics::render(e.as_ref().map(|e| &e.engine), &stats, format);
        *written = text.len();
        if text.len() > cap {
            return WEIR_ERR_BUFFER_TOO_SMALL;
        }
        if !text.is_empty() {
            // SAFETY: buf holds cap >= text.len() > 0 bytes, so it is not NULL.
            ptr::copy_nonoverlapping(text.as_ptr(), buf, text.len());
        }
        WEIR_OK
    })
}

/// weir_metrics in Prometheus text (WEIR_FORMAT_PROMETHEUS).
#[no_mangle]
pub unsafe extern "C" fn weir_prometheus(
    e: *const weir_engine,
    zones: *const weir_named_zone,
    n: usize,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> c_int {
    weir_metrics(e, zones, n, WEIR_FORMAT_PROMETHEUS, buf, cap, written)
}

/// Renders every counter of engine `e` (not NULL) as Prometheus text into `buf` (buffer
/// contract: weir_metrics).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_prometheus(
    e: *const weir_engine,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> c_int {
    engine_only(e, WEIR_FORMAT_PROMETHEUS, buf, cap, written)
}

/// Renders every counter of engine `e` (not NULL) as the JSON status into `buf` (buffer
/// contract: weir_metrics).
#[no_mangle]
pub unsafe extern "C" fn weir_engine_json(
    e: *const weir_engine,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> c_int {
    engine_only(e, WEIR_FORMAT_JSON, buf, cap, written)
}

unsafe fn engine_only(
    e: *const weir_engine,
    format: c_int,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> c_int {
    if e.is_null() {
        return WEIR_ERR_NULL;
    }
    weir_metrics(e, ptr::null(), 0, format, buf, cap, written)
}
