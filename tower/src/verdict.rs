//! What the layer tells the application about each request's decision
//! ([`crate::WeirLayer::expose_verdict`]), access-log fields included, and the log line of a
//! ban a request started.

use http::Request;
use weir::policy::engine::LogAction;
use weir::policy::{Action, Engine, Outcome};

use crate::view::View;
use crate::Config;

/// What the engine decided for a request (see [`WeirLayer::expose_verdict`](crate::WeirLayer::expose_verdict)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The final action: after a queue wait, what the last evaluation said (or `Reject` when
    /// the wait timed out).
    pub action: Action,
    /// The status answered for a rejection (200 otherwise).
    pub status: u16,
    /// Index of the deciding limit (`Engine::limit_name` gives its name).
    pub limit: Option<u16>,
    /// Index of the exemption that matched.
    pub exempt: Option<u16>,
    /// The delay served, in ns.
    pub wait_ns: u64,
    /// For a rejection: when the request would conform, in ns.
    pub retry_after_ns: u64,
    /// A dry-run limit that would have delayed or rejected.
    pub dry_run: Option<(u16, Action)>,
    /// The request waited in a concurrency queue first.
    pub queued: bool,
    /// The request target was invalid (answered 400).
    pub bad_target: bool,
    /// For access logs: the decision in the engine's words (`pass`, `exempt`, `delay`,
    /// `queue` — waited in a queue, then served —, `reject`, `dry-run-delay`,
    /// `dry-run-reject`; [`LogAction::as_str`]).
    pub log_action: LogAction,
    /// For access logs: the deciding limit (the enforced one that delayed, queued or refused
    /// the request, else a dry-run one that would have); `Engine::limit_name` gives its name.
    pub log_limit: Option<u16>,
    /// For access logs: [`Verdict::log_limit`]'s key as the engine renders it
    /// (`203.0.113.0/24`, `ip=192.0.2.7 path=/api`); rendered only when a limit decided.
    pub key: Option<String>,
}

impl Verdict {
    /// `queued`: the limit whose queue the request waited in first, if it did.
    pub(crate) fn of<B>(
        cfg: &Config,
        req: &Request<B>,
        out: &Outcome,
        queued: Option<u16>,
    ) -> Verdict {
        let (log_action, log_limit) = match (queued, out.log_decision()) {
            (Some(l), (LogAction::Reject, _)) => (LogAction::Reject, Some(l)),
            (Some(l), _) => (LogAction::Queue, Some(l)),
            (None, d) => d,
        };
        let key = log_limit.map(|l| {
            let mut key = String::new();
            let view = View::new(req, cfg.fallback_peer, &cfg.engine);
            cfg.engine.render_key(usize::from(l), &view, &mut key);
            key
        });
        Verdict {
            action: out.action,
            status: if out.action == Action::Reject {
                out.status
            } else {
                200
            },
            limit: out.limit,
            exempt: out.exempt,
            wait_ns: out.wait_ns,
            retry_after_ns: out.retry_after_ns,
            dry_run: out.dry_run,
            queued: queued.is_some(),
            bad_target: false,
            log_action,
            log_limit,
            key,
        }
    }

    pub(crate) fn bad_target() -> Verdict {
        Verdict {
            action: Action::Reject,
            status: 400,
            limit: None,
            exempt: None,
            wait_ns: 0,
            retry_after_ns: 0,
            dry_run: None,
            queued: false,
            bad_target: true,
            log_action: LogAction::Reject,
            log_limit: None,
            key: None,
        }
    }
}

/// Logs (`tracing`, at the limit's `log_level`) the ban `out` started: once per ban, with its
/// key as the status names it.
#[cold]
pub(crate) fn log_ban(engine: &Engine, out: &Outcome) {
    use weir::policy::config::LogLevel;
    let (Some(limit), Some(ban)) = (out.limit, out.ban_started) else {
        return;
    };
    let Some(l) = engine.policy().limits.get(usize::from(limit)) else {
        return;
    };
    let key = ban
        .entry
        .and_then(|e| engine.listed_ban(usize::from(e), 0))
        .filter(|(i, _)| *i == usize::from(limit))
        .map_or_else(|| "?".to_owned(), |(_, b)| b.key);
    let secs = l.ban.map_or(0, |b| b.duration_ns()).div_ceil(1_000_000_000);
    let (name, key) = (l.name.as_str(), key.as_str());
    match l.log_level {
        LogLevel::Info | LogLevel::Notice => {
            tracing::info!(
                limit = name,
                key,
                "banning key {key:?} for {secs}s by weir limit {name:?}"
            )
        }
        LogLevel::Warn => {
            tracing::warn!(
                limit = name,
                key,
                "banning key {key:?} for {secs}s by weir limit {name:?}"
            )
        }
        LogLevel::Error => {
            tracing::error!(
                limit = name,
                key,
                "banning key {key:?} for {secs}s by weir limit {name:?}"
            )
        }
    }
}
