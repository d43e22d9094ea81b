//! Host directives shaped like nginx's `limit_req_zone`, `limit_conn_zone`, `limit_req` and
//! `limit_conn`: their arguments parsed here, with nginx's words for a bad one, so that a host
//! only hands over the words of its configuration and logs the message it gets back.
//!
//! Every function writes its error into a caller buffer (`err`, `err_len` bytes): the message,
//! cut to fit and NUL-terminated when `err_len > 0`; `""` on success. Arguments that are no
//! UTF-8 are quoted byte for byte.

use std::ffi::{c_char, c_int};
use std::ptr;
use std::time::Duration;

use weir::limiter::Delay;
use weir::policy::config::HostCluster;
use weir::policy::config::{parse_duration, parse_rate, parse_size, LogLevel};
use weir::policy::HostLimit;

use crate::host_limits::{
    declare_zone, weir_host_limits, weir_zone_spec, WEIR_ALGORITHM_CONCURRENCY,
    WEIR_ALGORITHM_GCRA, WEIR_ALGORITHM_SLIDING,
};
use crate::parse::weir_rate;
use crate::{bytes, guard, WEIR_ERR_INVALID, WEIR_ERR_NULL, WEIR_OK};

/// One word of a directive, laid out as nginx's `ngx_str_t` (length first).
#[repr(C)]
pub struct weir_arg {
    pub len: usize,
    pub data: *const u8,
}

/// A `weir_req` or `weir_conn` directive's limit, as `weir_limit_args` reads it.
#[repr(C)]
pub struct weir_directive_limit {
    /// The zone's name: bytes of the caller's argument.
    pub zone: *const u8,
    pub zone_len: usize,
    /// `burst=N`; 0 when not given.
    pub burst: u64,
    /// 0 default, -1 `nodelay` (or a `delay=` beyond the burst, as nginx reads it), N `delay=N`.
    pub delay: i64,
    /// weir_conn: the number of connections; 0 for weir_req.
    pub max: u64,
}

impl weir_directive_limit {
    fn empty() -> weir_directive_limit {
        weir_directive_limit {
            zone: ptr::null(),
            zone_len: 0,
            burst: 0,
            delay: 0,
            max: 0,
        }
    }
}

type Msg = Vec<u8>;

/// `what "ARG"` with the argument's own bytes.
fn quoted(what: &str, arg: &[u8]) -> Msg {
    let mut m = Vec::with_capacity(what.len() + arg.len() + 3);
    m.extend_from_slice(what.as_bytes());
    m.extend_from_slice(b" \"");
    m.extend_from_slice(arg);
    m.push(b'"');
    m
}

/// nginx's `ngx_atoi`: digits only, at least one, at most `i64::MAX`.
fn atoi(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s)
        .ok()?
        .parse::<i64>()
        .ok()
        .map(|n| n as u64)
}

/// A positive `ngx_atoi` number, else `invalid WHAT "ARG"`.
fn positive(v: &[u8], what: &str, arg: &[u8]) -> Result<u64, Msg> {
    atoi(v).filter(|&n| n > 0).ok_or_else(|| quoted(what, arg))
}

/// `"DIRECTIVE" must have "zone" parameter`.
fn must_have_zone(directive: &[u8]) -> Msg {
    let mut m = vec![b'"'];
    m.extend_from_slice(directive);
    m.extend_from_slice(b"\" must have \"zone\" parameter");
    m
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The words of a `*_zone` directive, from its third on.
struct ZoneArgs<'a> {
    name: &'a [u8],
    spec: weir_zone_spec,
    events: u64,
    window_ms: u64,
    /// conn: `lease=`, whole milliseconds (0: the default).
    lease_ms: u64,
    /// conn: `max=auto` (learned), with `bounds=MIN:MAX` (`None`: the default bounds).
    learn: bool,
    bounds: Option<(u64, u64)>,
    /// conn: `reserve=N`, slots for critical requests (0: none).
    reserve: u64,
    /// `scope=cluster`, `redis=URL` (repeatable) … `expected_nodes=N`: shared across nodes.
    cluster: Option<HostCluster>,
}

fn zone_args<'a>(args: &[&'a [u8]], conn: bool, min_size: u64) -> Result<ZoneArgs<'a>, Msg> {
    let mut z = ZoneArgs {
        name: &[],
        spec: weir_zone_spec::default(),
        events: 0,
        window_ms: 0,
        lease_ms: 0,
        learn: false,
        bounds: None,
        reserve: 0,
        cluster: None,
    };
    for &a in args.iter().skip(2) {
        if cluster_arg(&mut z.cluster, a)? {
            continue;
        }
        if let Some(v) = a.strip_prefix(b"zone=") {
            let colon = v
                .iter()
                .position(|&c| c == b':')
                .ok_or_else(|| quoted("invalid zone size", a))?;
            z.name = &v[..colon];
            z.spec.size =
                parse_size(&lossy(&v[colon + 1..])).map_err(|_| quoted("invalid zone size", a))?;
            if z.spec.size < min_size {
                let mut m = quoted("zone", a);
                m.extend_from_slice(b" is too small");
                return Err(m);
            }
        } else if let Some(v) = a.strip_prefix(b"rate=").filter(|_| !conn) {
            // a bare number is requests per second, as with limit_req
            let mut text = lossy(v);
            if !v.is_empty() && v.len() <= 20 && v.iter().all(u8::is_ascii_digit) {
                text.push_str("r/s");
            }
            let r = parse_rate(&text).map_err(String::into_bytes)?;
            z.spec.rate = weir_rate {
                count: r.count,
                period_ns: r.period_ns,
            };
        } else if let Some(v) = a.strip_prefix(b"events=").filter(|_| !conn) {
            z.events = positive(v, "invalid events", a)?;
        } else if let Some(v) = a.strip_prefix(b"window=").filter(|_| !conn) {
            z.window_ms = parse_duration(&lossy(v))
                .ok()
                .and_then(|d| u64::try_from(d.as_millis()).ok())
                .filter(|&ms| ms > 0)
                .ok_or_else(|| quoted("invalid window", a))?;
        } else if a == b"max=auto" && conn {
            z.learn = true;
        } else if let Some(v) = a.strip_prefix(b"bounds=").filter(|_| conn) {
            let (lo, hi) = v
                .iter()
                .position(|&c| c == b':')
                .map(|i| (&v[..i], &v[i + 1..]))
                .ok_or_else(|| quoted("invalid bounds", a))?;
            z.bounds = Some((
                positive(lo, "invalid bounds", a)?,
                positive(hi, "invalid bounds", a)?,
            ));
        } else if let Some(v) = a.strip_prefix(b"reserve=").filter(|_| conn) {
            z.reserve = positive(v, "invalid reserve", a)?;
        } else if let Some(v) = a.strip_prefix(b"lease=").filter(|_| conn) {
            z.lease_ms = parse_duration(&lossy(v))
                .ok()
                .and_then(|d| u64::try_from(d.as_millis()).ok())
                .filter(|&ms| ms > 0)
                .ok_or_else(|| quoted("invalid lease", a))?;
        } else {
            return Err(quoted("invalid parameter", a));
        }
    }
    if z.name.is_empty() {
        return Err(must_have_zone(args[0]));
    }
    if z.bounds.is_some() && !z.learn {
        return Err(b"\"bounds\" needs \"max=auto\"".to_vec());
    }
    Ok(z)
}

/// Reads one of a zone directive's cluster settings (`scope=`, `redis=` …, the policy zone's
/// names) into `cluster`; false when `a` is none of them.
fn cluster_arg(cluster: &mut Option<HostCluster>, a: &[u8]) -> Result<bool, Msg> {
    let Some(eq) = a.iter().position(|&c| c == b'=') else {
        return Ok(false);
    };
    let (key, v) = (&a[..eq], lossy(&a[eq + 1..]));
    let field: fn(&mut HostCluster) -> &mut Option<String> = match key {
        b"scope" => |c| &mut c.scope,
        b"redis_mode" => |c| &mut c.redis_mode,
        b"sentinel_master" => |c| &mut c.sentinel_master,
        b"password" => |c| &mut c.password,
        b"tls_ca_file" => |c| &mut c.tls_ca_file,
        b"tls_cert_file" => |c| &mut c.tls_cert_file,
        b"tls_key_file" => |c| &mut c.tls_key_file,
        b"sync_interval" => |c| &mut c.sync_interval,
        b"redis" => {
            cluster
                .get_or_insert_with(HostCluster::default)
                .redis
                .push(v);
            return Ok(true);
        }
        b"expected_nodes" => {
            let n = positive(&a[eq + 1..], "invalid expected_nodes", a)?;
            cluster
                .get_or_insert_with(HostCluster::default)
                .expected_nodes = Some(n);
            return Ok(true);
        }
        _ => return Ok(false),
    };
    *field(cluster.get_or_insert_with(HostCluster::default)) = Some(v);
    Ok(true)
}

fn zone_spec(z: &mut ZoneArgs, conn: bool) -> Result<(), Msg> {
    let s = &mut z.spec;
    if conn {
        // each weir_conn gives its own number
        s.algorithm = WEIR_ALGORITHM_CONCURRENCY;
    } else if z.events != 0 || z.window_ms != 0 {
        if s.rate.count != 0 {
            return Err(b"\"rate\" cannot be combined with \"events\" and \"window\"".to_vec());
        }
        if z.events == 0 || z.window_ms == 0 {
            return Err(b"a sliding window needs both \"events\" and \"window\"".to_vec());
        }
        s.algorithm = WEIR_ALGORITHM_SLIDING;
        s.events = z.events;
        s.window_ns = z.window_ms * 1_000_000;
    } else {
        s.algorithm = WEIR_ALGORITHM_GCRA;
        if s.rate.count == 0 {
            s.rate = weir_rate {
                count: 1,
                period_ns: 1_000_000_000,
            };
        }
    }
    Ok(())
}

fn limit_args(args: &[&[u8]], conn: bool, out: &mut weir_directive_limit) -> Result<(), Msg> {
    let mut zone: &[u8] = &[];
    if conn {
        // weir_conn ZONE N, or ZONE auto on a zone with max=auto (0: the zone's learned limit)
        zone = args.get(1).copied().unwrap_or_default();
        let n = args.get(2).copied().unwrap_or_default();
        out.max = if n == b"auto" {
            0
        } else {
            positive(n, "invalid number of connections", n)?
        };
        if out.max > 65535 {
            return Err(b"connection limit must be less 65536".to_vec());
        }
        out.zone = zone.as_ptr();
        out.zone_len = zone.len();
        return Ok(());
    }
    for &a in args.iter().skip(1) {
        if let Some(v) = a.strip_prefix(b"zone=") {
            zone = v;
        } else if let Some(v) = a.strip_prefix(b"burst=") {
            out.burst = positive(v, "invalid burst value", a)?;
        } else if let Some(v) = a.strip_prefix(b"delay=") {
            out.delay = positive(v, "invalid delay value", a)? as i64;
        } else if a == b"nodelay" {
            out.delay = -1;
        } else {
            return Err(quoted("invalid parameter", a));
        }
    }
    if zone.is_empty() {
        return Err(must_have_zone(args[0]));
    }
    if out.delay > 0 && out.delay as u64 > out.burst {
        // nginx lets a delay beyond the burst mean nodelay
        out.delay = -1;
    }
    out.zone = zone.as_ptr();
    out.zone_len = zone.len();
    Ok(())
}

/// The caller's words as byte slices; at least one (the directive's name).
unsafe fn words<'a>(args: *const weir_arg, nargs: usize) -> Result<Vec<&'a [u8]>, c_int> {
    if args.is_null() || nargs == 0 {
        return Err(WEIR_ERR_NULL);
    }
    std::slice::from_raw_parts(args, nargs)
        .iter()
        .map(|a| bytes(a.data, a.len))
        .collect()
}

/// Stores a parsed value with `store` and clears `err`, or writes the message into `err`.
unsafe fn answer<T>(
    parsed: Result<T, Msg>,
    err: *mut c_char,
    err_len: usize,
    store: impl FnOnce(T),
) -> c_int {
    match parsed {
        Ok(v) => {
            store(v);
            write_bytes(err, err_len, b"");
            WEIR_OK
        }
        Err(m) => {
            write_bytes(err, err_len, &m);
            WEIR_ERR_INVALID
        }
    }
}

/// Writes `msg` NUL-terminated into `buf` (`cap` bytes), cut to fit; nothing when `cap` is 0.
unsafe fn write_bytes(buf: *mut c_char, cap: usize, msg: &[u8]) {
    if cap == 0 || buf.is_null() {
        return;
    }
    let n = msg.len().min(cap - 1);
    ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
    *buf.add(n) = 0;
}

/// Reads a `weir_req_zone` (`conn` 0) or `weir_conn_zone` (`conn` 1) directive: `args` are all
/// its words, the name and the key first (`zone=NAME:SIZE` at least `min_size` bytes, `rate=`,
/// `events=` with `window=`; `lease=` for conn), and declares its zone in `b`, whose name
/// (bytes of the caller's argument) goes to `*name`. WEIR_ERR_INVALID with nginx's message
/// in `err` for a bad or missing argument.
#[no_mangle]
pub unsafe extern "C" fn weir_host_limits_zone_args(
    b: *mut weir_host_limits,
    args: *const weir_arg,
    nargs: usize,
    conn: c_int,
    min_size: u64,
    name: *mut weir_arg,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    guard(|| {
        if b.is_null() || name.is_null() || (err.is_null() && err_len > 0) {
            return WEIR_ERR_NULL;
        }
        let args = match words(args, nargs) {
            Ok(a) => a,
            Err(code) => return code,
        };
        let parsed = zone_args(&args, conn != 0, min_size).and_then(|mut z| {
            zone_spec(&mut z, conn != 0)?;
            let rc = declare_zone(&mut *b, z.name, &z.spec);
            if rc != WEIR_OK {
                return Err(quoted("invalid zone name", z.name));
            }
            // The name is UTF-8: declare_zone took it. Ranges are checked by the build.
            let name = String::from_utf8_lossy(z.name);
            if z.lease_ms > 0 {
                (*b).b.lease(&name, Duration::from_millis(z.lease_ms));
            }
            if z.learn || z.reserve > 0 {
                (*b).b
                    .capacity(&name, z.learn.then_some(z.bounds), z.reserve);
            }
            if let Some(c) = z.cluster.take() {
                (*b).b.cluster(&name, c);
            }
            Ok(z.name)
        });
        answer(parsed, err, err_len, |n| {
            *name = weir_arg {
                len: n.len(),
                data: n.as_ptr(),
            }
        })
    })
}

/// Reads a `weir_req` (`conn` 0: `zone=NAME`, `burst=N`, `delay=N`, `nodelay`) or `weir_conn`
/// (`conn` 1: `ZONE N`) directive, all its words in `args`, into `*out`. WEIR_ERR_INVALID with
/// nginx's message in `err` for a bad or missing argument.
#[no_mangle]
pub unsafe extern "C" fn weir_limit_args(
    args: *const weir_arg,
    nargs: usize,
    conn: c_int,
    out: *mut weir_directive_limit,
    err: *mut c_char,
    err_len: usize,
) -> c_int {
    guard(|| {
        if out.is_null() || (err.is_null() && err_len > 0) {
            return WEIR_ERR_NULL;
        }
        let args = match words(args, nargs) {
            Ok(a) => a,
            Err(code) => return code,
        };
        let mut l = weir_directive_limit::empty();
        let parsed = limit_args(&args, conn != 0, &mut l);
        answer(parsed, err, err_len, |()| *out = l)
    })
}

/// Declares the limit of a `weir_req` / `weir_conn` directive (`l`, as `weir_limit_args` read
/// it) for locations with `dry_run` and `status` (0: 429): keyed by its zone's variable
/// (`var:ZONE`), logged at the error level. `origin` (not 0) is the host's handle of the
/// directive: a second call with the same origin, dry run and status gives the same limit.
/// Its index goes to `*index_out`; WEIR_ERR_INVALID for a zone name that is not UTF-8 or a
/// delay below -1.
#[no_mangle]
pub unsafe extern "C" fn weir_host_limits_select(
    b: *mut weir_host_limits,
    l: *const weir_directive_limit,
    dry_run: u8,
    status: u16,
    origin: u64,
    index_out: *mut u16,
) -> c_int {
    guard(|| {
        if b.is_null() || l.is_null() || index_out.is_null() {
            return WEIR_ERR_NULL;
        }
        let (b, l) = (&mut *b, &*l);
        let id = (origin, dry_run != 0, status);
        if let Some(i) = b.origins.iter().position(|o| origin != 0 && *o == id) {
            *index_out = u16::try_from(i).unwrap_or(u16::MAX);
            return WEIR_OK;
        }
        let zone = match bytes(l.zone, l.zone_len).map(std::str::from_utf8) {
            Ok(Ok(z)) => z,
            _ => return WEIR_ERR_INVALID,
        };
        let delay = match l.delay {
            -1 => Delay::NoDelay,
            0 => Delay::Delay,
            n if n > 0 => Delay::After(n as u64),
            _ => return WEIR_ERR_INVALID,
        };
        let limit = HostLimit {
            key: vec![format!("var:{zone}")],
            burst: l.burst,
            delay,
            dry_run: dry_run != 0,
            status: if status == 0 { 429 } else { status },
            log_level: LogLevel::Error,
            max: (l.max != 0).then_some(l.max),
            ..HostLimit::default()
        };
        b.origins.push(id);
        *index_out = b.b.limit(zone, limit);
        WEIR_OK
    })
}

/// The `origin` limit `index` was selected with (`weir_host_limits_select`), 0 for none.
#[no_mangle]
pub unsafe extern "C" fn weir_host_limits_origin(b: *const weir_host_limits, index: i64) -> u64 {
    let Some(b) = b.as_ref() else {
        return 0;
    };
    usize::try_from(index)
        .ok()
        .and_then(|i| b.origins.get(i))
        .map_or(0, |o| o.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(words: &[&str], conn: bool) -> Result<(String, weir_zone_spec), String> {
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        let mut z = zone_args(&args, conn, 32768).map_err(|m| lossy(&m))?;
        zone_spec(&mut z, conn).map_err(|m| lossy(&m))?;
        Ok((lossy(z.name), z.spec))
    }

    fn limit(words: &[&str], conn: bool) -> Result<(String, u64, i64, u64), String> {
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        let mut l = weir_directive_limit::empty();
        limit_args(&args, conn, &mut l).map_err(|m| lossy(&m))?;
        let z = unsafe { std::slice::from_raw_parts(l.zone, l.zone_len) };
        Ok((lossy(z), l.burst, l.delay, l.max))
    }

    #[test]
    fn conn_zones_may_learn_their_limit() {
        let args = [
            "z",
            "$k",
            "zone=app:1m",
            "max=auto",
            "bounds=4:400",
            "reserve=2",
        ];
        let words: Vec<&[u8]> = args.iter().map(|w| w.as_bytes()).collect();
        let z = zone_args(&words, true, 32768).unwrap();
        assert!(z.learn);
        assert_eq!((z.bounds, z.reserve), (Some((4, 400)), 2));
        assert_eq!(limit(&["weir_conn", "app", "auto"], true).unwrap().3, 0);
        let bad = |w: &[&str]| zone(w, true).unwrap_err();
        assert_eq!(
            bad(&["z", "$k", "zone=a:1m", "bounds=4:400"]),
            "\"bounds\" needs \"max=auto\""
        );
        assert_eq!(
            bad(&["z", "$k", "zone=a:1m", "max=auto", "bounds=4"]),
            "invalid bounds \"bounds=4\""
        );
    }

    #[test]
    fn zones_read_as_nginx_reads_them() {
        let (n, s) = zone(&["weir_req_zone", "$k", "zone=a:1m", "rate=5"], false).unwrap();
        assert_eq!(
            (n.as_str(), s.size, s.algorithm),
            ("a", 1 << 20, WEIR_ALGORITHM_GCRA)
        );
        assert_eq!((s.rate.count, s.rate.period_ns), (5, 1_000_000_000));
        let (_, s) = zone(&["z", "$k", "zone=a:1m", "events=3", "window=2s"], false).unwrap();
        assert_eq!(
            (s.algorithm, s.events, s.window_ns),
            (WEIR_ALGORITHM_SLIDING, 3, 2_000_000_000)
        );
        let (_, s) = zone(&["z", "$k", "zone=c:1m", "lease=5s"], true).unwrap();
        assert_eq!(s.algorithm, WEIR_ALGORITHM_CONCURRENCY);
        // Cluster settings, with the policy zone's names; redis repeats.
        let words = ["z", "$k", "zone=c:1m", "scope=cluster", "redis=redis://a:1"];
        let args: Vec<&[u8]> = (words
            .iter()
            .chain(&["redis=redis://b:1", "expected_nodes=3"]))
        .map(|w| w.as_bytes())
        .collect();
        let c = zone_args(&args, true, 32768).unwrap().cluster.unwrap();
        assert_eq!(c.scope.as_deref(), Some("cluster"));
        assert_eq!((c.redis.len(), c.expected_nodes), (2, Some(3)));
        let e = zone(&["z", "$k", "zone=c:1m", "expected_nodes=x"], true).unwrap_err();
        assert_eq!(e, "invalid expected_nodes \"expected_nodes=x\"");
        let bad = |w: &[&str], conn| zone(w, conn).unwrap_err();
        assert_eq!(
            bad(&["z", "$k", "zone=a"], false),
            "invalid zone size \"zone=a\""
        );
        assert_eq!(
            bad(&["z", "$k", "zone=a:1k"], false),
            "zone \"zone=a:1k\" is too small"
        );
        assert_eq!(
            bad(&["z", "$k", "zone=a:1m", "rate=1r/s"], true),
            "invalid parameter \"rate=1r/s\""
        );
        assert_eq!(
            bad(&["z", "$k", "zone=a:1m", "lease=0s"], true),
            "invalid lease \"lease=0s\""
        );
        assert_eq!(
            bad(&["z", "$k", "zone=a:1m", "lease=5s"], false),
            "invalid parameter \"lease=5s\""
        );
        assert_eq!(
            bad(&["z", "$k", "events=+1"], false),
            "invalid events \"events=+1\""
        );
        assert_eq!(
            bad(&["z", "$k", "window=0s"], false),
            "invalid window \"window=0s\""
        );
        assert_eq!(
            bad(&["weir_req_zone", "$k"], false),
            "\"weir_req_zone\" must have \"zone\" parameter"
        );
        assert!(
            bad(&["z", "$k", "zone=a:1m", "rate=fast"], false).starts_with("invalid rate \"fast\"")
        );
        assert_eq!(
            bad(&["z", "$k", "zone=a:1m", "rate=1r/s", "events=1"], false),
            "\"rate\" cannot be combined with \"events\" and \"window\""
        );
        assert_eq!(
            bad(&["z", "$k", "zone=a:1m", "events=1"], false),
            "a sliding window needs both \"events\" and \"window\""
        );
    }

    #[test]
    fn limits_read_as_nginx_reads_them() {
        assert_eq!(
            limit(&["weir_req", "zone=a", "burst=5", "delay=2"], false).unwrap(),
            ("a".into(), 5, 2, 0)
        );
        assert_eq!(
            limit(&["weir_req", "zone=a", "delay=9"], false).unwrap(),
            ("a".into(), 0, -1, 0)
        );
        assert_eq!(
            limit(&["weir_req", "zone=a", "nodelay"], false).unwrap(),
            ("a".into(), 0, -1, 0)
        );
        assert_eq!(
            limit(&["weir_conn", "c", "10"], true).unwrap(),
            ("c".into(), 0, 0, 10)
        );
        let bad = |w: &[&str], conn| limit(w, conn).unwrap_err();
        assert_eq!(
            bad(&["weir_req", "zone=a", "burst=0"], false),
            "invalid burst value \"burst=0\""
        );
        assert_eq!(
            bad(&["weir_req", "zone=a", "delay=x"], false),
            "invalid delay value \"delay=x\""
        );
        assert_eq!(
            bad(&["weir_req", "zone=a", "fast"], false),
            "invalid parameter \"fast\""
        );
        assert_eq!(
            bad(&["weir_req", "burst=1"], false),
            "\"weir_req\" must have \"zone\" parameter"
        );
        assert_eq!(
            bad(&["weir_conn", "c", "0"], true),
            "invalid number of connections \"0\""
        );
        assert_eq!(
            bad(&["weir_conn", "c", "65536"], true),
            "connection limit must be less 65536"
        );
    }

    #[test]
    fn locations_that_agree_share_a_limit() {
        let b = crate::weir_host_limits_new();
        let l = weir_directive_limit {
            zone: b"one".as_ptr(),
            zone_len: 3,
            burst: 5,
            delay: -1,
            max: 0,
        };
        let select = |dry_run, status, origin| {
            let mut index = u16::MAX;
            let rc = unsafe { weir_host_limits_select(b, &l, dry_run, status, origin, &mut index) };
            (rc, index)
        };
        assert_eq!(select(0, 503, 7), (WEIR_OK, 0));
        assert_eq!(select(0, 503, 7), (WEIR_OK, 0));
        assert_eq!(select(1, 503, 7), (WEIR_OK, 1));
        assert_eq!(select(0, 503, 8), (WEIR_OK, 2));
        let origin = |i| unsafe { weir_host_limits_origin(b, i) };
        assert_eq!((origin(1), origin(2), origin(3), origin(-1)), (7, 8, 0, 0));
        let bad = weir_directive_limit { delay: -2, ..l };
        let mut index = 0;
        let rc = unsafe { weir_host_limits_select(b, &bad, 0, 503, 9, &mut index) };
        assert_eq!(rc, WEIR_ERR_INVALID);
        unsafe { crate::weir_host_limits_free(b) };
    }
}
