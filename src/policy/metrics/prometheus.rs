//! The snapshot as Prometheus text (format 0.0.4): each family once, with one `# HELP` and one
//! `# TYPE` line and all its samples right under them.

use std::fmt::{self, Write};

use super::snapshot::{Field, Fields, Kind, Named, Snapshot};
use crate::policy::config::Lane;
use crate::policy::counters::{EngineCounts, LimitCounts};
use crate::policy::saturation::{Saturation, WAIT_BUCKETS_MS};

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
        self.write_saturation(out)?;
        per_name(out, "weir_zone_", &self.zones)?;
        per_name(out, "weir_cluster_", &self.clusters)
    }

    /// The `weir_concurrency_*` families: one sample per concurrency limit (nothing without).
    fn write_saturation(&self, out: &mut impl Write) -> fmt::Result {
        let limits: Vec<_> = (self.limits.iter().zip(&self.saturation))
            .filter_map(|(l, s)| Some((l.name.as_str(), s.as_ref()?)))
            .collect();
        if limits.is_empty() {
            return Ok(());
        }
        let secs = |ns: u64| ns as f64 / 1e9;
        type Gauge = (&'static str, &'static str, fn(&Saturation) -> f64);
        let gauges: [Gauge; 5] = [
            (
                "weir_concurrency_limit",
                "The limit enforced: learned (max = \"auto\") or the fixed max.",
                |s| s.limit as f64,
            ),
            (
                "weir_concurrency_in_flight",
                "Requests holding a permit.",
                |s| s.in_flight as f64,
            ),
            (
                "weir_concurrency_queued",
                "Requests waiting in the queue.",
                |s| s.queued as f64,
            ),
            (
                "weir_concurrency_noload_latency_seconds",
                "The backend's learned no-load latency.",
                |s| s.noload_ns as f64 / 1e9,
            ),
            (
                "weir_concurrency_latency_seconds",
                "The backend's recent mean latency.",
                |s| s.latency_ns as f64 / 1e9,
            ),
        ];
        for (name, help, get) in gauges {
            header(out, name, Kind::Gauge, help)?;
            for (l, s) in &limits {
                write!(out, "{name}{{limit=\"")?;
                label(out, l)?;
                writeln!(out, "\"}} {}", get(s))?;
            }
        }
        let shed = "weir_concurrency_shed_total";
        header(
            out,
            shed,
            Kind::Counter,
            "Requests the limit refused (full, queue full or wait over), per lane.",
        )?;
        for (l, s) in &limits {
            for (lane, n) in Lane::ALL.iter().zip(s.shed) {
                write!(out, "{shed}{{limit=\"")?;
                label(out, l)?;
                writeln!(out, "\",lane=\"{}\"}} {n}", lane.name())?;
            }
        }
        let wait = "weir_concurrency_queue_wait_seconds";
        writeln!(
            out,
            "# HELP {wait} Time admitted requests waited in the queue."
        )?;
        writeln!(out, "# TYPE {wait} histogram")?;
        for (l, s) in &limits {
            let les = WAIT_BUCKETS_MS
                .iter()
                .map(|ms| format!("{}", *ms as f64 / 1e3));
            for (le, n) in les.chain(["+Inf".to_owned()]).zip(s.wait_buckets) {
                write!(out, "{wait}_bucket{{limit=\"")?;
                label(out, l)?;
                writeln!(out, "\",le=\"{le}\"}} {n}")?;
            }
            write!(out, "{wait}_sum{{limit=\"")?;
            label(out, l)?;
            writeln!(out, "\"}} {}", secs(s.wait_sum_ns))?;
            write!(out, "{wait}_count{{limit=\"")?;
            label(out, l)?;
            writeln!(out, "\"}} {}", s.wait_count)?;
        }
        Ok(())
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
