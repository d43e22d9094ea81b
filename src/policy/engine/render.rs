//! What an access log shows of a decision: the action in a fixed vocabulary ([`LogAction`]),
//! the deciding limit, and that limit's key as text ([`Engine::render_key`]). Rendering is
//! done only when a host asks (a log line being written), never on the request path.

use super::*;
use crate::policy::key_text::{self, Exposure};

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

impl Engine {
    /// Appends limit `limit`'s key for `req` to `out`, as logs show it
    /// ([`crate::policy::key_text`]; addresses in full, values the policy hides as their
    /// hash, at most [`key_text::TEXT_MAX`] bytes). Allocates (normalizing the path): for log
    /// lines, not the request path. An unknown limit renders nothing.
    pub fn render_key(&self, limit: usize, req: &dyn RequestView, out: &mut String) {
        self.render_key_within(limit, req, out, key_text::TEXT_MAX);
    }

    /// [`Engine::render_key`] in at most `max` bytes (a longer key is cut and keeps its
    /// reference).
    pub fn render_key_within(
        &self,
        limit: usize,
        req: &dyn RequestView,
        out: &mut String,
        max: usize,
    ) {
        self.with_key_request(limit, req, |prepared, path_ok| {
            self.write_key_text(limit, prepared, path_ok, max, out)
        });
    }

    /// Runs `f` on limit `limit`'s view of `req` (its path normalized; `false`: the target
    /// is refused and the limit keys by path); `None` for an unknown limit.
    pub(crate) fn with_key_request<R>(
        &self,
        limit: usize,
        req: &dyn RequestView,
        f: impl FnOnce(&PreparedRequest<'_>, bool) -> R,
    ) -> Option<R> {
        let l = self.policy.limits.get(limit)?;
        let parts = &l.key.parts;
        let mut scratch = Vec::new();
        let mut path: Option<&[u8]> = None;
        let mut query: &[u8] = b"";
        if parts.contains(&KeyPart::Path) {
            if let Ok(t) = normalize::split_target(req.target()) {
                scratch.resize(t.path.len().max(1), 0);
                if let Ok(n) = normalize::normalize_path(t.path, &mut scratch) {
                    path = Some(&scratch[..n]);
                    query = t.query.unwrap_or(b"");
                }
            }
        }
        let path_ok = path.is_some() || !parts.contains(&KeyPart::Path);
        let prepared = self.policy.prepare(req, path.unwrap_or(b"/"), query);
        Some(f(&prepared, path_ok))
    }

    /// Writes limit `limit`'s key for `prepared` as logs and key operations show it, in at
    /// most `max` bytes; `path_ok` false names a refused target.
    pub(crate) fn write_key_text(
        &self,
        limit: usize,
        prepared: &PreparedRequest<'_>,
        path_ok: bool,
        max: usize,
        out: &mut String,
    ) {
        let l = &self.policy.limits[limit];
        let reference = path_ok
            .then(|| self.key_hash_of(limit, prepared))
            .flatten()
            .map(|h| self.key_reference(limit, h));
        let style = key_text::Style {
            exposure: Exposure::Full,
            hide: &self.policy.key_hide,
            seed: self.counters.seed(),
            reference,
            max,
        };
        key_text::write_key(out, &l.key.parts, prepared, path_ok, &style);
    }

    /// The reference key text names key `key_hash` of limit `limit` by
    /// ([`key_text::seal`], keyed by the limit's zone: valid while the zone keeps its state).
    pub(crate) fn key_reference(&self, limit: usize, key_hash: u64) -> u64 {
        key_text::seal(key_hash, self.reference_key(limit))
    }

    /// The key hash `reference` names in limit `limit` ([`Engine::key_reference`]'s inverse).
    pub(crate) fn key_of_reference(&self, limit: usize, reference: u64) -> u64 {
        key_text::unseal(reference, self.reference_key(limit))
    }

    fn reference_key(&self, limit: usize) -> u64 {
        let zone = self.policy.limits[limit].zone;
        self.key_hash(zone, b"\xffweir key text reference")
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
            (&both, "fe80::1%eth0", "fe80::1%25eth0"),
            (&both, "a\"b\u{1}", "a%22b%01"),
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
