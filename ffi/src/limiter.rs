//! Limiters: an algorithm with its parameters, for the low-level zone calls.

use std::ffi::c_int;
use std::ptr;

use weir::limiter::{Concurrency, Delay, Gcra, Rate, SlidingWindow};

use crate::{fail, give, guard, take_back, weir_error, WEIR_ERR_INVALID, WEIR_ERR_NULL};

/// A limiting algorithm with its parameters (GCRA, sliding window or concurrency).
pub struct weir_limiter {
    pub(crate) kind: LimiterKind,
}

pub(crate) enum LimiterKind {
    Gcra(Gcra),
    Sliding(SlidingWindow),
    Concurrency(Concurrency),
}

pub(crate) unsafe fn new_limiter(
    made: Result<LimiterKind, weir::limiter::ParamError>,
    out: *mut *mut weir_limiter,
    err: *mut *mut weir_error,
) -> c_int {
    if out.is_null() {
        return fail(err, WEIR_ERR_NULL, "out is NULL");
    }
    *out = ptr::null_mut();
    match made {
        Ok(kind) => give(out, weir_limiter { kind }),
        Err(e) => fail(err, WEIR_ERR_INVALID, e),
    }
}

/// GCRA (nginx limit_req): `count` requests per `period_ns`, `burst`, and `delay`: -1 for
/// nodelay, 0 for nginx's default (every excess request waits), N for `delay=N`.
#[no_mangle]
pub unsafe extern "C" fn weir_limiter_gcra(
    count: u64,
    period_ns: u64,
    burst: u64,
    delay: i64,
    out: *mut *mut weir_limiter,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        let mode = match delay {
            d if d < 0 => Delay::NoDelay,
            0 => Delay::Delay,
            d => Delay::After(d as u64),
        };
        let made = Gcra::new(Rate { count, period_ns }, burst, mode).map(LimiterKind::Gcra);
        new_limiter(made, out, err)
    })
}

/// Sliding window: `events` per `window_ns`.
#[no_mangle]
pub unsafe extern "C" fn weir_limiter_sliding(
    events: u64,
    window_ns: u64,
    out: *mut *mut weir_limiter,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        new_limiter(
            SlidingWindow::new(events, window_ns).map(LimiterKind::Sliding),
            out,
            err,
        )
    })
}

/// Concurrency: at most `max` in flight per key; permits are leases of `lease_ns` (0 = the
/// default, 120 s) so that permits of a process that died come back by themselves.
#[no_mangle]
pub unsafe extern "C" fn weir_limiter_concurrency(
    max: u64,
    lease_ns: u64,
    out: *mut *mut weir_limiter,
    err: *mut *mut weir_error,
) -> c_int {
    guard(|| {
        let lease = if lease_ns == 0 {
            weir::limiter::concurrency::DEFAULT_LEASE_NS
        } else {
            lease_ns
        };
        new_limiter(
            Concurrency::new(max, lease).map(LimiterKind::Concurrency),
            out,
            err,
        )
    })
}

/// Frees a limiter (NULL is ignored).
#[no_mangle]
pub unsafe extern "C" fn weir_limiter_free(l: *mut weir_limiter) {
    take_back(l)
}
