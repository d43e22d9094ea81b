//! The snapshot as Prometheus text (format 0.0.4): each family once, with one `# HELP` and one
//! `# TYPE` line and all its samples right under them.

use std::fmt::{self, Write};

use super::snapshot::{Field, Fields, Kind, Named, Snapshot};
use crate::policy::counters::{EngineCounts, LimitCounts};

/// The family `weir_limit_requests_total` (its `verdict` label: [`LimitCounts`]' keys).
const LIMIT_FAMILY: &str = "weir_limit_requests_total";

/// A family's name: prefix, key and `_total` for a counter.
fn family<T>(out: &mut impl Write, prefix: &str, f: &Field<T>) -> fmt::Result {
    let total = if f.kind == Kind::Counter {
        "_total"
    } else {
        ""
    };
    write!(out, "{prefix}{}{total}", f.key)
}

fn header(out: &mut impl Write, name: &str, kind: Kind, help: &str) -> fmt::Result {
    let kind = match kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
    };
    writeln!(out, "# HELP {name} {help}")?;
    writeln!(out, "# TYPE {name} {kind}")
}

/// Label values are policy and zone names (validated identifiers), but escape anyway.
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

impl Snapshot {
    /// Writes the snapshot as Prometheus text. The engine's families are left out without an
    /// engine, the zone and cluster families when there are no such zones.
    pub fn write_prometheus(&self, out: &mut impl Write) -> fmt::Result {
        if let Some(t) = &self.engine {
            for f in EngineCounts::FIELDS {
                let mut name = String::new();
                family(&mut name, "weir_", f)?;
                header(out, &name, f.kind, f.help)?;
                writeln!(out, "{name} {}", (f.get)(t))?;
            }
            header(
                out,
                LIMIT_FAMILY,
                Kind::Counter,
                "Requests per limit and verdict.",
            )?;
            for l in &self.limits {
                for f in LimitCounts::FIELDS {
                    write!(out, "{LIMIT_FAMILY}{{limit=\"")?;
                    label(out, &l.name)?;
                    writeln!(out, "\",verdict=\"{}\"}} {}", f.key, (f.get)(&l.counts))?;
                }
            }
        }
        per_name(out, "weir_zone_", &self.zones)?;
        per_name(out, "weir_cluster_", &self.clusters)
    }
}

/// One family per field, one sample per group (`zone="name"`); nothing for no groups.
fn per_name<T: Fields>(out: &mut impl Write, prefix: &str, groups: &[Named<T>]) -> fmt::Result {
    if groups.is_empty() {
        return Ok(());
    }
    for f in T::FIELDS {
        let mut name = String::new();
        family(&mut name, prefix, f)?;
        header(out, &name, f.kind, f.help)?;
        for g in groups {
            write!(out, "{name}{{zone=\"")?;
            label(out, &g.name)?;
            writeln!(out, "\"}} {}", (f.get)(&g.counts))?;
        }
    }
    Ok(())
}
