//! The engine's counters for operators: Prometheus text or the JSON status (docs/METRICS.md),
//! both from one snapshot (`weir::policy::metrics`).
//!
//! Every function here follows weir_metrics' buffer contract.

use std::ffi::{c_char, c_int, CString};
use std::ptr;
use std::sync::OnceLock;

use weir::policy::metrics::{self, page, Format};

use crate::{guard, weir_engine};
use crate::{WEIR_ERR_BUFFER_TOO_SMALL, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};

/// Prometheus text format 0.0.4 (`Content-Type: text/plain; version=0.0.4; charset=utf-8`).
pub const WEIR_FORMAT_PROMETHEUS: c_int = 0;
/// The JSON status, schema version 2 (`Content-Type: application/json`).
pub const WEIR_FORMAT_JSON: c_int = 1;
/// The status page (`Content-Type: text/html; charset=utf-8`), which reads the JSON status
/// from the same location; send it with the headers weir_page_header names.
pub const WEIR_FORMAT_HTML: c_int = 2;

/// Renders the counters of `engines[0..n]` (NULL entries are skipped; nginx: the policy's
/// engine and its directives') in `format` (WEIR_FORMAT_PROMETHEUS, WEIR_FORMAT_JSON, or
/// WEIR_FORMAT_HTML: the page, the same for any engines; another value is WEIR_ERR_INVALID):
/// the engines' totals summed, their limits and zones listed in turn. In Prometheus text each metric family appears once (one HELP and one TYPE
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
            WEIR_FORMAT_HTML => Format::Html,
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

/// Header `i` (from 0) to send with the status page (WEIR_FORMAT_HTML): `*name` and `*value`
/// receive NUL-terminated static strings (never freed). Header 0 is its
/// Content-Security-Policy, the others forbid framing, sniffing, caching and referrers.
/// WEIR_ERR_INVALID past the last one, WEIR_ERR_NULL for a NULL out pointer.
#[no_mangle]
pub unsafe extern "C" fn weir_page_header(
    i: usize,
    name: *mut *const c_char,
    value: *mut *const c_char,
) -> c_int {
    guard(|| {
        if name.is_null() || value.is_null() {
            return WEIR_ERR_NULL;
        }
        let Some((n, v)) = page_headers().get(i) else {
            return WEIR_ERR_INVALID;
        };
        // SAFETY: both checked non-NULL above; the strings live for the process.
        *name = n.as_ptr();
        *value = v.as_ptr();
        WEIR_OK
    })
}

fn page_headers() -> &'static [(CString, CString)] {
    static HEADERS: OnceLock<Vec<(CString, CString)>> = OnceLock::new();
    HEADERS.get_or_init(|| {
        let csp = ("Content-Security-Policy", page::live().csp.as_str());
        std::iter::once(csp)
            .chain(page::HEADERS)
            // No NUL in these texts (the policy is ASCII built here).
            .filter_map(|(n, v)| Some((CString::new(n).ok()?, CString::new(v).ok()?)))
            .collect()
    })
}
