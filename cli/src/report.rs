//! Replay results: the `--json` schema (documented in docs/CLI.md), the text tables and the
//! `--timeline` HTML page.

use std::fmt::Write as _;

use serde::Serialize;
use weir::policy::counters::LimitCounts;

use crate::agreement::{self, AgreementReport};
use crate::timefmt::NS;
use weir::policy::metrics::page;

/// `weir replay --json`. Field order and names are stable; new fields are only ever added.
#[derive(Serialize, Debug, Clone)]
pub struct Report {
    pub schema: u32,
    pub lines: u64,
    pub requests: u64,
    pub malformed: u64,
    pub bad_target: u64,
    pub reordered: u64,
    pub late: u64,
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
    pub queued: u64,
    pub exempt: u64,
    pub unmatched: u64,
    pub dry_run_limited: u64,
    pub distinct_clients: u64,
    pub distinct_clients_exact: bool,
    pub first_time: Option<String>,
    pub last_time: Option<String>,
    pub exemptions: Vec<ExemptionReport>,
    pub limits: Vec<LimitReport>,
    /// Headers and cookies the policy reads that the log format does not record
    /// ([`crate::unlogged`]), one sentence each.
    pub warnings: Vec<String>,
    /// Logged vs replayed decisions, when the log records them ([`crate::agreement`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreement: Option<AgreementReport>,
}

#[derive(Serialize, Debug, Clone)]
pub struct ExemptionReport {
    pub name: String,
    pub requests: u64,
}

#[derive(Serialize, Debug, Clone)]
pub struct LimitReport {
    pub name: String,
    pub zone: String,
    pub key: String,
    pub dry_run: bool,
    /// The engine's counts for the limit (flattened: `passed`, `delayed`, … in the JSON).
    #[serde(flatten)]
    pub counts: LimitCounts,
    pub distinct_rejected_clients: u64,
    pub top_exact: bool,
    pub top_keys: Vec<KeyCount>,
    pub top_clients: Vec<KeyCount>,
}

#[derive(Serialize, Debug, Clone)]
pub struct KeyCount {
    pub key: String,
    pub rejected: u64,
    /// Space-Saving bound: the true count is in `rejected - error ..= rejected` (0 = exact).
    pub error: u64,
}

fn n(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The human-readable summary.
pub fn text(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} requests ({} lines, {} malformed, {} bad targets) from {} to {}",
        n(r.requests),
        n(r.lines),
        n(r.malformed),
        n(r.bad_target),
        r.first_time.as_deref().unwrap_or("-"),
        r.last_time.as_deref().unwrap_or("-")
    );
    let _ = writeln!(
        o,
        "passed {}, delayed {}, rejected {}, queued {}, exempt {}, unmatched {}; distinct clients {}{}",
        n(r.passed),
        n(r.delayed),
        n(r.rejected),
        n(r.queued),
        n(r.exempt),
        n(r.unmatched),
        if r.distinct_clients_exact { "" } else { "≈" },
        n(r.distinct_clients)
    );
    if r.reordered + r.late > 0 {
        let _ = writeln!(
            o,
            "out of order: {} reordered, {} late (replayed at the last replayed time)",
            n(r.reordered),
            n(r.late)
        );
    }
    if !r.exemptions.is_empty() {
        let _ = writeln!(o, "\n{:<32} {:>12}", "exemption", "requests");
        for e in &r.exemptions {
            let _ = writeln!(o, "{:<32} {:>12}", e.name, n(e.requests));
        }
    }
    let _ = writeln!(
        o,
        "\n{:<32} {:>11} {:>9} {:>11} {:>8} {:>11}",
        "limit", "passed", "delayed", "rejected", "queued", "dry-run rej"
    );
    for l in &r.limits {
        let _ = writeln!(
            o,
            "{:<32} {:>11} {:>9} {:>11} {:>8} {:>11}",
            l.name,
            n(l.counts.passed),
            n(l.counts.delayed),
            n(l.counts.rejected),
            n(l.counts.queued),
            n(l.counts.dry_run_rejected)
        );
    }
    for l in &r.limits {
        if l.top_keys.is_empty() {
            continue;
        }
        let what = if l.dry_run {
            "would reject (dry run)"
        } else {
            "rejected"
        };
        let _ = writeln!(
            o,
            "\n{} (key {}): {} distinct clients {what}{}",
            l.name,
            l.key,
            n(l.distinct_rejected_clients),
            if l.top_exact {
                ""
            } else {
                "; top counts approximate"
            }
        );
        let _ = writeln!(o, "  {:<60} {:>10}", "top keys", what);
        let cnt = |k: &KeyCount| {
            if k.error == 0 {
                n(k.rejected)
            } else {
                format!("{}..{}", n(k.rejected - k.error), n(k.rejected))
            }
        };
        for k in &l.top_keys {
            let _ = writeln!(o, "  {:<60} {:>10}", k.key, cnt(k));
        }
        let _ = writeln!(o, "  {:<60} {:>10}", "top clients", what);
        for k in &l.top_clients {
            let _ = writeln!(o, "  {:<60} {:>10}", k.key, cnt(k));
        }
    }
    if let Some(a) = &r.agreement {
        agreement::text(a, &mut o);
    }
    o
}

/// Passed vs limited per limit per time bucket (one minute, widened by doubling when the log
/// spans more than [`Timeline::MAX_BUCKETS`] minutes, so memory stays bounded).
#[derive(Clone, Debug)]
pub struct Timeline {
    pub start: Option<i64>,
    pub width_ns: i64,
    /// Per limit, per bucket: [passed (incl. delayed), rejected or queued, dry-run rejected].
    pub buckets: Vec<Vec<[u64; 3]>>,
}

impl Timeline {
    pub const MAX_BUCKETS: usize = 2048;

    pub fn new(limits: usize) -> Self {
        Timeline {
            start: None,
            width_ns: 60 * NS,
            buckets: vec![Vec::new(); limits],
        }
    }

    pub fn add(&mut self, limit: usize, t: i64, ok: u64, limited: u64, dry: u64) {
        let start = *self.start.get_or_insert(t.div_euclid(60 * NS) * 60 * NS);
        let mut i = ((t - start).max(0) / self.width_ns) as usize;
        while i >= Self::MAX_BUCKETS {
            self.width_ns *= 2;
            for b in &mut self.buckets {
                let merged: Vec<[u64; 3]> = b
                    .chunks(2)
                    .map(|c| {
                        let mut m = c[0];
                        if let Some(x) = c.get(1) {
                            for k in 0..3 {
                                m[k] += x[k];
                            }
                        }
                        m
                    })
                    .collect();
                *b = merged;
            }
            i = ((t - start).max(0) / self.width_ns) as usize;
        }
        let b = &mut self.buckets[limit];
        if b.len() <= i {
            b.resize(i + 1, [0; 3]);
        }
        b[i][0] += ok;
        b[i][1] += limited;
        b[i][2] += dry;
    }

    /// The self-contained HTML report: the status page's style and charts
    /// (`weir::policy::metrics::page`) over the report and this timeline.
    pub fn html(&self, r: &Report, title: &str) -> String {
        let data = serde_json::json!({
            "report": r,
            "timeline": {
                "start_s": self.start.unwrap_or(0) / NS,
                "width_s": self.width_ns / NS,
                "buckets": self.buckets,
            },
        });
        page::report(&format!("weir replay: {title}"), &data.to_string())
    }
}
