//! The snapshot `weir top` derives from one status: per limit, rates per second over the last
//! minute and 15 minutes (from `per_second`), the top keys and clients, and the active bans.
//! `--once --json` prints it (schema in docs/CLI.md).

use serde::Serialize;

use super::status::{Ban, Capacity, ClientCount, KeyCount, Limit, PerSecond, Status, Window};

/// Schema version of the snapshot object (`weir_top`).
pub const SNAPSHOT_VERSION: u32 = 1;

/// One snapshot: every limit of the status, or the one `--limit` names.
#[derive(Debug, Serialize)]
pub struct Snapshot {
    pub weir_top: u32,
    pub url: String,
    pub limits: Vec<LimitView>,
}

/// A limit as `weir top` shows it.
#[derive(Debug, Serialize)]
pub struct LimitView {
    pub name: String,
    /// Counts since the engine started.
    pub total: Totals,
    pub last_1m: WindowView,
    pub last_15m: WindowView,
    /// Active bans; `None` (JSON `null`) when the status reports no bans at all.
    pub bans: Option<Vec<Ban>>,
    /// A concurrency limit's saturation; left out for rate limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Totals {
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
}

/// Rates over a window and its top rejected keys and clients (most rejected first).
#[derive(Debug, Serialize, PartialEq)]
pub struct WindowView {
    pub seconds: u64,
    /// Passes per second over the window's seconds whose passes are known; `None` if none is.
    pub passed_per_s: Option<f64>,
    /// Seconds of the window whose passes are known (what `passed_per_s` is over).
    pub passed_known_s: u64,
    pub delayed_per_s: f64,
    pub rejected_per_s: f64,
    pub keys: Vec<KeyCount>,
    pub clients: Vec<ClientCount>,
}

/// Rates per second over the last `seconds` entries of `per` (the current second included, as
/// the status's own windows count): (passed over its known seconds, those seconds, delayed,
/// rejected).
pub fn rates(per: &PerSecond, seconds: u64) -> (Option<f64>, u64, f64, f64) {
    let tail = |v: &[Option<u64>]| -> Vec<Option<u64>> {
        let n = (seconds as usize).min(v.len());
        v[v.len() - n..].to_vec()
    };
    let passed = tail(&per.passed);
    let known: Vec<u64> = passed.iter().flatten().copied().collect();
    let passed = (!known.is_empty()).then(|| known.iter().sum::<u64>() as f64 / known.len() as f64);
    let per_s = |v: &[Option<u64>]| {
        let t = tail(v);
        if t.is_empty() || seconds == 0 {
            0.0
        } else {
            t.iter().flatten().sum::<u64>() as f64 / seconds as f64
        }
    };
    let known_s = known.len() as u64;
    (passed, known_s, per_s(&per.delayed), per_s(&per.rejected))
}

fn window(w: Option<&Window>, per: Option<&PerSecond>, seconds: u64) -> WindowView {
    let empty = Window::default();
    let w = w.unwrap_or(&empty);
    let (passed_per_s, passed_known_s, delayed_per_s, rejected_per_s) = match per {
        Some(p) => rates(p, seconds),
        // No history: the window's counts over its seconds.
        None => {
            let s = w.seconds.max(1) as f64;
            let seen = w.seconds > 0;
            (
                seen.then(|| w.passed as f64 / s),
                w.seconds,
                w.delayed as f64 / s,
                w.rejected as f64 / s,
            )
        }
    };
    WindowView {
        seconds,
        passed_per_s,
        passed_known_s,
        delayed_per_s,
        rejected_per_s,
        keys: w.keys.clone(),
        clients: w.clients.clone(),
    }
}

/// The limit's view.
pub fn limit_view(l: &Limit) -> LimitView {
    let per = l.per_second.as_ref();
    LimitView {
        name: l.name.clone(),
        total: Totals {
            passed: l.passed,
            delayed: l.delayed,
            rejected: l.rejected,
        },
        last_1m: window(l.last_1m.as_ref(), per, 60),
        last_15m: window(l.last_15m.as_ref(), per, 900),
        bans: l.bans.clone(),
        capacity: l.capacity.clone(),
    }
}

/// The snapshot of `status`; only the limit named `only` when given (an error if none is).
pub fn derive(status: &Status, url: &str, only: Option<&str>) -> Result<Snapshot, String> {
    let limits: Vec<LimitView> = status
        .limits
        .iter()
        .filter(|l| only.is_none_or(|n| l.name == n))
        .map(limit_view)
        .collect();
    if let Some(n) = only {
        if limits.is_empty() {
            let names: Vec<&str> = status.limits.iter().map(|l| l.name.as_str()).collect();
            return Err(format!("no limit {n:?} (limits: {})", names.join(", ")));
        }
    }
    Ok(Snapshot {
        weir_top: SNAPSHOT_VERSION,
        url: url.to_string(),
        limits,
    })
}

/// A rate for people: `12.3/s`, `0.02/s`, `-` when unknown.
pub fn rate(r: Option<f64>) -> String {
    match r {
        None => "-".into(),
        Some(0.0) => "0/s".into(),
        Some(r) if r >= 10.0 => format!("{r:.0}/s"),
        Some(r) if r >= 0.1 => format!("{r:.1}/s"),
        Some(r) => format!("{r:.2}/s"),
    }
}

/// The plain-text summary `--once` prints.
pub fn text(s: &Snapshot, top: usize) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if s.limits.is_empty() {
        let _ = writeln!(out, "{}: no limits", s.url);
    }
    for l in &s.limits {
        let _ = writeln!(
            out,
            "limit {}: total {} passed, {} delayed, {} rejected",
            l.name, l.total.passed, l.total.delayed, l.total.rejected
        );
        for w in [&l.last_1m, &l.last_15m] {
            let _ = writeln!(
                out,
                "  last {:>3}m: passed {:>8}  delayed {:>8}  rejected {:>8}{}",
                w.seconds / 60,
                rate(w.passed_per_s),
                rate(Some(w.delayed_per_s)),
                rate(Some(w.rejected_per_s)),
                known(w)
            );
        }
        if let Some(c) = &l.capacity {
            let _ = writeln!(out, "  capacity: {}", c.line());
        }
        let w = &l.last_1m;
        for (label, rows) in [
            (
                "top keys (rejected, last 1m)",
                w.keys
                    .iter()
                    .map(|k| (&k.key, k.rejected))
                    .collect::<Vec<_>>(),
            ),
            (
                "top clients (rejected, last 1m)",
                w.clients.iter().map(|c| (&c.client, c.rejected)).collect(),
            ),
        ] {
            if !rows.is_empty() {
                let _ = writeln!(out, "  {label}:");
                for (name, n) in rows.into_iter().take(top) {
                    let _ = writeln!(out, "    {n:>8}  {name}");
                }
            }
        }
        if let Some(bans) = &l.bans {
            let _ = writeln!(out, "  bans: {}", bans.len());
            for b in bans.iter().take(top) {
                let _ = writeln!(out, "    {}  {}", ban_left(b), b.key);
            }
        }
    }
    out
}

/// What is left of a ban: `120s`, `until 5120`, or `-`.
pub fn ban_left(b: &Ban) -> String {
    match (b.remaining, b.until) {
        (Some(r), _) => format!("{r:.0}s"),
        (None, Some(u)) => format!("until {u:.0}"),
        _ => "-".into(),
    }
}

/// `  (passes known in N s)` when the window's passes are not known in all its seconds.
pub fn known(w: &WindowView) -> String {
    if w.passed_known_s < w.seconds {
        format!("  (passes known in {} s)", w.passed_known_s)
    } else {
        String::new()
    }
}
