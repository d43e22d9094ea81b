//! Zones: size, algorithm, rate, scope (local or cluster).

use super::*;

pub(super) fn compile_zone(cx: &mut Cx<'_>, name: &str, z: &Spanned<ZoneSpec>) -> Option<Zone> {
    let zs = z.get_ref();
    let size = match zs.size.get_ref() {
        Scalar::Int(n) if *n > 0 => Some(*n as u64),
        Scalar::Int(n) => {
            cx.err(
                &zs.size.span(),
                format!("zone size must be positive, not {n}"),
            );
            None
        }
        Scalar::Str(s) => match parse_size_sub(s) {
            Ok(0) => {
                cx.err(&zs.size.span(), "zone size must be positive, like \"10m\"");
                None
            }
            Ok(n) => Some(n),
            Err(e) => {
                cx.err_sub(&zs.size.span(), s, e);
                None
            }
        },
    };
    let alg = match zs.algorithm.get_ref().as_str() {
        // The exact sliding log's earlier name, still accepted.
        "log" => "sliding_log",
        other => other,
    };
    let allowed: &[&str] = match alg {
        "gcra" => &["rate"],
        "sliding" | "sliding_log" => &["events", "window"],
        "concurrency" => &["max"],
        other => {
            cx.err(
                &zs.algorithm.span(),
                format!("unknown algorithm {other:?}; expected \"gcra\", \"sliding\", \"sliding_log\" or \"concurrency\""),
            );
            return None;
        }
    };
    let present: [(&str, Option<Range<usize>>); 4] = [
        ("rate", zs.rate.as_ref().map(|v| v.span())),
        ("events", zs.events.as_ref().map(|v| v.span())),
        ("window", zs.window.as_ref().map(|v| v.span())),
        ("max", zs.max.as_ref().map(|v| v.span())),
    ];
    let mut ok = true;
    for (field, span) in &present {
        if let Some(span) = span {
            if !allowed.contains(field) {
                let owner = match *field {
                    "rate" => "gcra",
                    "max" => "concurrency",
                    _ => "sliding or sliding_log",
                };
                cx.err(
                    span,
                    format!("`{field}` is a {owner} parameter; zone {name:?} uses algorithm {alg:?}, which takes {}", fields(allowed)),
                );
                ok = false;
            }
        }
    }
    for field in allowed {
        if present.iter().any(|(f, s)| f == field && s.is_none()) {
            let example = match *field {
                "rate" => "rate = \"10r/s\"",
                "events" => "events = 100",
                "window" => "window = \"1m\"",
                _ => "max = 10",
            };
            cx.err(
                &zs.algorithm.span(),
                format!("zone {name:?}: algorithm {alg:?} needs `{field}` (e.g. {example})"),
            );
            ok = false;
        }
    }
    if !ok {
        return None;
    }
    // Sliding and concurrency states count up to MAX_COUNT (src/limiter/packed.rs).
    let most = crate::limiter::MAX_COUNT as i64;
    let mut learned = None;
    let algorithm = match alg {
        "gcra" => {
            let r = zs.rate.as_ref()?;
            match parse_rate_sub(r.get_ref()) {
                Ok(rate) => Algorithm::Gcra { rate },
                Err(e) => {
                    cx.err_sub(&r.span(), r.get_ref(), e);
                    return None;
                }
            }
        }
        "sliding" => {
            let events = positive(cx, zs.events.as_ref()?, "events", 1, most);
            let w = zs.window.as_ref()?;
            let window = duration_value(cx, w)?;
            if window < Duration::from_secs(1) || window > Duration::from_secs(7 * 86400) {
                cx.err(&w.span(), "sliding window must be between 1s and 7d");
                return None;
            }
            Algorithm::Sliding {
                events: events?,
                window,
            }
        }
        "sliding_log" => {
            let max = crate::table::MAX_LOG_EVENTS;
            let events = zs.events.as_ref()?;
            {
                let n = *events.get_ref();
                if n > max as i64 {
                    cx.err(
                        &events.span(),
                        format!("a sliding_log zone keeps at most {max} events per key (8 bytes each), got {n}; use algorithm = \"sliding\" for larger counts"),
                    );
                    return None;
                }
            }
            let events = positive(cx, events, "events", 1, max as i64);
            let w = zs.window.as_ref()?;
            let window = duration_value(cx, w)?;
            if window < Duration::from_millis(1) || window > Duration::from_secs(7 * 86400) {
                cx.err(&w.span(), "log window must be between 1ms and 7d");
                return None;
            }
            Algorithm::SlidingLog {
                events: events?,
                window,
            }
        }
        _ => {
            let (max, learn) = compile_max(cx, name, zs.max.as_ref()?, zs.bounds.as_ref())?;
            learned = learn;
            Algorithm::Concurrency { max }
        }
    };
    let reserve = compile_reserve(cx, name, zs, &algorithm)?;
    if alg != "concurrency" {
        if let Some(b) = &zs.bounds {
            cx.err(
                &b.span(),
                format!("`bounds` belongs to max = \"auto\" on a concurrency zone; zone {name:?} uses algorithm {alg:?}"),
            );
            return None;
        }
    }
    let lease = compile_lease(cx, name, zs, alg)?;
    let cluster = compile_cluster(cx, name, zs, &algorithm).ok()?;
    let size = size?;
    if let Some(e) = super::zone_size::size_error(size, &algorithm) {
        cx.err(&zs.size.span(), format!("zone {name:?}: {e}"));
        return None;
    }
    Some(Zone {
        name: name.to_owned(),
        size,
        algorithm,
        lease,
        cluster,
        learn: learned,
        reserve,
    })
}

/// Default bounds of a learned limit.
pub const AUTO_BOUNDS: (u64, u64) = (1, 1000);

/// A concurrency zone's `max`: a number, or `"auto"` with optional `bounds = [MIN, MAX]`;
/// the fixed max (the upper bound when learned) and the learned limit's bounds.
fn compile_max(
    cx: &mut Cx<'_>,
    name: &str,
    max: &Spanned<Scalar>,
    bounds: Option<&Spanned<Vec<Spanned<i64>>>>,
) -> Option<(u64, Option<crate::limiter::Adaptive>)> {
    let most = crate::limiter::MAX_COUNT as i64;
    match max.get_ref() {
        Scalar::Int(n) => {
            if let Some(b) = bounds {
                cx.err(
                    &b.span(),
                    format!("`bounds` applies only to max = \"auto\"; zone {name:?} has max = {n}"),
                );
                return None;
            }
            positive(cx, &Spanned::new(max.span(), *n), "max", 1, most).map(|m| (m, None))
        }
        Scalar::Str(s) if s == "auto" => {
            let (lo, hi) = match bounds {
                None => AUTO_BOUNDS,
                Some(b) => {
                    let [lo, hi] = b.get_ref().as_slice() else {
                        cx.err(
                            &b.span(),
                            "bounds is [MIN, MAX], two numbers, like [2, 400]",
                        );
                        return None;
                    };
                    let lo = positive(cx, lo, "bounds' MIN", 1, 65_535)?;
                    let hi_v = positive(cx, hi, "bounds' MAX", 1, 65_535)?;
                    if lo > hi_v {
                        cx.err(
                            &b.span(),
                            format!("bounds out of order: MIN {lo} is above MAX {hi_v} (write [MIN, MAX])"),
                        );
                        return None;
                    }
                    (lo, hi_v)
                }
            };
            let a = crate::limiter::Adaptive::new(lo, hi).ok()?;
            Some((hi, Some(a)))
        }
        Scalar::Str(s) => {
            cx.err(
                &max.span(),
                format!("max must be a number of requests or \"auto\" (learned from latency), not {s:?}"),
            );
            None
        }
    }
}

/// A concurrency zone's `reserve`: slots only critical requests may take (0 by default).
fn compile_reserve(
    cx: &mut Cx<'_>,
    name: &str,
    zs: &ZoneSpec,
    algorithm: &Algorithm,
) -> Option<u64> {
    let Some(r) = &zs.reserve else {
        return Some(0);
    };
    let Algorithm::Concurrency { max } = algorithm else {
        cx.err(
            &r.span(),
            format!(
                "`reserve` is a concurrency parameter; zone {name:?} uses algorithm {:?}",
                algorithm.name()
            ),
        );
        return None;
    };
    let n = positive(cx, r, "reserve", 0, crate::limiter::MAX_COUNT as i64)?;
    if n >= *max {
        cx.err(
            &r.span(),
            format!("reserve = {n} leaves no slot for other lanes: it must be below the zone's max ({max})"),
        );
        return None;
    }
    Some(n)
}

/// Shortest and longest lease: renewals run every quarter lease in every worker.
const LEASES: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(86_400));

/// A concurrency zone's `lease` (the default when absent).
fn compile_lease(cx: &mut Cx<'_>, name: &str, zs: &ZoneSpec, alg: &str) -> Option<Duration> {
    let default = Duration::from_nanos(crate::limiter::concurrency::DEFAULT_LEASE_NS);
    let Some(v) = &zs.lease else {
        return Some(default);
    };
    if alg != "concurrency" {
        cx.err(
            &v.span(),
            format!("`lease` is a concurrency parameter; zone {name:?} uses algorithm {alg:?}"),
        );
        return None;
    }
    let lease = duration_value(cx, v)?;
    if lease < LEASES.0 || lease > LEASES.1 {
        cx.err(&v.span(), "lease must be between 1s and 1d");
        return None;
    }
    Some(lease)
}

/// `scope = "cluster"` and its settings. Sliding windows: their state is a pair of counters,
/// which sum across nodes exactly (Redis `INCRBY` on one counter per window). Concurrency:
/// shares of `max` leased per node (src/cluster/pool.rs). GCRA: one cluster-wide theoretical
/// arrival time per key, merged into each node's state (src/cluster/gcra.rs).
pub(super) fn compile_cluster(
    cx: &mut Cx<'_>,
    name: &str,
    zs: &ZoneSpec,
    algorithm: &Algorithm,
) -> Result<Option<crate::cluster::ClusterSpec>, ()> {
    let settings: Vec<(&str, Option<Range<usize>>)> = redis_settings(zs)
        .into_iter()
        .chain([
            ("password", zs.password.as_ref().map(|v| v.span())),
            ("sync_interval", zs.sync_interval.as_ref().map(|v| v.span())),
            (
                "expected_nodes",
                zs.expected_nodes.as_ref().map(|v| v.span()),
            ),
            ("fallback", zs.fallback.as_ref().map(|v| v.span())),
        ])
        .collect();
    let scope = match &zs.scope {
        None => None,
        Some(s) => match s.get_ref().as_str() {
            "local" => None,
            "cluster" => Some(s.span()),
            other => {
                cx.err(
                    &s.span(),
                    format!("unknown scope {other:?}; expected \"local\" (default) or \"cluster\""),
                );
                return Err(());
            }
        },
    };
    let Some(scope) = scope else {
        let mut ok = true;
        for (field, span) in &settings {
            if let Some(span) = span {
                cx.err(
                    span,
                    format!("`{field}` applies only to zones with scope = \"cluster\"; zone {name:?} is local"),
                );
                ok = false;
            }
        }
        return if ok { Ok(None) } else { Err(()) };
    };
    // A sliding zone syncs counts of `events` per `window`; a concurrency zone leases shares
    // of `max` (src/cluster/pool.rs) and a GCRA zone exchanges its arrival time
    // (src/cluster/gcra.rs): their interval only has to be short against a request (at most
    // 5 s, a quarter of the 20 s stand-in window).
    let (events, window) = match *algorithm {
        Algorithm::Sliding { events, window } => (events, window),
        Algorithm::Concurrency { max } => (max, Duration::from_secs(20)),
        Algorithm::Gcra { rate } => (rate.count, Duration::from_secs(20)),
        Algorithm::SlidingLog { .. } => {
            cx.err(
                &scope,
                format!("zone {name:?}: scope = \"cluster\" supports sliding, gcra and concurrency zones; a sliding_log zone's per-key event times are not shared across nodes"),
            );
            return Err(());
        }
    };
    let mut ok = true;
    let target = compile_redis(cx, name, zs, &scope);
    ok &= target.is_some();
    let sync_interval = match &zs.sync_interval {
        None => crate::cluster::DEFAULT_SYNC_INTERVAL,
        Some(v) => match duration_value(cx, v) {
            Some(d) if d >= Duration::from_millis(10) && d * 4 <= window => d,
            Some(_) => {
                cx.err(
                    &v.span(),
                    if !matches!(algorithm, Algorithm::Sliding { .. }) {
                        "sync_interval must be at least 10ms and at most 5s"
                    } else {
                        "sync_interval must be at least 10ms and at most a quarter of the window"
                    },
                );
                ok = false;
                Duration::ZERO
            }
            None => {
                ok = false;
                Duration::ZERO
            }
        },
    };
    let expected_nodes = match &zs.expected_nodes {
        None => {
            cx.err(
                &scope,
                format!("zone {name:?}: scope = \"cluster\" needs `expected_nodes` (nodes sharing the limit; each admits events ÷ expected_nodes while Redis is unreachable)"),
            );
            ok = false;
            1
        }
        Some(v) => match positive(cx, v, "expected_nodes", 1, 1024) {
            Some(n) if n > events => {
                let what = match algorithm {
                    Algorithm::Concurrency { .. } => "max",
                    Algorithm::Gcra { .. } => "the rate's count",
                    _ => "events",
                };
                cx.err(
                    &v.span(),
                    format!("expected_nodes ({n}) exceeds {what} ({events}): the fallback share {what} ÷ expected_nodes would be 0"),
                );
                ok = false;
                n
            }
            Some(n) => n,
            None => {
                ok = false;
                1
            }
        },
    };
    if let Some(f) = &zs.fallback {
        if f.get_ref() != "local" {
            cx.err(
                &f.span(),
                format!(
                    "unknown fallback {:?}; expected \"local\" (events ÷ expected_nodes per node)",
                    f.get_ref()
                ),
            );
            ok = false;
        }
    }
    let Some(RedisTarget { urls, mode, tls }) = target.filter(|_| ok) else {
        return Err(());
    };
    let spec = crate::cluster::ClusterSpec {
        redis: urls,
        mode,
        password: zs.password.as_ref().map(|p| p.get_ref().clone()),
        tls,
        sync_interval,
        expected_nodes,
        fallback: crate::cluster::Fallback::Local,
    };
    // What the client library refuses (unparsable PEM, seed nodes with different passwords…).
    if let Err(e) = crate::cluster::check_spec(&spec) {
        let at = zs.redis.as_ref().map_or(scope, |r| r.span());
        cx.err(&at, format!("zone {name:?}: redis settings: {e}"));
        return Err(());
    }
    Ok(Some(spec))
}

pub(super) fn fields(list: &[&str]) -> String {
    list.iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(" and ")
}
