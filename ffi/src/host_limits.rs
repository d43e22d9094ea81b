//! Host limits: a policy built from a host's own directives (zones and the limits its
//! configuration names), compiled and validated as a policy file is. The `weir_policy` it
//! gives is used like a parsed one (zone layouts, shared regions, engines); its limits are
//! evaluated only when named (`weir_engine_evaluate_selected`).

use std::ffi::{c_char, c_int, c_void};
use std::time::Duration;

use weir::limiter::{Delay, Rate};
use weir::policy::config::{Algorithm, LogLevel};
use weir::policy::{HostLimit, HostLimits, HostZone};

use crate::parse::{weir_rate, write_message};
use crate::policy::weir_policy;
use crate::{
    bytes, give, guard, take_back, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_ERR_POLICY, WEIR_OK,
};

/// Zones and limits being declared (opaque). Not thread-safe; free with `weir_host_limits_free`.
pub struct weir_host_limits {
    pub(crate) b: HostLimits,
    /// The zones' names in declaration order, to tell which one a build error names.
    zones: Vec<String>,
    /// Per limit, the host's origin of a limit declared by `weir_host_limits_select`, with its
    /// dry run and status (0 for one declared by `weir_host_limits_limit`).
    pub(crate) origins: Vec<(u64, bool, u16)>,
}

/// `weir_zone_spec.algorithm`.
pub const WEIR_ALGORITHM_GCRA: c_int = 1;
pub const WEIR_ALGORITHM_SLIDING: c_int = 2;
pub const WEIR_ALGORITHM_CONCURRENCY: c_int = 3;
pub const WEIR_ALGORITHM_SLIDING_LOG: c_int = 4;

/// A zone: its memory and algorithm, as a policy's `[zones.NAME]`.
#[repr(C)]
#[derive(Debug, Default)]
pub struct weir_zone_spec {
    /// WEIR_ALGORITHM_*.
    pub algorithm: c_int,
    /// Bytes of memory (`weir_parse_size`).
    pub size: u64,
    /// gcra: the rate (`weir_parse_rate`).
    pub rate: weir_rate,
    /// sliding, sliding_log: events per window.
    pub events: u64,
    /// sliding, sliding_log: the window (`weir_parse_duration`), whole milliseconds.
    pub window_ns: u64,
    /// concurrency: most in flight per key; 0 when each limit on the zone gives its own `max`.
    pub max: u64,
}

/// A limit, as a policy's `[[limit]]` without classes. Zero means the policy's default for
/// `status`, `cost`, `max` and `timeout_ns`; `burst`, `delay`, `log_level` and the prefixes
/// mean what they say (a prefix of -1 is the default).
#[repr(C)]
pub struct weir_limit_spec {
    /// The zone's name, as given to `weir_host_limits_zone`.
    pub zone: *const u8,
    pub zone_len: usize,
    /// Name in logs and metrics; length 0: "ZONE.INDEX".
    pub name: *const u8,
    pub name_len: usize,
    /// Key parts in the policy's syntax, separated by commas ("var:k", "ip", "ip,path");
    /// length 0: "ip". A `var:NAME` part is resolved by `weir_request.var` with NAME's index
    /// (`weir_engine_var_name`).
    pub key: *const u8,
    pub key_len: usize,
    /// Prefix lengths of an `ip` part; -1: the default (/32, /64).
    pub ipv4_prefix: c_int,
    pub ipv6_prefix: c_int,
    /// gcra: excess requests tolerated above the rate.
    pub burst: u64,
    /// gcra: -1 no excess request is delayed (nginx `nodelay`); N ≥ 0: the first N excess
    /// requests pass at once (nginx `delay=N`; 0 is nginx's default).
    pub delay: i64,
    /// 1: count and report, never reject or delay (nginx `*_dry_run on`).
    pub dry_run: u8,
    /// Status of a rejection, 400–599; 0: 429.
    pub status: u16,
    /// Log level of a rejection, as `weir_engine_limit_log_level` answers it: 0 info, 1 notice,
    /// 2 warn, 3 error (a policy's default; 0 here is info).
    pub log_level: c_int,
    /// Units per request; 0: 1.
    pub cost: u64,
    /// concurrency: most in flight per key for this limit (nginx `limit_conn zone N`); 0: the
    /// zone's.
    pub max: u64,
    /// concurrency: requests allowed to wait for a slot.
    pub queue: u64,
    /// concurrency with `queue`: how long one waits; 0: the default (5 s).
    pub timeout_ns: u64,
}

/// A new, empty declaration (never NULL).
#[no_mangle]
pub extern "C" fn weir_host_limits_new() -> *mut weir_host_limits {
    Box::into_raw(Box::new(weir_host_limits {
        b: HostLimits::new(),
        zones: Vec::new(),
        origins: Vec::new(),
    }))
}

/// Frees a declaration; NULL is ignored.
#[no_mangle]
pub unsafe extern "C" fn weir_host_limits_free(b: *mut weir_host_limits) {
    take_back(b)
}

fn text(b: &[u8]) -> Result<&str, c_int> {
    std::str::from_utf8(b).map_err(|_| WEIR_ERR_INVALID)
}

/// Declares zone `name` (`len` bytes). Problems with its values are reported by
/// `weir_host_limits_build`; WEIR_ERR_INVALID here only for an unknown algorithm or a name
/// that is not UTF-8.
#[no_mangle]
pub unsafe extern "C" fn weir_host_limits_zone(
    b: *mut weir_host_limits,
    name: *const u8,
    len: usize,
    spec: *const weir_zone_spec,
) -> c_int {
    guard(|| {
        if b.is_null() || spec.is_null() {
            return WEIR_ERR_NULL;
        }
        match bytes(name, len) {
            Ok(name) => declare_zone(&mut *b, name, &*spec),
            Err(code) => code,
        }
    })
}

/// `weir_host_limits_zone` on checked arguments.
pub(crate) fn declare_zone(b: &mut weir_host_limits, name: &[u8], s: &weir_zone_spec) -> c_int {
    let name = match text(name) {
        Ok(n) => n,
        Err(code) => return code,
    };
    let window = Duration::from_nanos(s.window_ns);
    let algorithm = match s.algorithm {
        WEIR_ALGORITHM_GCRA => Algorithm::Gcra {
            rate: Rate {
                count: s.rate.count,
                period_ns: s.rate.period_ns,
            },
        },
        WEIR_ALGORITHM_SLIDING => Algorithm::Sliding {
            events: s.events,
            window,
        },
        WEIR_ALGORITHM_CONCURRENCY => Algorithm::Concurrency { max: s.max },
        WEIR_ALGORITHM_SLIDING_LOG => Algorithm::SlidingLog {
            events: s.events,
            window,
        },
        _ => return WEIR_ERR_INVALID,
    };
    b.b.zone(
        name,
        HostZone {
            size: s.size,
            algorithm,
        },
    );
    b.zones.push(name.to_owned());
    WEIR_OK
}

unsafe fn limit(s: &weir_limit_spec) -> Result<(String, HostLimit), c_int> {
    let zone = text(bytes(s.zone, s.zone_len)?)?.to_owned();
    let name = text(bytes(s.name, s.name_len)?)?;
    let key = text(bytes(s.key, s.key_len)?)?;
    let prefix = |p: c_int| match p {
        -1 => Ok(None),
        0..=128 => Ok(Some(p as u8)),
        _ => Err(WEIR_ERR_INVALID),
    };
    let log_level = match s.log_level {
        0 => LogLevel::Info,
        1 => LogLevel::Notice,
        2 => LogLevel::Warn,
        3 => LogLevel::Error,
        _ => return Err(WEIR_ERR_INVALID),
    };
    let delay = match s.delay {
        -1 => Delay::NoDelay,
        0 => Delay::Delay,
        n if n > 0 => Delay::After(n as u64),
        _ => return Err(WEIR_ERR_INVALID),
    };
    let limit = HostLimit {
        name: (!name.is_empty()).then(|| name.to_owned()),
        key: if key.is_empty() {
            Vec::new()
        } else {
            key.split(',').map(|p| p.trim().to_owned()).collect()
        },
        ipv4_prefix: prefix(s.ipv4_prefix)?,
        ipv6_prefix: prefix(s.ipv6_prefix)?,
        burst: s.burst,
        delay,
        dry_run: s.dry_run != 0,
        status: if s.status == 0 { 429 } else { s.status },
        log_level,
        cost: s.cost.max(1),
        max: (s.max != 0).then_some(s.max),
        queue: s.queue,
        timeout: (s.timeout_ns != 0).then(|| Duration::from_nanos(s.timeout_ns)),
    };
    Ok((zone, limit))
}

/// Declares a limit; `*index_out` is its index in the engine (limits keep their order), to
/// pass to `weir_engine_evaluate_selected`. Problems with its values are reported by
/// `weir_host_limits_build`; WEIR_ERR_INVALID here only for text that is not UTF-8, a prefix
/// outside -1..=128, a log level outside 0..=3 or a delay below -1.
#[no_mangle]
pub unsafe extern "C" fn weir_host_limits_limit(
    b: *mut weir_host_limits,
    spec: *const weir_limit_spec,
    index_out: *mut u16,
) -> c_int {
    guard(|| {
        if b.is_null() || spec.is_null() || index_out.is_null() {
            return WEIR_ERR_NULL;
        }
        match limit(&*spec) {
            Ok((zone, l)) => {
                (*b).origins.push((0, false, 0));
                *index_out = (*b).b.limit(&zone, l);
                WEIR_OK
            }
            Err(code) => code,
        }
    })
}

/// Compiles the declaration into `*out` (free with `weir_policy_free`; `b` stays usable).
/// WEIR_ERR_POLICY with every problem in `err` (one per line, each naming its zone or
/// limit, in a policy file's words; cut to `err_len` bytes, NUL-terminated) when the
/// declaration is not a valid policy.
#[no_mangle]
pub unsafe extern "C" fn weir_host_limits_build(
    b: *const weir_host_limits,
    out: *mut *mut weir_policy,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    guard(|| {
        if b.is_null() || out.is_null() || (err.is_null() && err_len > 0) {
            return WEIR_ERR_NULL;
        }
        match (*b).b.build() {
            Ok(policy) => {
                write_message(err, err_len, "");
                give(out, weir_policy { policy })
            }
            Err(e) => {
                write_message(err, err_len, &e);
                WEIR_ERR_POLICY
            }
        }
    })
}

/// Receives one problem of `weir_host_limits_build_each`: the index of the limit it names or
/// -1, the declaration index of the zone it names or -1, and the message (`len` bytes, not
/// NUL-terminated, valid during the call).
pub type weir_build_error_fn = Option<
    unsafe extern "C" fn(ctx: *mut c_void, limit: i64, zone: i64, msg: *const u8, len: usize),
>;

/// The limit ("limit N ...") or zone ("zone \"NAME\"...") an error line names.
fn origin(b: &weir_host_limits, line: &str) -> (i64, i64) {
    if let Some(rest) = line.strip_prefix("limit ") {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        return (rest[..digits].parse().unwrap_or(-1), -1);
    }
    let zone = line.strip_prefix("zone \"").and_then(|rest| {
        b.zones.iter().position(|z| {
            rest.strip_prefix(z.as_str())
                .is_some_and(|r| r.starts_with('"'))
        })
    });
    (-1, zone.map_or(-1, |z| z as i64))
}

/// `weir_host_limits_build`, but each problem goes to `report` (called once per problem, in
/// order, with `ctx`) with the limit or zone it is about, for the host to say where that was
/// declared.
#[no_mangle]
pub unsafe extern "C" fn weir_host_limits_build_each(
    b: *const weir_host_limits,
    out: *mut *mut weir_policy,
    report: weir_build_error_fn,
    ctx: *mut c_void,
) -> c_int {
    guard(|| {
        let Some(report) = report else {
            return WEIR_ERR_NULL;
        };
        if b.is_null() || out.is_null() {
            return WEIR_ERR_NULL;
        }
        match (*b).b.build() {
            Ok(policy) => give(out, weir_policy { policy }),
            Err(e) => {
                for line in e.lines() {
                    let (limit, zone) = origin(&*b, line);
                    report(ctx, limit, zone, line.as_ptr(), line.len());
                }
                WEIR_ERR_POLICY
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    unsafe extern "C" fn collect(ctx: *mut c_void, limit: i64, zone: i64, m: *const u8, n: usize) {
        let text = String::from_utf8_lossy(std::slice::from_raw_parts(m, n)).into_owned();
        (*ctx.cast::<Vec<(i64, i64, String)>>()).push((limit, zone, text));
    }

    #[test]
    fn build_errors_name_their_limit_or_zone() {
        let b = weir_host_limits_new();
        let zone = |name: &str, count| {
            let spec = weir_zone_spec {
                algorithm: WEIR_ALGORITHM_GCRA,
                size: 1 << 20,
                rate: weir_rate {
                    count,
                    period_ns: 1_000_000_000,
                },
                ..weir_zone_spec::default()
            };
            unsafe { weir_host_limits_zone(b, name.as_ptr(), name.len(), &spec) }
        };
        assert_eq!(zone("ok", 1), WEIR_OK);
        assert_eq!(zone("a!b", 1), WEIR_OK);
        let spec = weir_limit_spec {
            zone: b"nope".as_ptr(),
            zone_len: 4,
            name: ptr::null(),
            name_len: 0,
            key: ptr::null(),
            key_len: 0,
            ipv4_prefix: -1,
            ipv6_prefix: -1,
            burst: 0,
            delay: 0,
            dry_run: 0,
            status: 0,
            log_level: 3,
            cost: 0,
            max: 0,
            queue: 0,
            timeout_ns: 0,
        };
        let mut index = 9;
        assert_eq!(
            unsafe { weir_host_limits_limit(b, &spec, &mut index) },
            WEIR_OK
        );
        let mut errors: Vec<(i64, i64, String)> = Vec::new();
        let mut out = ptr::null_mut();
        let ctx = (&mut errors as *mut Vec<(i64, i64, String)>).cast();
        let rc = unsafe { weir_host_limits_build_each(b, &mut out, Some(collect), ctx) };
        assert_eq!((rc, out.is_null()), (WEIR_ERR_POLICY, true));
        let origins: Vec<(i64, i64)> = errors.iter().map(|e| (e.0, e.1)).collect();
        assert_eq!(origins, [(-1, 1), (0, -1)], "{errors:?}");
        assert!(errors[0].2.starts_with("zone \"a!b\""), "{errors:?}");
        unsafe { weir_host_limits_free(b) };
    }
}
