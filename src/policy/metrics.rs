//! Prometheus text exposition of an engine's counters (one format for every host).
//!
//! No per-key labels: cardinality is bounded by the policy (limits and zones).

use std::fmt::{self, Write};

use super::engine::Engine;

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
        let t = self.totals();
        writeln!(out, "# HELP weir_requests_total Requests evaluated.")?;
        writeln!(out, "# TYPE weir_requests_total counter")?;
        writeln!(out, "weir_requests_total {}", t.requests)?;
        writeln!(
            out,
            "# HELP weir_exempt_total Requests that matched an exemption."
        )?;
        writeln!(out, "# TYPE weir_exempt_total counter")?;
        writeln!(out, "weir_exempt_total {}", t.exempt)?;
        writeln!(
            out,
            "# HELP weir_unmatched_total Requests that matched no limit."
        )?;
        writeln!(out, "# TYPE weir_unmatched_total counter")?;
        writeln!(out, "weir_unmatched_total {}", t.unmatched)?;
        writeln!(
            out,
            "# HELP weir_bad_target_total Requests with a target nginx answers 400."
        )?;
        writeln!(out, "# TYPE weir_bad_target_total counter")?;
        writeln!(out, "weir_bad_target_total {}", t.bad_target)?;

        writeln!(
            out,
            "# HELP weir_limit_requests_total Requests per limit and verdict."
        )?;
        writeln!(out, "# TYPE weir_limit_requests_total counter")?;
        for i in 0..self.policy().limits.len() {
            let c = self.counters(i);
            for (verdict, v) in [
                ("passed", c.passed),
                ("delayed", c.delayed),
                ("rejected", c.rejected),
                ("queued", c.queued),
                ("dry_run_delayed", c.dry_run_delayed),
                ("dry_run_rejected", c.dry_run_rejected),
            ] {
                out.write_str("weir_limit_requests_total{limit=\"")?;
                label(out, self.limit_name(i))?;
                writeln!(out, "\",verdict=\"{verdict}\"}} {v}")?;
            }
        }

        let zones = &self.policy().zones;
        let stats: Vec<_> = (0..zones.len()).map(|z| self.zone_stats(z)).collect();
        type Field = fn(&crate::table::TableStats) -> u64;
        let series: [(&str, &str, &str, Field); 6] = [
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
        ];
        for (name, kind, help, f) in series {
            writeln!(out, "# HELP {name} {help}")?;
            writeln!(out, "# TYPE {name} {kind}")?;
            for (z, s) in zones.iter().zip(&stats) {
                write!(out, "{name}{{zone=\"")?;
                label(out, &z.name)?;
                writeln!(out, "\"}} {}", f(s))?;
            }
        }
        crate::cluster::render_prometheus(self.clusters(), crate::clock::monotonic_ns(), out)?;
        Ok(())
    }
}
