//! What a host needs to apply a changed policy on reload (nginx `-s reload`): a zone whose
//! layout changed starts fresh in new memory, a GCRA zone whose rate changed keeps each key's
//! excess.

use std::ffi::c_int;
use std::fmt::Write as _;
use std::ptr;
use std::time::Duration;

use weir::limiter::concurrency::DEFAULT_LEASE_NS;
use weir::limiter::Rate;
use weir::policy::config::Algorithm;
use weir::policy::Engine;

use crate::{guard, weir_policy, weir_zone, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};

/// Writes what fixes zone `i`'s memory layout — algorithm, the parameters its states depend on
/// (`window`, a log zone's `events`, a concurrency zone's `lease` unless the default),
/// cluster scope and size — as text such as
/// `sliding window=1m size=65536` into `buf` (at most `cap` bytes, not NUL-terminated; a longer
/// text is cut). Returns the text's full length, 0 when `p` is NULL or has no zone `i`. Zones
/// whose texts differ cannot share state across a reload (their schemas differ, or their
/// sizes); hosts name the change in their log.
#[no_mangle]
pub unsafe extern "C" fn weir_policy_zone_layout(
    p: *const weir_policy,
    i: usize,
    buf: *mut u8,
    cap: usize,
) -> usize {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Some(z) = p.as_ref().and_then(|p| p.policy.zones.get(i)) else {
            return 0;
        };
        let mut text = String::from(z.algorithm.name());
        let _ = match z.algorithm {
            Algorithm::Sliding { window, .. } => write!(text, " window={}", duration(window)),
            Algorithm::SlidingLog { events, window } => {
                write!(text, " events={events} window={}", duration(window))
            }
            // A lease other than the default renumbers the buckets.
            Algorithm::Concurrency { .. } if z.lease.as_nanos() != u128::from(DEFAULT_LEASE_NS) => {
                write!(text, " lease={}", duration(z.lease))
            }
            Algorithm::Gcra { .. } | Algorithm::Concurrency { .. } => Ok(()),
        };
        if z.cluster.is_some() {
            text.push_str(" scope=cluster");
        }
        let _ = write!(text, " size={}", z.size);
        if !buf.is_null() {
            ptr::copy_nonoverlapping(text.as_ptr(), buf, text.len().min(cap));
        }
        text.len()
    }))
    .unwrap_or(0)
}

/// nginx time syntax for a window: `90s` → `1m30s`, `1500ms` → `1s500ms`.
fn duration(d: Duration) -> String {
    let mut ms = d.as_millis() as u64;
    let mut out = String::new();
    for (unit, len) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
    ] {
        if ms >= len {
            let _ = write!(out, "{}{unit}", ms / len);
            ms %= len;
        }
    }
    if ms > 0 || out.is_empty() {
        let _ = write!(out, "{ms}ms");
    }
    out
}

/// The fingerprint of the policy's limits that its shared counter block is kept under (0 for
/// NULL): blocks of policies with different limits cannot share counts, so a host may give
/// each fingerprint its own memory (nginx names the zone after it).
#[no_mangle]
pub unsafe extern "C" fn weir_policy_counters_fingerprint(p: *const weir_policy) -> u64 {
    match p.as_ref() {
        Some(p) => Engine::counters_layout(&p.policy).1,
        None => 0,
    }
}

/// Records that GCRA zone `z`'s states use the rate `count` per `period_ns` from now on. When
/// the zone was attached with another rate before (an nginx reload with a new `rate=`), every
/// key's excess carries over in requests: a state `d` ns ahead of `now` becomes
/// `d·T_new/T_old` ahead, as nginx `limit_req` reads its stored excess against the new rate.
/// Call it after `weir_zone_attach`, once per attach, for GCRA zones only. `*rescaled` (may be
/// NULL) receives the number of keys whose state changed.
#[no_mangle]
pub unsafe extern "C" fn weir_zone_set_gcra_rate(
    z: *const weir_zone,
    count: u64,
    period_ns: u64,
    now: u64,
    rescaled: *mut usize,
) -> c_int {
    guard(|| {
        let Some(z) = z.as_ref() else {
            return WEIR_ERR_NULL;
        };
        let Ok(interval) = (Rate { count, period_ns }).interval_ns() else {
            return WEIR_ERR_INVALID;
        };
        let n = z.table.set_gcra_interval(interval, now);
        if !rescaled.is_null() {
            *rescaled = n;
        }
        WEIR_OK
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{weir_policy_free, weir_policy_parse, weir_zone_free, weir_zone_new};

    unsafe fn policy(text: &str) -> *mut weir_policy {
        let mut p = ptr::null_mut();
        let rc = weir_policy_parse(
            text.as_ptr(),
            text.len(),
            ptr::null(),
            &mut p,
            ptr::null_mut(),
        );
        assert_eq!(rc, WEIR_OK);
        p
    }

    unsafe fn layout(p: *const weir_policy, i: usize) -> String {
        let mut buf = [0u8; 128];
        let n = weir_policy_zone_layout(p, i, buf.as_mut_ptr(), buf.len());
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn layouts_name_what_a_reload_cannot_keep() {
        // SAFETY: `p` is a live policy until freed last; buffers are live arrays of their size.
        unsafe {
            let p = policy(
                "[zones.a]\nsize = \"64k\"\nalgorithm = \"sliding\"\nevents = 5\nwindow = \"90s\"\n\
                 [zones.b]\nsize = 65536\nalgorithm = \"log\"\nevents = 3\nwindow = \"1500ms\"\n\
                 [zones.c]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/s\"\n\
                 [[limit]]\nclass = \"*\"\nzone = \"a\"\n",
            );
            assert_eq!(layout(p, 0), "sliding window=1m30s size=65536");
            assert_eq!(
                layout(p, 1),
                "sliding_log events=3 window=1s500ms size=65536"
            );
            assert_eq!(layout(p, 2), "gcra size=65536");
            // Cut to the buffer, full length returned; no zone 3; NULL policy.
            let mut two = [0u8; 2];
            assert_eq!(weir_policy_zone_layout(p, 2, two.as_mut_ptr(), 2), 15);
            assert_eq!(&two, b"gc");
            assert_eq!(weir_policy_zone_layout(p, 3, two.as_mut_ptr(), 2), 0);
            assert_eq!(
                weir_policy_zone_layout(ptr::null(), 0, two.as_mut_ptr(), 2),
                0
            );
            assert_ne!(weir_policy_counters_fingerprint(p), 0);
            assert_eq!(weir_policy_counters_fingerprint(ptr::null()), 0);
            weir_policy_free(p);
        }
    }

    #[test]
    fn setting_a_rate_checks_its_arguments() {
        // SAFETY: `z` is a live zone until freed; out-pointers are live locals.
        unsafe {
            let mut z = ptr::null_mut();
            assert_eq!(weir_zone_new(64 << 10, 1, &mut z, ptr::null_mut()), WEIR_OK);
            let mut n = 7;
            assert_eq!(
                weir_zone_set_gcra_rate(z, 1, 60_000_000_000, 1, &mut n),
                WEIR_OK
            );
            assert_eq!(n, 0);
            assert_eq!(
                weir_zone_set_gcra_rate(z, 0, 1, 1, &mut n),
                WEIR_ERR_INVALID
            );
            let null = weir_zone_set_gcra_rate(ptr::null(), 1, 1, 1, ptr::null_mut());
            assert_eq!(null, WEIR_ERR_NULL);
            weir_zone_free(z);
        }
    }
}
