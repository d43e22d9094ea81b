//! Logged vs replayed decisions: when the log records what the host decided (`$weir_limit`,
//! `$weir_action`; Caddy's `weir_limit`, `weir_action`), every replayed request is compared
//! with its line — the deciding limit's name and, when logged, the action — and counted per
//! limit.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use weir::policy::engine::LogAction;

/// The name rows use for "no limit decided".
const NONE: &str = "-";

/// `weir replay --json`'s `agreement` (only when the log records the decision).
#[derive(Serialize, Debug, Clone, Default)]
pub struct AgreementReport {
    /// Requests whose line records the decision, compared.
    pub compared: u64,
    /// Of those, replayed with the same limit (and action, when logged).
    pub matched: u64,
    /// Per limit name ("-": none decided), in name order.
    pub limits: Vec<AgreementRow>,
}

#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
pub struct AgreementRow {
    pub limit: String,
    /// Lines that name this limit.
    pub logged: u64,
    /// Replayed requests this limit decided.
    pub replayed: u64,
    /// Requests both name it for (with the same action, when logged).
    pub matched: u64,
}

/// The running comparison.
#[derive(Default)]
pub struct Agreement {
    compared: u64,
    matched: u64,
    rows: BTreeMap<String, AgreementRow>,
}

impl Agreement {
    /// One request: what its line logged (`limit` `None`: not recorded, `Some("")`: none
    /// decided; `action` `None`: not recorded) and what the replay decided.
    pub fn add(
        &mut self,
        limit: Option<&str>,
        action: Option<LogAction>,
        replayed: (LogAction, Option<&str>),
    ) {
        if limit.is_none() && action.is_none() {
            return;
        }
        let (r_action, r_limit) = replayed;
        let r_limit = r_limit.unwrap_or(NONE);
        let same_action = action.is_none_or(|a| a == r_action);
        // Without the logged limit, the action alone says whether a limit decided.
        let l_limit = match limit {
            Some("") => NONE,
            Some(l) => l,
            None if action.is_some_and(LogAction::limited) => r_limit,
            None => NONE,
        };
        let same = same_action && l_limit == r_limit;
        self.compared += 1;
        self.matched += u64::from(same);
        self.row(l_limit).logged += 1;
        let row = self.row(r_limit);
        row.replayed += 1;
        row.matched += u64::from(same);
    }

    fn row(&mut self, name: &str) -> &mut AgreementRow {
        self.rows
            .entry(name.to_owned())
            .or_insert_with(|| AgreementRow {
                limit: name.to_owned(),
                ..AgreementRow::default()
            })
    }

    /// `None` when no line recorded the decision.
    pub fn report(&self) -> Option<AgreementReport> {
        (self.compared > 0).then(|| AgreementReport {
            compared: self.compared,
            matched: self.matched,
            limits: self.rows.values().cloned().collect(),
        })
    }
}

/// The text table: per limit, logged, replayed, matched and mismatched requests.
pub fn text(r: &AgreementReport, o: &mut String) {
    let _ = writeln!(
        o,
        "\nlogged vs replayed decisions: {} of {} requests agree",
        r.matched, r.compared
    );
    let _ = writeln!(
        o,
        "{:<32} {:>11} {:>11} {:>11} {:>11}",
        "limit", "logged", "replayed", "matched", "mismatched"
    );
    for l in &r.limits {
        let _ = writeln!(
            o,
            "{:<32} {:>11} {:>11} {:>11} {:>11}",
            l.limit,
            l.logged,
            l.replayed,
            l.matched,
            l.logged + l.replayed - 2 * l.matched
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_limit() {
        let mut a = Agreement::default();
        a.add(None, None, (LogAction::Reject, Some("x"))); // not recorded: skipped
        a.add(Some(""), Some(LogAction::Pass), (LogAction::Pass, None));
        a.add(
            Some("x"),
            Some(LogAction::Reject),
            (LogAction::Reject, Some("x")),
        );
        a.add(Some("x"), Some(LogAction::Reject), (LogAction::Pass, None));
        a.add(
            Some("x"),
            Some(LogAction::Reject),
            (LogAction::Delay, Some("x")),
        );
        let r = a.report().unwrap();
        assert_eq!((r.compared, r.matched), (4, 2));
        let row = |l: &str, logged, replayed, matched| AgreementRow {
            limit: l.into(),
            logged,
            replayed,
            matched,
        };
        assert_eq!(r.limits, [row("-", 1, 2, 1), row("x", 3, 2, 1)]);
        assert!(Agreement::default().report().is_none());
    }
}
