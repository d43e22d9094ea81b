//! The engine's counters for operators, in one format or the other: Prometheus text (format
//! 0.0.4) or the JSON status (docs/METRICS.md). Both are rendered from one [`Snapshot`] whose
//! numbers are named by one set of field tables ([`Fields`]), so the formats cannot drift.
//!
//! No per-key labels in the Prometheus text; the JSON status adds each limit's bounded top keys
//! and clients (`policy::topkeys`): the output's size is fixed by the policy (limits and zones).

mod json;
pub mod page;
mod prometheus;
mod snapshot;

use std::fmt::{self, Write};

pub use snapshot::{Field, Fields, Kind, Named, Snapshot, JSON_VERSION};

use super::engine::Engine;
use crate::table::TableStats;

/// What a status endpoint answers: the two renderings of a [`Snapshot`], or the status page
/// that reads the JSON one ([`page`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Prometheus,
    Json,
    Html,
}

impl Format {
    /// The format a status request names (`?format=`): `prometheus`, `json` or `html`.
    pub fn from_name(name: &str) -> Option<Format> {
        match name {
            "prometheus" => Some(Format::Prometheus),
            "json" => Some(Format::Json),
            "html" => Some(Format::Html),
            _ => None,
        }
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::Json => "application/json",
            Format::Html => "text/html; charset=utf-8",
        }
    }
}

impl Snapshot {
    /// The snapshot in `format` (the page shows no snapshot: it reads the JSON one).
    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Prometheus => {
                let mut text = String::new();
                // Writing into a String cannot fail.
                let _ = self.write_prometheus(&mut text);
                text
            }
            Format::Json => self.to_json(),
            Format::Html => page::live().html.clone(),
        }
    }
}

impl Engine {
    /// Every counter of this engine, read now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::take(&[self], &[], crate::clock::monotonic_ns())
    }

    /// Writes every counter in the Prometheus text format (version 0.0.4).
    pub fn render_prometheus(&self, out: &mut impl Write) -> fmt::Result {
        self.snapshot().write_prometheus(out)
    }

    /// Every counter as the JSON status.
    pub fn render_json(&self) -> String {
        self.snapshot().to_json()
    }
}

/// Renders the counters of `engines` (see [`Snapshot::take`]) and of `zones` — tables outside
/// any engine, named — in `format`.
pub fn render(engines: &[&Engine], zones: &[(&str, TableStats)], format: Format) -> String {
    if format == Format::Html {
        return page::live().html.clone();
    }
    Snapshot::take(engines, zones, crate::clock::monotonic_ns()).render(format)
}

/// [`render`] as Prometheus text into `out`: each metric family once, with one `# HELP` and
/// one `# TYPE` line and all its samples under them.
pub fn render_prometheus(
    engines: &[&Engine],
    zones: &[(&str, TableStats)],
    out: &mut impl Write,
) -> fmt::Result {
    Snapshot::take(engines, zones, crate::clock::monotonic_ns()).write_prometheus(out)
}
