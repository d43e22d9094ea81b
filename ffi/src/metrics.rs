//! The engine's counters for operators: Prometheus text or the JSON status (docs/METRICS.md),
//! both from one snapshot (`weir::policy::metrics`).
//!
//! Every function here follows weir_metrics' buffer contract.

use std::ffi::c_int;
use std::ptr;

use weir::policy::metrics::{self, Format};

use crate::{guard, weir_engine};
use crate::{WEIR_ERR_BUFFER_TOO_SMALL, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};

/// Prometheus text format 0.0.4 (`Content-Type: text/plain; version=0.0.4; charset=utf-8`).
pub const WEIR_FORMAT_PROMETHEUS: c_int = 0;
/// The JSON status, schema version 1 (`Content-Type: application/json`).
pub const WEIR_FORMAT_JSON: c_int = 1;

/// Renders the counters of `engines[0..n]` (NULL entries are skipped; nginx: the policy's
/// engine and its directives') in `format` (WEIR_FORMAT_PROMETHEUS or WEIR_FORMAT_JSON;
/// another value is WEIR_ERR_INVALID): the engines' totals summed, their limits and zones
/// listed in turn. In Prometheus text each metric family appears once (one HELP and one TYPE
/// line, all its samples under them).
///
/// Buffer contract: `*written` receives the length (no NUL is added); when `cap` is too small,
/// WEIR_ERR_BUFFER_TOO_SMALL is returned, nothing is written and `*written` is the size
/// needed. Counters may gain digits between two calls: leave room to spare.
#[no_mangle]
pub unsafe extern "C" fn weir_metrics(
    engines: *const *const weir_engine,
    n: usize,
    format: c_int,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> c_int {
    guard(|| {
        if written.is_null() || (buf.is_null() && cap > 0) || (engines.is_null() && n > 0) {
            return WEIR_ERR_NULL;
        }
        let format = match format {
            WEIR_FORMAT_PROMETHEUS => Format::Prometheus,
            WEIR_FORMAT_JSON => Format::Json,
            _ => return WEIR_ERR_INVALID,
        };
        // SAFETY: the caller passes n readable entries (checked non-NULL above), each NULL or
        // a live engine handle.
        let list = engine_list(engines, n);
        let text = metrics::render(&list, &[], format);
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

/// The engines of `engines[0..n]`, NULL entries skipped.
///
/// # Safety
/// `engines` points at `n` readable entries (or `n` is 0), each NULL or a live engine handle.
pub(crate) unsafe fn engine_list<'a>(
    engines: *const *const weir_engine,
    n: usize,
) -> Vec<&'a weir::policy::Engine> {
    let handles: &[*const weir_engine] = if n == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(engines, n)
    };
    handles
        .iter()
        .filter_map(|e| e.as_ref())
        .map(|e| &e.engine)
        .collect()
}

/// weir_metrics in Prometheus text (WEIR_FORMAT_PROMETHEUS).
#[no_mangle]
pub unsafe extern "C" fn weir_prometheus(
    engines: *const *const weir_engine,
    n: usize,
    buf: *mut u8,
    cap: usize,
    written: *mut usize,
) -> c_int {
    weir_metrics(engines, n, WEIR_FORMAT_PROMETHEUS, buf, cap, written)
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
    weir_metrics(&e, 1, format, buf, cap, written)
}
