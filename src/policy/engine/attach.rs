//! An engine over regions a host provides and shares between its processes (nginx: one
//! shared-memory zone per zone, per cluster zone and for the counters): each region is created
//! on first use and attached with its state afterwards (a reload), through [`crate::region`].

use super::*;
use crate::region::{Fresh, Region};

/// The regions a host gives [`Engine::attach`].
#[derive(Clone, Copy, Debug)]
pub struct HostRegions<'a> {
    /// One per zone in zone order, each at least its [`ZoneLayout::bytes`] long.
    pub zones: &'a [Region],
    /// One per zone in zone order: a cluster zone's shared region (at least its
    /// [`ZoneLayout::cluster_bytes`]), `None` for a local zone. `None` as a whole: cluster
    /// state lives in this process.
    pub cluster: Option<&'a [Option<Region>]>,
    /// The counter block ([`Engine::counters_layout`]); `None`: counters in this process.
    pub counters: Option<Region>,
}

/// How [`Engine::attach`] creates what the regions do not hold yet.
#[derive(Clone, Copy, Debug)]
pub struct AttachOptions {
    /// Recorded in newly created zones (0: CLOCK_MONOTONIC as is).
    pub clock_base: u64,
    /// Start the cluster syncers now (false: [`Engine::start_syncers`] later, e.g. after
    /// `fork`).
    pub start_syncers: bool,
    /// What a zone or cluster region holding no table yet contains.
    pub fresh: Fresh,
}

/// Why [`Engine::attach`] failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttachError {
    /// The regions do not match the policy (their number, a cluster region for a local zone).
    Invalid(String),
    /// A region could not be created or attached, or the engine could not be built.
    Zone(String),
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachError::Invalid(m) | AttachError::Zone(m) => f.write_str(m),
        }
    }
}

impl Engine {
    /// An engine over `regions`: a region that already holds its zone (an nginx reload)
    /// keeps its state; one created for another layout, size or schema is refused. The
    /// counter block keeps its counts while the policy's limits stay the same and starts from
    /// zero otherwise; a cluster region is formatted anew when it holds another layout.
    pub fn attach(
        policy: CompiledPolicy,
        regions: HostRegions,
        opts: AttachOptions,
    ) -> Result<Engine, AttachError> {
        let layouts = Engine::layouts(&policy);
        let zone = |l: &ZoneLayout, e: &dyn std::fmt::Display| {
            AttachError::Zone(format!("zone {}: {e}", l.name))
        };
        if regions.zones.len() != layouts.len() {
            let (n, zones) = (regions.zones.len(), layouts.len());
            return Err(AttachError::Invalid(format!(
                "{n} regions for {zones} zones"
            )));
        }
        let mut tables = Vec::with_capacity(layouts.len());
        for (r, l) in regions.zones.iter().zip(&layouts) {
            if r.len() < l.bytes {
                let e = format!("region of {} bytes, needs {}", r.len(), l.bytes);
                return Err(zone(l, &e));
            }
            let region = r.part(0, l.bytes);
            let (t, _) = Table::create_or_attach_in(region, l.schema, opts.clock_base, opts.fresh)
                .map_err(|e| zone(l, &e))?;
            tables.push(t);
        }
        let mut shared = Vec::with_capacity(layouts.len());
        for (i, (l, t)) in layouts.iter().zip(&tables).enumerate() {
            let r = regions.cluster.map(|c| c.get(i).copied().flatten());
            shared.push(match r {
                Some(Some(r)) if l.cluster_bytes > 0 => Some(
                    ClusterShared::create_or_attach_in(r, t.capacity(), l.schema, opts.fresh)
                        .map_err(|e| zone(l, &e))?
                        .0,
                ),
                Some(r) if l.cluster_bytes > 0 || r.is_some() => {
                    return Err(AttachError::Invalid(format!(
                        "zone {}: a cluster region is needed for cluster zones only",
                        l.name
                    )))
                }
                _ => None,
            });
        }
        let counters = match regions.counters {
            None => Counters::new(policy.limits.len()),
            Some(r) => {
                let (_, fp) = Engine::counters_layout(&policy);
                Counters::attach_in(r, policy.limits.len(), fp, opts.fresh)
                    .map_err(|e| AttachError::Zone(format!("counters: {e}")))?
            }
        };
        Engine::with_shared(policy, tables, shared, counters, opts.start_syncers)
            .map_err(AttachError::Zone)
    }
}
