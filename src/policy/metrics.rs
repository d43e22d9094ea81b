//! Prometheus text exposition of an engine's counters (one format for every host).
//!
//! No per-key labels: cardinality is bounded by the policy (limits and zones).

use std::fmt::{self, Write};

use super::engine::Engine;
use crate::table::TableStats;

/// Label values are policy names (validated identifiers), but escape anyway.
fn label(out: &mut impl Write, v: &str) -> fmt::Result {
    for c in v.chars() {
        match c {
            '\\' => out.write_str("\\\\")?,
            '"' => out.write_str("\\\"")?,
            '\n' => out.write_str("\\n")?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

impl Engine {
    /// Writes every counter in the Prometheus text format (version 0.0.4).
    pub fn render_prometheus(&self, out: &mut impl Write) -> fmt::Result {
        render_prometheus(&[self], &[], out)
    }
}

/// Writes the counters of `engines` (nginx: the policy's and the directives') and of `zones` —
/// tables outside any engine, named — as one Prometheus text (version 0.0.4): each metric family
/// once, with one `# HELP` and one `# TYPE` line and all its samples under them, the engines'
/// totals summed, every zone in the `weir_zone_*` families (left out when there are no zones
/// at all).
pub fn render_prometheus(
    engines: &[&Engine],
    zones: &[(&str, TableStats)],
    out: &mut impl Write,
) -> fmt::Result {
    let mut all: Vec<(&str, TableStats)> = Vec::new();
    if !engines.is_empty() {
        render_engines(engines, out)?;
    }
    for e in engines {
        let pz = &e.policy().zones;
        all.extend((0..pz.len()).map(|z| (pz[z].name.as_str(), e.zone_stats(z))));
    }
    all.extend_from_slice(zones);
    render_zones(&all, out)?;
    if !engines.is_empty() {
        let clusters = engines.iter().flat_map(|e| e.clusters());
        crate::cluster::render_prometheus(clusters, crate::clock::monotonic_ns(), out)?;
    }
    Ok(())
}

fn render_engines(engines: &[&Engine], out: &mut impl Write) -> fmt::Result {
    let mut t = engines[0].totals();
    for e in &engines[1..] {
        let u = e.totals();
        t.requests += u.requests;
        t.exempt += u.exempt;
        t.unmatched += u.unmatched;
        t.bad_target += u.bad_target;
    }
    for (name, help, v) in [
        ("weir_requests_total", "Requests evaluated.", t.requests),
        (
            "weir_exempt_total",
            "Requests that matched an exemption.",
            t.exempt,
        ),
        (
            "weir_unmatched_total",
            "Requests that matched no limit.",
            t.unmatched,
        ),
        (
            "weir_bad_target_total",
            "Requests with a target nginx answers 400.",
            t.bad_target,
        ),
    ] {
        writeln!(out, "# HELP {name} {help}")?;
        writeln!(out, "# TYPE {name} counter")?;
        writeln!(out, "{name} {v}")?;
    }
    writeln!(
        out,
        "# HELP weir_limit_requests_total Requests per limit and verdict."
    )?;
    writeln!(out, "# TYPE weir_limit_requests_total counter")?;
    for (e, i) in engines
        .iter()
        .flat_map(|e| (0..e.policy().limits.len()).map(move |i| (e, i)))
    {
        let c = e.counters(i);
        for (verdict, v) in [
            ("passed", c.passed),
            ("delayed", c.delayed),
            ("rejected", c.rejected),
            ("queued", c.queued),
            ("dry_run_delayed", c.dry_run_delayed),
            ("dry_run_rejected", c.dry_run_rejected),
        ] {
            out.write_str("weir_limit_requests_total{limit=\"")?;
            label(out, e.limit_name(i))?;
            writeln!(out, "\",verdict=\"{verdict}\"}} {v}")?;
        }
    }
    Ok(())
}

/// The `weir_zone_*` families (docs/NGINX.md, "Metrics").
fn render_zones(zones: &[(&str, TableStats)], out: &mut impl Write) -> fmt::Result {
    if zones.is_empty() {
        return Ok(());
    }
    type Field = fn(&TableStats) -> u64;
    let series: [(&str, &str, &str, Field); 9] = [
        (
            "weir_zone_capacity",
            "gauge",
            "Keys the zone can hold.",
            |s| s.capacity,
        ),
        ("weir_zone_occupancy", "gauge", "Keys stored.", |s| {
            s.occupancy
        }),
        (
            "weir_zone_inserts_total",
            "counter",
            "Keys stored since creation.",
            |s| s.inserts,
        ),
        (
            "weir_zone_evictions_expired_total",
            "counter",
            "Expired states evicted (lossless).",
            |s| s.evicted_expired,
        ),
        (
            "weir_zone_evictions_active_total",
            "counter",
            "Active states evicted for lack of room.",
            |s| s.evicted_active,
        ),
        (
            "weir_zone_longest_probe",
            "gauge",
            "Longest probe distance seen.",
            |s| s.longest_probe,
        ),
        (
            "weir_zone_passed_total",
            "counter",
            "Checks the zone passed.",
            |s| s.passed,
        ),
        (
            "weir_zone_delayed_total",
            "counter",
            "Checks the zone delayed.",
            |s| s.delayed,
        ),
        (
            "weir_zone_rejected_total",
            "counter",
            "Checks the zone rejected.",
            |s| s.rejected,
        ),
    ];
    for (name, kind, help, f) in series {
        writeln!(out, "# HELP {name} {help}")?;
        writeln!(out, "# TYPE {name} {kind}")?;
        for (zone, s) in zones {
            write!(out, "{name}{{zone=\"")?;
            label(out, zone)?;
            writeln!(out, "\"}} {}", f(s))?;
        }
    }
    Ok(())
}
