//! The C ABI of weir (`libweir.a`, `libweir.so`, `include/weir.h`).
//!
//! Rules every entry point follows:
//! - It never unwinds into C: the body runs under `catch_unwind` and a panic becomes
//!   `WEIR_ERR_PANIC`.
//! - NULL pointers and impossible lengths are reported (`WEIR_ERR_NULL`, `WEIR_ERR_INVALID`),
//!   never dereferenced.
//! - Memory allocated here is freed only by the matching `weir_*_free`.
//! - Handles: `weir_policy`, `weir_engine`, `weir_zone` and `weir_limiter` are immutable after
//!   creation and safe to use from any number of threads at once; only their `_free` must not
//!   race with other use. `weir_error` belongs to the caller's thread.
//!
//! This file holds the rules' plumbing (`guard`, `fail`, `bytes`, `give`, `take_back`), the
//! error codes and the error object; each surface has its module: `policy`, `engine`,
//! `evaluate` (requests and verdicts), `outcome` (what a host does with a verdict), `metrics`
//! (Prometheus text, JSON status), `keys` (the status's key operations), `cluster`, `host_limits` and `directive` (limits declared
//! by a host's own directives), `parse` (the policy's value syntaxes), `zone` and `limiter`
//! (zones outside a policy), `reload`.

#![allow(clippy::missing_safety_doc)] // The safety contract of every function is in weir.h.
#![allow(non_camel_case_types)] // C names: weir_engine, weir_verdict, ...

mod access_log;
mod charge;
mod cluster;
mod directive;
mod engine;
mod evaluate;
mod header_walk;
mod host_limits;
mod keys;
mod limiter;
mod log_zone;
mod metrics;
mod outcome;
mod parse;
mod peer;
mod policy;
mod queue;
mod reload;
mod renew;
mod verdict_text;
mod zone;

use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

pub use access_log::*;
pub use charge::*;
pub use cluster::*;
pub use directive::*;
pub use engine::*;
pub use evaluate::*;
pub use header_walk::*;
pub use host_limits::*;
pub use keys::*;
pub use limiter::*;
pub use log_zone::*;
pub use metrics::*;
pub use outcome::*;
pub use parse::*;
pub use policy::*;
pub use queue::*;
pub use reload::*;
pub use renew::*;
pub use verdict_text::*;
pub use zone::*;

/// Success.
pub const WEIR_OK: c_int = 0;
/// A required pointer was NULL.
pub const WEIR_ERR_NULL: c_int = -1;
/// An argument is out of range (a length too large, bad UTF-8 where text is required, an
/// unparsable peer address, a handle of the wrong kind, a value `weir_parse_*` refuses).
pub const WEIR_ERR_INVALID: c_int = -2;
/// The policy is invalid; the error object says where (file:line:col) and why.
pub const WEIR_ERR_POLICY: c_int = -3;
/// A zone could not be created or attached (too small, misaligned, layout changed).
pub const WEIR_ERR_ZONE: c_int = -4;
/// The request is one to answer 400 for: a target nginx answers 400 for, or more than
/// `WEIR_MAX_HEADER_VALUES` values of one header the policy reads.
pub const WEIR_ERR_BAD_TARGET: c_int = -5;
/// The caller's buffer is too small; the needed size is reported.
pub const WEIR_ERR_BUFFER_TOO_SMALL: c_int = -6;
/// An internal error (a bug): weir caught a panic. The process is unaffected.
pub const WEIR_ERR_PANIC: c_int = -7;
/// A file could not be read.
pub const WEIR_ERR_IO: c_int = -8;

/// Verdict actions.
pub const WEIR_PASS: i32 = 0;
pub const WEIR_DELAY: i32 = 1;
pub const WEIR_REJECT: i32 = 2;
pub const WEIR_QUEUE: i32 = 3;

/// Largest byte length any single argument may have (1 GiB): anything larger is a bug.
pub(crate) const MAX_LEN: usize = 1 << 30;

/// An error: a message, with file:line:col for policy errors. Free with `weir_error_free`.
pub struct weir_error {
    message: CString,
}

// ---------------------------------------------------------------------------------------------
// Plumbing

/// Runs `f`, turning a panic into `WEIR_ERR_PANIC`.
pub(crate) fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(WEIR_ERR_PANIC)
}

/// Stores an error message in `*err` when `err` is not NULL.
pub(crate) unsafe fn set_error(err: *mut *mut weir_error, msg: impl std::fmt::Display) {
    if err.is_null() {
        return;
    }
    let text = msg.to_string().replace('\0', "\\0");
    let message = CString::new(text).unwrap_or_default();
    give(err, weir_error { message });
}

/// A byte view from (ptr, len): NULL is allowed only for len 0.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize) -> Result<&'a [u8], c_int> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(WEIR_ERR_NULL);
    }
    if len > MAX_LEN {
        return Err(WEIR_ERR_INVALID);
    }
    Ok(std::slice::from_raw_parts(p, len))
}

/// Hands a new object to the caller through `out` (checked non-NULL by the caller).
pub(crate) unsafe fn give<T>(out: *mut *mut T, value: T) -> c_int {
    *out = Box::into_raw(Box::new(value));
    WEIR_OK
}

/// Frees an object made by [`give`]; NULL is ignored and a panic in a destructor is contained.
pub(crate) unsafe fn take_back<T>(p: *mut T) {
    if !p.is_null() {
        let _ = catch_unwind(AssertUnwindSafe(|| drop(Box::from_raw(p))));
    }
}

pub(crate) fn fail(err: *mut *mut weir_error, code: c_int, msg: impl std::fmt::Display) -> c_int {
    // SAFETY: `err` is NULL or points at a writable `weir_error*` (the header's contract).
    unsafe { set_error(err, msg) };
    code
}

// ---------------------------------------------------------------------------------------------
// Version, clock, errors

/// The library version, a static NUL-terminated string.
#[no_mangle]
pub extern "C" fn weir_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// CLOCK_MONOTONIC in nanoseconds: the time base every `now` argument uses.
#[no_mangle]
pub extern "C" fn weir_now_ns() -> u64 {
    weir::clock::monotonic_ns()
}

/// The error's message (NUL-terminated, valid until `weir_error_free`); "" for NULL.
#[no_mangle]
pub unsafe extern "C" fn weir_error_message(err: *const weir_error) -> *const c_char {
    if err.is_null() {
        return c"".as_ptr();
    }
    (*err).message.as_ptr()
}

/// Frees an error (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn weir_error_free(err: *mut weir_error) {
    take_back(err)
}
