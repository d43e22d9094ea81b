//! What an access log shows of a decision: the action in a fixed vocabulary ([`LogAction`]),
//! the deciding limit, and that limit's key as text ([`Engine::render_key`]). Rendering is
//! done only when a host asks (a log line being written), never on the request path.

use super::*;
use crate::policy::key::VarMask;
use crate::policy::net::mask_ip;

/// A request's decision as an access log names it (`$weir_action`, `{http.weir.action}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LogAction {
    /// Nothing limited the request (no limit matched, or every one let it through).
    Pass,
    /// An exemption matched: no limit was consulted.
    Exempt,
    /// Held back by the deciding limit, then served.
    Delay,
    /// Waited in the deciding concurrency limit's queue (hosts keep this once the request is
    /// admitted: the last verdict of a queued request is a pass).
    Queue,
    /// Refused by the deciding limit (a queue's timeout included).
    Reject,
    /// Served; the deciding limit is a dry-run one that would have delayed it.
    DryRunDelay,
    /// Served; the deciding limit is a dry-run one that would have refused it.
    DryRunReject,
}

impl LogAction {
    /// Every action, for parsers.
    pub const ALL: [LogAction; 7] = [
        LogAction::Pass,
        LogAction::Exempt,
        LogAction::Delay,
        LogAction::Queue,
        LogAction::Reject,
        LogAction::DryRunDelay,
        LogAction::DryRunReject,
    ];

    /// The word logged: `pass`, `exempt`, `delay`, `queue`, `reject`, `dry-run-delay`,
    /// `dry-run-reject`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogAction::Pass => "pass",
            LogAction::Exempt => "exempt",
            LogAction::Delay => "delay",
            LogAction::Queue => "queue",
            LogAction::Reject => "reject",
            LogAction::DryRunDelay => "dry-run-delay",
            LogAction::DryRunReject => "dry-run-reject",
        }
    }

    /// The action a logged word names.
    pub fn parse(word: &str) -> Option<LogAction> {
        LogAction::ALL.into_iter().find(|a| a.as_str() == word)
    }

    /// Whether a limit decided (every action but pass and exempt names one).
    pub const fn limited(self) -> bool {
        !matches!(self, LogAction::Pass | LogAction::Exempt)
    }

    /// The logged action and deciding limit of a verdict: the enforced limit that delayed,
    /// queued or refused the request; else a dry-run limit that would have; else none.
    pub fn decide(
        action: Action,
        limit: Option<u16>,
        exempt: bool,
        dry_run: Option<(u16, Action)>,
    ) -> (LogAction, Option<u16>) {
        match (action, limit, dry_run) {
            (Action::Reject, Some(l), _) => (LogAction::Reject, Some(l)),
            (Action::Queue, Some(l), _) => (LogAction::Queue, Some(l)),
            (Action::Delay, Some(l), _) => (LogAction::Delay, Some(l)),
            (_, _, Some((l, Action::Reject))) => (LogAction::DryRunReject, Some(l)),
            (_, _, Some((l, Action::Delay))) => (LogAction::DryRunDelay, Some(l)),
            _ if exempt => (LogAction::Exempt, None),
            _ => (LogAction::Pass, None),
        }
    }
}

impl Outcome {
    /// The logged action and deciding limit ([`LogAction::decide`]).
    pub fn log_decision(&self) -> (LogAction, Option<u16>) {
        LogAction::decide(self.action, self.limit, self.exempt.is_some(), self.dry_run)
    }
}

/// Longest value rendered of one key part; the rest is left out (`…` marks the cut).
const PART_MAX: usize = 200;

impl Engine {
    /// Appends limit `limit`'s key for `req` to `out`, as logs show it: a one-part key as its
    /// value (`203.0.113.0/24`, `/w/index.php`, a header's value), several parts as
    /// `part=value` separated by spaces (`ip=192.0.2.7 path=/api`). An `ip` part below the
    /// full length and a masked `var:` value carry their prefix (`192.0.2.0/24`); the local
    /// client is `local`, an absent header or cookie `(absent)`; bytes other than printable
    /// ASCII (and `"`, `\`) are written `\xHH`. Allocates (normalizing the path): for log
    /// lines, not the request path. An unknown limit renders nothing; a target the engine
    /// refuses renders a `path` part as `(bad target)`.
    pub fn render_key(&self, limit: usize, req: &dyn RequestView, out: &mut String) {
        let Some(l) = self.policy.limits.get(limit) else {
            return;
        };
        let parts = &l.key.parts;
        let mut scratch = Vec::new();
        let mut path: Option<&[u8]> = None;
        let mut query: &[u8] = b"";
        if parts.contains(&KeyPart::Path) {
            let target = req.target();
            if let Ok(t) = normalize::split_target(target) {
                scratch.resize(t.path.len().max(1), 0);
                if let Ok(n) = normalize::normalize_path(t.path, &mut scratch) {
                    path = Some(&scratch[..n]);
                    query = t.query.unwrap_or(b"");
                }
            }
        }
        let prepared = self.policy.prepare(req, path.unwrap_or(b"/"), query);
        let named = parts.len() > 1;
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            if named {
                out.push_str(&part_name(part));
                out.push('=');
            }
            match part {
                KeyPart::Ip {
                    v4_prefix,
                    v6_prefix,
                } => match prepared.client {
                    None => out.push_str("local"),
                    Some(ip) => {
                        let (p, full) = if ip.is_ipv4() {
                            (*v4_prefix, 32)
                        } else {
                            (*v6_prefix, 128)
                        };
                        let _ = write!(out, "{}", mask_ip(ip, p));
                        if p != full {
                            let _ = write!(out, "/{p}");
                        }
                    }
                },
                KeyPart::Global => out.push_str("global"),
                KeyPart::Path if path.is_none() => out.push_str("(bad target)"),
                KeyPart::Path => escaped(out, prepared.path),
                KeyPart::Method => escaped(out, prepared.method),
                KeyPart::Header(n) => value(out, prepared.header(n), VarMask::default()),
                KeyPart::Cookie(n) => value(out, prepared.cookie_named(n), VarMask::default()),
                KeyPart::Var { index, mask, .. } => value(out, req.var(*index), *mask),
            }
        }
    }
}

/// `ip`, `global`, `path`, `method`, `header:NAME`, `cookie:NAME`, `var:NAME`.
fn part_name(p: &KeyPart) -> String {
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match p {
        KeyPart::Ip { .. } => "ip".into(),
        KeyPart::Global => "global".into(),
        KeyPart::Path => "path".into(),
        KeyPart::Method => "method".into(),
        KeyPart::Header(n) => format!("header:{}", lossy(n)),
        KeyPart::Cookie(n) => format!("cookie:{}", lossy(n)),
        KeyPart::Var { name, .. } => format!("var:{}", lossy(name)),
    }
}

fn value(out: &mut String, v: Option<&[u8]>, mask: VarMask) {
    match v {
        None => out.push_str("(absent)"),
        Some(v) => match mask.apply(v) {
            Some((net, prefix)) => {
                let _ = write!(out, "{net}/{prefix}");
            }
            None => escaped(out, v),
        },
    }
}

/// Printable ASCII as it is, other bytes (and `"`, `\`) as `\xHH`; at most [`PART_MAX`] bytes.
fn escaped(out: &mut String, v: &[u8]) {
    for &b in &v[..v.len().min(PART_MAX)] {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b as char);
        } else {
            let _ = write!(out, "\\x{b:02X}");
        }
    }
    if v.len() > PART_MAX {
        out.push('…');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::parse_policy;

    fn engine(key: &str, prefixes: &str) -> Engine {
        let src = format!(
            "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n\
             [[limit]]\nclass = \"*\"\nzone = \"z\"\nname = \"l\"\nkey = {key}\n{prefixes}"
        );
        Engine::new(parse_policy(&src, None).unwrap()).unwrap()
    }

    fn render(e: &Engine, req: &OwnedRequest) -> String {
        let mut out = String::new();
        e.render_key(0, req, &mut out);
        out
    }

    /// A `var:` value that is an address is rendered as its network, as caddy-ratelimit
    /// writes a masked key; other values, and families without a prefix, as they are.
    #[test]
    fn masked_var_values() {
        let req = |v: &str| OwnedRequest::new("GET", "/", "192.0.2.1".parse().unwrap()).var(0, v);
        let both = engine("\"var:k\"", "ipv4_prefix = 24\nipv6_prefix = 64\n");
        let v4 = engine("\"var:k\"", "ipv4_prefix = 16\n");
        for (e, value, want) in [
            (&both, "192.0.2.77", "192.0.2.0/24"),
            (&v4, "::ffff:192.0.2.77", "192.0.0.0/16"),
            (&both, "2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),
            (&v4, "2001:db8::1", "2001:db8::1"),
            (&both, "example.com", "example.com"),
            (&both, "fe80::1%eth0", "fe80::1%eth0"),
            (&both, "a\"b\u{1}", "a\\x22b\\x01"),
        ] {
            assert_eq!(render(e, &req(value)), want, "{value}");
        }
    }

    #[test]
    fn parts_named_when_several() {
        let e = engine("[\"ip\", \"path\", \"header:x-k\"]", "ipv4_prefix = 24\n");
        let req = OwnedRequest::new("GET", "/a/../b", "192.0.2.9".parse().unwrap());
        assert_eq!(
            render(&e, &req),
            "ip=192.0.2.0/24 path=/b header:x-k=(absent)"
        );
        let e = engine("\"ip\"", "");
        assert_eq!(render(&e, &req), "192.0.2.9");
        assert_eq!(render(&e, &OwnedRequest::local("GET", "/")), "local");
    }

    #[test]
    fn decision_words() {
        use Action::*;
        let d = LogAction::decide;
        assert_eq!(
            d(Reject, Some(1), false, Some((2, Reject))),
            (LogAction::Reject, Some(1))
        );
        assert_eq!(
            d(Pass, None, false, Some((2, Delay))),
            (LogAction::DryRunDelay, Some(2))
        );
        assert_eq!(d(Pass, None, true, None), (LogAction::Exempt, None));
        assert_eq!(d(Pass, None, false, None), (LogAction::Pass, None));
        for a in LogAction::ALL {
            assert_eq!(LogAction::parse(a.as_str()), Some(a));
        }
    }
}
