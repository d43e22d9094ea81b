//! What a replay cannot see: every request header and cookie the policy reads (class and
//! exemption tests, key parts, the trusted proxies' forwarding header) that the access-log
//! format does not record. A replayed request never has such a field, so its tests and keys
//! behave as for a request without it, whatever the real traffic sent: `weir replay` says so by
//! name instead of reporting, say, an exemption that silently matched nothing.

use weir::policy::config::CompiledPolicy;
use weir::policy::key::KeyPart;
use weir::policy::matching::{Class, ValueMatcher};

use crate::logfmt::LogFormat;

/// A request field a policy reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field<'p> {
    /// Lowercase header name.
    Header(&'p [u8]),
    Cookie(&'p [u8]),
}

impl Field<'_> {
    fn describe(self) -> String {
        match self {
            Field::Header(n) => format!("header \"{}\"", String::from_utf8_lossy(n)),
            Field::Cookie(n) => format!("cookie \"{}\"", String::from_utf8_lossy(n)),
        }
    }
}

/// How a log format records a field.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Logged {
    Yes,
    No,
    /// Caddy writes it as `REDACTED` unless the server's `log_credentials` option is on.
    UnlessRedacted,
}

/// Headers Caddy's access log redacts by default.
const CADDY_REDACTED: [&[u8]; 3] = [b"cookie", b"authorization", b"proxy-authorization"];

fn logged(format: &LogFormat, field: Field) -> Logged {
    match (format, field) {
        (LogFormat::Nginx(f), Field::Header(n)) => yes(f.logs_header(n)),
        (LogFormat::Nginx(f), Field::Cookie(n)) => yes(f.logs_cookie(n)),
        (LogFormat::Caddy(_), Field::Header(n)) if !CADDY_REDACTED.contains(&n) => Logged::Yes,
        (LogFormat::Caddy(_), _) => Logged::UnlessRedacted,
    }
}

fn yes(b: bool) -> Logged {
    if b {
        Logged::Yes
    } else {
        Logged::No
    }
}

/// One warning per place the policy reads a field that `format` (named by `spec`, as given to
/// `--format`) may not record: the forwarding header, then classes and exemptions (by name),
/// then limits (in file order). Empty when the format records everything the policy reads.
pub fn warnings(policy: &CompiledPolicy, format: &LogFormat, spec: &str) -> Vec<String> {
    let mut reads: Vec<(String, Field, Consequence)> = Vec::new();
    if let Some(h) = policy.client_ip.header_name() {
        reads.push((
            "trusted_proxies reads the client address from".into(),
            Field::Header(h),
            Consequence::ProxyAddress,
        ));
    }
    for (what, classes) in [
        ("class", &policy.classes),
        ("exemption", &policy.exemptions),
    ] {
        for c in classes.iter() {
            for (field, absent) in class_fields(c) {
                let who = format!("{what} \"{}\" tests", c.name);
                let consequence = match absent {
                    true => Consequence::AlwaysPasses,
                    false => Consequence::NeverMatches,
                };
                push_once(&mut reads, (who, field, consequence));
            }
        }
    }
    for l in policy.limits.iter().filter(|l| !l.selected) {
        for part in l.key.parts.iter() {
            let field = match part {
                KeyPart::Header(n) => Field::Header(n),
                KeyPart::Cookie(n) => Field::Cookie(n),
                _ => continue,
            };
            let who = format!("limit \"{}\" keys on", l.name);
            push_once(&mut reads, (who, field, Consequence::OneKey));
        }
    }
    let source = match spec {
        "combined" => "the combined log format".to_string(),
        _ => "the log format".to_string(),
    };
    reads
        .into_iter()
        .filter_map(|(who, field, consequence)| {
            let f = field.describe();
            match logged(format, field) {
                Logged::Yes => None,
                Logged::No => Some(format!(
                    "{who} {f}, which {source} does not record: {}",
                    consequence.text()
                )),
                Logged::UnlessRedacted => Some(format!(
                    "{who} {f}, which Caddy's access log shows as REDACTED unless the server's \
                     log_credentials option is on: with it off, {}",
                    consequence.text()
                )),
            }
        })
        .collect()
}

/// What a field that is never there does to the replay.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Consequence {
    NeverMatches,
    AlwaysPasses,
    OneKey,
    ProxyAddress,
}

impl Consequence {
    fn text(self) -> &'static str {
        match self {
            Consequence::NeverMatches => "that test never matches in this replay",
            Consequence::AlwaysPasses => {
                "that test (present = false) passes on every replayed request"
            }
            Consequence::OneKey => {
                "every replayed request has the key part of a request without it"
            }
            Consequence::ProxyAddress => {
                "requests through trusted proxies replay as coming from the proxy"
            }
        }
    }
}

/// The header and cookie tests of a class: (field, whether the test is `present = false`).
fn class_fields(c: &Class) -> Vec<(Field<'_>, bool)> {
    let mut out = Vec::new();
    for s in &c.shapes {
        for (n, m) in &s.headers {
            out.push((Field::Header(n), matches!(m, ValueMatcher::Absent)));
        }
        for (n, m) in &s.cookies {
            out.push((Field::Cookie(n), matches!(m, ValueMatcher::Absent)));
        }
    }
    out
}

fn push_once<'p>(
    v: &mut Vec<(String, Field<'p>, Consequence)>,
    r: (String, Field<'p>, Consequence),
) {
    if !v.contains(&r) {
        v.push(r);
    }
}
