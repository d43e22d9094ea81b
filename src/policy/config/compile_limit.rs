//! Limits: keys, bursts, delays, statuses and their checks.

use super::*;

pub(super) fn compile_key(cx: &mut Cx<'_>, l: &LimitSpec) -> Option<KeySpec> {
    let mut parts = Vec::new();
    let mut ok = true;
    let mut ip_span = None;
    match &l.key {
        None => {
            parts.push(KeyPart::IP);
        }
        Some(list) => {
            if !nonempty_list(cx, list, "key") {
                return None;
            }
            let mut seen: Vec<&str> = Vec::new();
            let multi = list.get_ref().0.len() > 1;
            for (p, span) in items(list) {
                if seen.contains(&p) {
                    cx.err(&span, format!("key part {p:?} is listed twice"));
                    ok = false;
                    continue;
                }
                seen.push(p);
                let part = match p {
                    "ip" => {
                        ip_span = Some(span.clone());
                        KeyPart::IP
                    }
                    "global" if multi => {
                        cx.err(
                            &span,
                            "\"global\" cannot be combined with other key parts; use it alone",
                        );
                        ok = false;
                        continue;
                    }
                    "global" => KeyPart::Global,
                    "path" => KeyPart::Path,
                    "method" => KeyPart::Method,
                    _ => {
                        let named = [
                            ("header:", "header"),
                            ("cookie:", "cookie"),
                            ("var:", "variable"),
                        ]
                        .into_iter()
                        .find_map(|(prefix, what)| p.strip_prefix(prefix).map(|n| (what, n)));
                        match named {
                            Some((what, n)) if is_token(n) && n.len() <= 255 => match what {
                                "header" => {
                                    KeyPart::Header(n.to_ascii_lowercase().into_bytes().into())
                                }
                                "cookie" => KeyPart::Cookie(n.as_bytes().into()),
                                // The index is given once every limit is compiled.
                                _ => KeyPart::Var {
                                    name: n.as_bytes().into(),
                                    index: 0,
                                    mask: VarMask::default(),
                                },
                            },
                            Some((what, n)) => {
                                cx.err(
                                    &span,
                                    format!("invalid {what} name {n:?} in key part {p:?}"),
                                );
                                ok = false;
                                continue;
                            }
                            None => {
                                cx.err(
                                    &span,
                                    format!("unknown key part {p:?}; expected \"ip\", \"global\", \"path\", \"method\", \"header:NAME\", \"cookie:NAME\" or \"var:NAME\""),
                                );
                                ok = false;
                                continue;
                            }
                        }
                    }
                };
                parts.push(part);
            }
        }
    }
    if l.key.is_none() {
        ip_span = Some(0..0);
    }
    let prefixes = [
        ("ipv4_prefix", &l.ipv4_prefix, 32),
        ("ipv6_prefix", &l.ipv6_prefix, 128),
    ];
    let mut v4 = 32u8;
    let mut v6 = 64u8;
    // Without an `ip` part, the prefixes mask `var:` values that are IP addresses.
    let has_var = parts.iter().any(|p| matches!(p, KeyPart::Var { .. }));
    let mut mask = VarMask::default();
    for (field, value, max) in prefixes {
        let Some(value) = value else { continue };
        if ip_span.is_none() && !has_var {
            cx.err(
                &value.span(),
                format!("`{field}` has no effect: the key has no \"ip\" or \"var:\" part"),
            );
            ok = false;
            continue;
        }
        match positive(cx, value, field, 0, max) {
            Some(n) if field == "ipv4_prefix" => (v4, mask.v4) = (n as u8, Some(n as u8)),
            Some(n) => (v6, mask.v6) = (n as u8, Some(n as u8)),
            None => ok = false,
        }
    }
    for p in &mut parts {
        match p {
            KeyPart::Ip {
                v4_prefix,
                v6_prefix,
            } => {
                *v4_prefix = v4;
                *v6_prefix = v6;
            }
            KeyPart::Var { mask: m, .. } if ip_span.is_none() => *m = mask,
            _ => {}
        }
    }
    ok.then(|| KeySpec::new(parts))
}

pub(super) fn compile_limit(
    cx: &mut Cx<'_>,
    l: &Spanned<LimitSpec>,
    spec: &FileSpec,
    zones: &[Zone],
    classes: &[Class],
) -> Option<Limit> {
    let ls = l.get_ref();
    let mut ok = true;

    // Classes.
    let mut class_idx = Vec::new();
    let mut class_names = Vec::new();
    if nonempty_list(cx, &ls.class, "class") {
        let list = &ls.class.get_ref().0;
        for (special, what) in [
            ("*", "(every request)"),
            (HOST_CLASS, "(the host selects the limit)"),
        ] {
            if list.len() > 1 && list.iter().any(|(c, _)| c == special) {
                cx.err(
                    &ls.class.span(),
                    format!("class {special:?} {what} cannot be combined with other classes"),
                );
                ok = false;
            }
        }
        for (c, span) in items(&ls.class) {
            class_names.push(c.to_owned());
            if c == "*" || c == HOST_CLASS {
                continue;
            }
            // `classes` is in the spec's (sorted) order, without "*".
            match classes.binary_search_by(|k| k.name.as_str().cmp(c)).ok() {
                Some(i) => class_idx.push(i),
                None if spec.classes.contains_key(c) => ok = false, // already reported
                None => {
                    cx.err(
                        &span,
                        format!(
                            "unknown class {c:?}; {}",
                            known("classes", spec.classes.keys())
                        ),
                    );
                    ok = false;
                }
            }
        }
    } else {
        ok = false;
    }

    // Zone.
    let zname = ls.zone.get_ref();
    // `zones` is in the spec's (sorted) order, without the zones in error.
    let zone = zones.binary_search_by(|z| z.name.cmp(zname)).ok();
    if zone.is_none() && !spec.zones.contains_key(zname.as_str()) {
        cx.err(
            &ls.zone.span(),
            format!(
                "unknown zone {zname:?}; {}",
                known("zones", spec.zones.keys())
            ),
        );
    }
    let key = compile_key(cx, ls);

    let name = match &ls.name {
        Some(n) => {
            check_name(cx, n, "limit");
            n.get_ref().clone()
        }
        None => format!("{}/{}", class_names.join("+"), zname),
    };

    let status = match &ls.status {
        None => DEFAULT_STATUS,
        Some(s) => positive(cx, s, "status", 400, 599).map_or(DEFAULT_STATUS, |n| n as u16),
    };
    let log_level = match ls.log_level.as_ref() {
        None => LogLevel::Error,
        Some(v) => match v.get_ref().as_str() {
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warn" => LogLevel::Warn,
            "error" => LogLevel::Error,
            other => {
                cx.err(
                    &v.span(),
                    format!("unknown log_level {other:?}; expected \"info\", \"notice\", \"warn\" or \"error\""),
                );
                LogLevel::Error
            }
        },
    };
    let cost = match &ls.cost {
        None => Some(1),
        Some(c) => positive(cx, c, "cost", 1, 1 << 32),
    };

    // Algorithm-specific options.
    let zone = zone?;
    let z = &zones[zone];
    let alg = z.algorithm.name();
    let wrong = |cx: &mut Cx<'_>, field: &str, span: Range<usize>, owner: &str| {
        cx.err(
            &span,
            format!(
                "`{field}` applies only to {owner} zones; zone {:?} is {alg}",
                z.name
            ),
        );
    };
    let is_gcra = matches!(z.algorithm, Algorithm::Gcra { .. });
    let is_conc = matches!(z.algorithm, Algorithm::Concurrency { .. });
    let gcra_fields = [
        ("burst", ls.burst.as_ref().map(|v| v.span())),
        ("delay", ls.delay.as_ref().map(|v| v.span())),
        ("nodelay", ls.nodelay.as_ref().map(|v| v.span())),
    ];
    let conc_fields = [
        ("lane", ls.lane.as_ref().map(|v| v.span())),
        ("max", ls.max.as_ref().map(|v| v.span())),
        ("queue", ls.queue.as_ref().map(|v| v.span())),
        ("timeout", ls.timeout.as_ref().map(|v| v.span())),
    ];
    for (f, span) in gcra_fields {
        if let (Some(span), false) = (span, is_gcra) {
            wrong(cx, f, span, "gcra");
            ok = false;
        }
    }
    for (f, span) in conc_fields {
        if let (Some(span), false) = (span, is_conc) {
            wrong(cx, f, span, "concurrency");
            ok = false;
        }
    }
    let mut burst = 0;
    let mut delay = Delay::Delay;
    let mut queue = 0;
    let mut timeout = DEFAULT_QUEUE_TIMEOUT;
    if is_gcra {
        if let Some(b) = &ls.burst {
            burst = positive(cx, b, "burst", 0, 1 << 32).unwrap_or(0);
        }
        match (&ls.delay, &ls.nodelay) {
            (Some(d), Some(_)) => {
                cx.err(
                    &d.span(),
                    "use either `delay = N` or `nodelay = true`, not both",
                );
                ok = false;
            }
            (Some(d), None) => {
                if let Some(n) = positive(cx, d, "delay", 0, 1 << 32) {
                    if n > burst {
                        cx.err(
                            &d.span(),
                            format!("delay = {n} exceeds burst = {burst}; delay counts excess requests passed without delay, so it must be at most the burst (or use nodelay = true)"),
                        );
                        ok = false;
                    }
                    delay = if n == 0 {
                        Delay::Delay
                    } else {
                        Delay::After(n)
                    };
                }
            }
            (None, Some(nd)) => {
                if *nd.get_ref() {
                    delay = Delay::NoDelay;
                }
            }
            (None, None) => {}
        }
    }
    let mut max = None;
    let mut lane = None;
    if is_conc {
        if let Some(l) = &ls.lane {
            lane = compile_lane(cx, l);
            ok &= lane.is_some();
        }
        if let (Some(m), Some(_)) = (&ls.max, &z.learn) {
            cx.err(
                &m.span(),
                format!("zone {:?} learns its limit (max = \"auto\"); bound it with the zone's `bounds` instead of a limit's `max`", z.name),
            );
            ok = false;
        }
        if let Some(m) = &ls.max {
            // Concurrency states count up to MAX_COUNT (src/limiter/packed.rs).
            max = positive(cx, m, "max", 1, crate::limiter::MAX_COUNT as i64);
            ok &= max.is_some();
        }
        if let Some(q) = &ls.queue {
            queue = positive(cx, q, "queue", 0, 1 << 32).unwrap_or(0);
        }
        if let Some(t) = &ls.timeout {
            if queue == 0 {
                cx.err(&t.span(), "`timeout` has no effect without `queue`; set queue = N (waiting requests) or remove timeout");
                ok = false;
            } else if let Some(d) = duration_value(cx, t) {
                if d.is_zero() || d > Duration::from_secs(3600) {
                    cx.err(&t.span(), "queue timeout must be between 1ms and 1h");
                    ok = false;
                } else {
                    timeout = d;
                }
            }
        }
    }
    let cost = cost?;
    if let (Algorithm::Gcra { rate }, Some(b)) = (z.algorithm, &ls.burst) {
        // The limiter keeps (burst + 1) emission intervals in ns (src/limiter/gcra.rs).
        let interval = rate.interval_ns().unwrap_or(1);
        if (burst + 1).checked_mul(interval).is_none() {
            cx.err(
                &b.span(),
                format!("burst = {burst} is too large for rate {rate}: (burst + 1) intervals must fit in 584 years"),
            );
            ok = false;
        }
    }
    let cap = match z.algorithm {
        Algorithm::Gcra { .. } => burst + 1,
        // Without Redis a cluster zone admits its share on each node (src/cluster/mod.rs).
        Algorithm::Sliding { events, .. } => match &z.cluster {
            Some(c) => (events / c.expected_nodes.max(1)).max(1),
            None => events,
        },
        Algorithm::Concurrency { max: zone_max } => max.unwrap_or(zone_max),
        // One log entry per admitted request.
        Algorithm::SlidingLog { .. } => 1,
    };
    if cost > cap {
        if let Some(c) = &ls.cost {
            let why = match z.algorithm {
                Algorithm::Gcra { .. } => format!("burst + 1 = {cap}"),
                Algorithm::Sliding { .. } if z.cluster.is_some() => {
                    format!("the zone's share of events per node without Redis, {cap}")
                }
                Algorithm::Sliding { .. } => format!("the zone's events = {cap}"),
                Algorithm::Concurrency { .. } if max.is_some() => {
                    format!("the limit's max = {cap}")
                }
                Algorithm::Concurrency { .. } => format!("the zone's max = {cap}"),
                Algorithm::SlidingLog { .. } => {
                    "1, the only cost a sliding_log zone takes (it records one event per request)"
                        .to_string()
                }
            };
            cx.err(
                &c.span(),
                format!("cost = {cost} can never be admitted: it exceeds {why}"),
            );
            ok = false;
        }
    }
    let ban = match &ls.ban {
        None => None,
        Some(b) if matches!(z.algorithm, Algorithm::SlidingLog { .. }) => {
            cx.err(
                &b.span(),
                format!(
                    "`ban` does not apply to sliding_log zones; zone {:?} is sliding_log",
                    z.name
                ),
            );
            ok = false;
            None
        }
        Some(b) => compile_ban(cx, b.get_ref()).or_else(|| {
            ok = false;
            None
        }),
    };
    let charge_on_status = match &ls.charge_on_status {
        None => Box::default(),
        Some(list) => compile_statuses(cx, list, z).unwrap_or_else(|| {
            ok = false;
            Box::default()
        }),
    };
    let key = key?;
    ok.then(|| Limit {
        name,
        selected: class_names.iter().any(|c| c == HOST_CLASS),
        classes: class_idx.into_boxed_slice(),
        zone,
        key,
        burst,
        delay,
        dry_run: ls.dry_run.unwrap_or(false),
        status,
        log_level,
        cost,
        max,
        queue,
        timeout,
        ban,
        lane,
        charge_on_status,
    })
}

/// A limit's `charge_on_status`: a non-empty list of distinct statuses 100–599, on a rate
/// limit's zone; sorted.
fn compile_statuses(
    cx: &mut Cx<'_>,
    list: &Spanned<Vec<Spanned<i64>>>,
    z: &Zone,
) -> Option<Box<[u16]>> {
    if matches!(z.algorithm, Algorithm::Concurrency { .. }) {
        cx.err(
            &list.span(),
            format!(
                "`charge_on_status` applies only to rate limits (gcra, sliding, sliding_log); zone {:?} is concurrency",
                z.name
            ),
        );
        return None;
    }
    if list.get_ref().is_empty() {
        cx.err(
            &list.span(),
            "`charge_on_status` is an empty list; list at least one status or remove it",
        );
        return None;
    }
    let mut ok = true;
    let mut statuses: Vec<u16> = Vec::new();
    for s in list.get_ref() {
        match positive(cx, s, "charge_on_status", 100, 599) {
            Some(n) if statuses.contains(&(n as u16)) => {
                cx.err(&s.span(), format!("status {n} is listed twice"));
                ok = false;
            }
            Some(n) => statuses.push(n as u16),
            None => ok = false,
        }
    }
    statuses.sort_unstable();
    ok.then(|| statuses.into_boxed_slice())
}

/// A limit's `ban` table: `after` ≥ 1 strikes, `within` and `duration` of at least 1 ms.
fn compile_ban(cx: &mut Cx<'_>, b: &BanSpec) -> Option<crate::limiter::Ban> {
    let after = positive(
        cx,
        &b.after,
        "ban after",
        1,
        crate::limiter::MAX_COUNT as i64,
    );
    let mut time = |v: &Spanned<Scalar>, what: &str| {
        let d = duration_value(cx, v)?;
        if d < Duration::from_millis(1) || d > Duration::from_secs(10 * 365 * 86400) {
            cx.err(
                &v.span(),
                format!("ban {what} must be between 1ms and 10 years"),
            );
            return None;
        }
        Some(d.as_nanos() as u64)
    };
    let within = time(&b.within, "within");
    let duration = time(&b.duration, "duration");
    crate::limiter::Ban::new(after?, within?, duration?).ok()
}

pub(super) fn known<'a>(what: &str, names: impl Iterator<Item = &'a Spanned<String>>) -> String {
    let list: Vec<String> = names.map(|n| format!("{:?}", n.get_ref())).collect();
    if list.is_empty() {
        format!("no {what} are defined")
    } else {
        format!("defined {what}: {}", list.join(", "))
    }
}
