//! Compilation context (error collection with spans) and the top-level pass.

use super::*;
use crate::policy::key_text::{Exposure, Hide};

pub(super) struct Cx<'s> {
    pub(super) src: &'s str,
    pub(super) errors: Vec<(usize, String)>,
}

impl Cx<'_> {
    pub(super) fn err(&mut self, span: &Range<usize>, msg: impl Into<String>) {
        self.errors.push((span.start, msg.into()));
    }

    /// Error about a part of a string value: point inside the string when the
    /// source spells it literally (no escapes), else at the value.
    pub(super) fn err_sub(&mut self, span: &Range<usize>, value: &str, e: SubErr) {
        let raw = self.src.get(span.clone()).unwrap_or("");
        let literal = raw.len() == value.len() + 2
            && (raw.starts_with('"') || raw.starts_with('\''))
            && &raw[1..raw.len() - 1] == value;
        let at = match e.1 {
            Some(r) if literal => span.start + 1 + r.start,
            _ => span.start,
        };
        self.errors.push((at, e.0));
    }
}

pub(super) fn items(list: &Spanned<StrList>) -> impl Iterator<Item = (&str, Range<usize>)> {
    let outer = list.span();
    list.get_ref()
        .0
        .iter()
        .map(move |(s, sp)| (s.as_str(), sp.clone().unwrap_or(outer.clone())))
}

pub(super) fn nonempty_list(cx: &mut Cx<'_>, list: &Spanned<StrList>, what: &str) -> bool {
    if list.get_ref().0.is_empty() {
        cx.err(
            &list.span(),
            format!("`{what}` is an empty list; list at least one value or remove it"),
        );
        false
    } else {
        true
    }
}

pub(super) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

pub(super) fn check_name(cx: &mut Cx<'_>, name: &Spanned<String>, what: &str) {
    if !valid_name(name.get_ref()) {
        cx.err(
            &name.span(),
            format!(
                "invalid {what} name {:?}; use 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit",
                name.get_ref()
            ),
        );
    }
}

/// RFC 9110 token characters (header names, methods).
pub(super) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

pub(super) fn compile(cx: &mut Cx<'_>, spec: FileSpec) -> CompiledPolicy {
    let failure_mode = match spec.failure_mode.as_ref() {
        None => FailureMode::Open,
        Some(s) => match s.get_ref().as_str() {
            "open" => FailureMode::Open,
            "closed" => FailureMode::Closed,
            other => {
                cx.err(
                    &s.span(),
                    format!("unknown failure_mode {other:?}; expected \"open\" or \"closed\""),
                );
                FailureMode::Open
            }
        },
    };

    let status_clients = match spec.status.as_ref().and_then(|s| s.clients.as_ref()) {
        None => Exposure::Full,
        Some(s) => Exposure::from_name(s.get_ref()).unwrap_or_else(|| {
            let e = "unknown [status] clients; expected \"full\", \"masked\" or \"hashed\"";
            cx.err(&s.span(), e.to_string());
            Exposure::Full
        }),
    };

    let mut key_hide = Hide::default();
    if let Some(list) = spec.key_text.as_ref().and_then(|k| k.hide.as_ref()) {
        key_hide = Hide::nothing();
        for entry in list.get_ref() {
            if let Err(e) = key_hide.add(entry.get_ref()) {
                cx.err(&entry.span(), e);
            }
        }
    }

    let status_top_keys = spec
        .status
        .as_ref()
        .and_then(|s| s.top_keys)
        .unwrap_or(true);

    let mut client_ip = ClientIpResolver::default();
    if let Some(list) = &spec.trusted_proxies {
        for (s, span) in items(list) {
            if let Err(e) = client_ip.trusted.push_entry(s) {
                cx.err(&span, e);
            }
        }
    }
    if let Some(h) = &spec.client_ip_header {
        let name = h.get_ref().to_ascii_lowercase();
        if spec.trusted_proxies.is_none() {
            cx.err(
                &h.span(),
                "client_ip_header has no effect without trusted_proxies; add trusted_proxies = [\"CIDR\", …] or remove it",
            );
        } else if name == "forwarded" {
            client_ip.source = ForwardedSource::Forwarded;
        } else if is_token(&name) {
            client_ip.source = ForwardedSource::List(name.into_bytes().into_boxed_slice());
        } else {
            cx.err(
                &h.span(),
                format!("invalid header name {:?}; expected e.g. \"x-forwarded-for\", \"x-real-ip\" or \"forwarded\"", h.get_ref()),
            );
        }
    }

    let mut zones = Vec::new();
    for (name, z) in &spec.zones {
        check_name(cx, name, "zone");
        if let Some(zone) = compile_zone(cx, name.get_ref(), z) {
            zones.push(zone);
        }
    }

    let mut classes = Vec::new();
    let mut class_lanes = Vec::new();
    for (name, c) in &spec.classes {
        check_name(cx, name, "class");
        if name.get_ref() == "*" {
            continue;
        }
        classes.push(compile_class(cx, name.get_ref(), c));
        class_lanes.push(c.get_ref().lane.as_ref().and_then(|l| compile_lane(cx, l)));
    }
    let mut exemptions = Vec::new();
    for (name, c) in &spec.exempt {
        check_name(cx, name, "exemption");
        if let Some(l) = &c.get_ref().lane {
            cx.err(
                &l.span(),
                format!("an exemption has no lane (its requests are not counted at all); to count health checks and let them through first, make {:?} a class with lane = \"critical\"", name.get_ref()),
            );
        }
        exemptions.push(compile_class(cx, name.get_ref(), c));
    }

    if spec.limit.is_empty() {
        // At the end of the file, where a limit would go (and after any other error).
        let end = cx.src.len();
        cx.err(
            &(end..end),
            "the policy has no [[limit]], so it would limit nothing (an empty file is not a policy)",
        );
    }
    if let Some(l) = spec.limit.get(MAX_LIMITS) {
        cx.err(&l.span(), too_many_limits());
    }
    let mut limits: Vec<Limit> = Vec::new();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut lines = None;
    let src = cx.src;
    let mut deferred = 0;
    for l in &spec.limit {
        if let Some(limit) = compile_limit(cx, l, &spec, &zones, &classes) {
            let span = l.get_ref().name.as_ref().map_or(l.span(), |n| n.span());
            if let Some(first) = names.get(&limit.name) {
                let lines = lines.get_or_insert_with(|| LineIndex::new(src));
                let (line, _) = lines.line_col(*first);
                cx.err(
                    &span,
                    format!(
                        "duplicate limit name {:?} (first used on line {line}); give one of them a distinct `name`",
                        limit.name
                    ),
                );
            } else {
                names.insert(limit.name.clone(), span.start);
            }
            if !limit.charge_on_status.is_empty() {
                deferred += 1;
                if deferred > crate::policy::engine::MAX_CHARGES {
                    if let Some(list) = &l.get_ref().charge_on_status {
                        cx.err(
                            &list.span(),
                            format!(
                                "at most {} limits may have `charge_on_status` (a request carries that many deferred charges)",
                                crate::policy::engine::MAX_CHARGES
                            ),
                        );
                    }
                }
            }
            limits.push(limit);
        }
    }

    let vars = number_vars(&mut limits, &mut classes, &mut exemptions);
    CompiledPolicy {
        failure_mode,
        emit_headers: spec.headers.unwrap_or(false),
        client_ip,
        status_clients,
        status_top_keys,
        key_hide,
        zones,
        classes,
        class_lanes,
        exemptions,
        limits,
        vars,
    }
}

/// Most limits a policy may have. Each costs its counters, top keys and per-second history
/// in the engine's counter block ([`crate::policy::counters::Counters::bytes_for`], about 74
/// KiB a limit): the block is reserved whole (nginx: one shared memory zone) and its pages are
/// touched as limits count, reject and delay. The cap keeps the block within what every host
/// can map (296 MiB at the cap).
pub const MAX_LIMITS: usize = 4096;

fn too_many_limits() -> String {
    let all = crate::policy::counters::Counters::bytes_for(MAX_LIMITS);
    format!(
        "the policy has more than {MAX_LIMITS} limits, the most a policy may have (each costs about {} KiB of counters, top keys and history: {} MiB for {MAX_LIMITS}); one limit can count several classes together (class = [\"a\", \"b\"])",
        (all / MAX_LIMITS + 512) / 1024,
        (all + (1 << 19)) >> 20
    )
}

/// Gives every `var:` key part and `var.NAME` test the index of its name among the policy's
/// variables (each name once: key parts in file order, then tests in class order), and
/// returns the names.
fn number_vars(
    limits: &mut [Limit],
    classes: &mut [Class],
    exemptions: &mut [Class],
) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    let mut number = |name: &[u8], index: &mut usize| {
        let name = String::from_utf8_lossy(name);
        *index = match seen.get(name.as_ref()) {
            Some(&i) => i,
            None => {
                seen.insert(name.to_string(), names.len());
                names.push(name.into_owned());
                names.len() - 1
            }
        };
    };
    for part in limits.iter_mut().flat_map(|l| l.key.parts.iter_mut()) {
        if let KeyPart::Var { name, index, .. } = part {
            number(name, index);
        }
    }
    let shapes = classes
        .iter_mut()
        .chain(exemptions)
        .flat_map(|c| &mut c.shapes);
    for (name, index, _) in shapes.flat_map(|s| &mut s.vars) {
        number(name, index);
    }
    names
}

/// Compiles a policy given as its file's structure (parsed, or built by [`super::HostLimits`]):
/// the policy, or every error with its offset in `src`, in offset order.
pub(super) fn compile_spec(
    src: &str,
    spec: FileSpec,
) -> Result<CompiledPolicy, Vec<(usize, String)>> {
    let mut cx = Cx {
        src,
        errors: Vec::new(),
    };
    let policy = compile(&mut cx, spec);
    if cx.errors.is_empty() {
        Ok(policy)
    } else {
        cx.errors.sort_by_key(|e| e.0);
        Err(cx.errors)
    }
}

pub(super) fn positive(
    cx: &mut Cx<'_>,
    v: &Spanned<i64>,
    what: &str,
    min: i64,
    max: i64,
) -> Option<u64> {
    let n = *v.get_ref();
    if n < min || n > max {
        cx.err(
            &v.span(),
            format!("{what} must be between {min} and {max}, not {n}"),
        );
        None
    } else {
        Some(n as u64)
    }
}

pub(super) fn duration_value(cx: &mut Cx<'_>, v: &Spanned<Scalar>) -> Option<Duration> {
    match v.get_ref() {
        Scalar::Int(n) if *n >= 0 => Some(Duration::from_secs(*n as u64)),
        Scalar::Int(n) => {
            cx.err(&v.span(), format!("duration must not be negative, not {n}"));
            None
        }
        Scalar::Str(s) => match parse_duration_sub(s) {
            Ok(d) => Some(d),
            Err(e) => {
                cx.err_sub(&v.span(), s, e);
                None
            }
        },
    }
}
