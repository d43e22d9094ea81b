//! The snapshot both formats are rendered from, and the field tables that name its numbers.
//!
//! A number's JSON key is its field's `key`; its Prometheus family is the group's prefix, the
//! key, and `_total` for a counter (`weir_zone_` + `inserts` + `_total`). Both renderers read
//! the same tables, so the two formats cannot name a number differently.

use crate::cluster::ClusterCounts;
use crate::policy::counters::{EngineCounts, LimitCounts};
use crate::policy::engine::Engine;
use crate::policy::topkeys::LimitTop;
use crate::table::TableStats;

/// Version of the JSON status schema (docs/METRICS.md). Bumped when a key is renamed, removed
/// or changes meaning; keys may be added within a version.
pub const JSON_VERSION: u32 = 2;

/// A number's Prometheus type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows (until a restart, or a zone recreated): family name ends in `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// One number of a group: its JSON key (and Prometheus name tail), type, help text and value.
pub struct Field<T> {
    pub key: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub get: fn(&T) -> u64,
}

/// A group of numbers with a fixed list of fields, in rendering order.
pub trait Fields: Sized + 'static {
    const FIELDS: &'static [Field<Self>];
}

const fn counter<T>(key: &'static str, help: &'static str, get: fn(&T) -> u64) -> Field<T> {
    Field {
        key,
        kind: Kind::Counter,
        help,
        get,
    }
}

const fn gauge<T>(key: &'static str, help: &'static str, get: fn(&T) -> u64) -> Field<T> {
    Field {
        key,
        kind: Kind::Gauge,
        help,
        get,
    }
}

/// Engine-wide: `weir_<key>_total`.
impl Fields for EngineCounts {
    const FIELDS: &'static [Field<Self>] = &[
        counter("requests", "Requests evaluated.", |c| c.requests),
        counter("exempt", "Requests that matched an exemption.", |c| {
            c.exempt
        }),
        counter("unmatched", "Requests that matched no limit.", |c| {
            c.unmatched
        }),
        counter(
            "bad_target",
            "Requests with a target nginx answers 400.",
            |c| c.bad_target,
        ),
    ];
}

/// Per limit: the `verdict` label of `weir_limit_requests_total`.
impl Fields for LimitCounts {
    const FIELDS: &'static [Field<Self>] = &[
        counter("passed", "Requests the limit passed.", |c| c.passed),
        counter("delayed", "Requests the limit delayed.", |c| c.delayed),
        counter("rejected", "Requests the limit rejected.", |c| c.rejected),
        counter(
            "queued",
            "Requests that waited in the limit's queue.",
            |c| c.queued,
        ),
        counter(
            "dry_run_delayed",
            "Requests the limit would have delayed (dry run).",
            |c| c.dry_run_delayed,
        ),
        counter(
            "dry_run_rejected",
            "Requests the limit would have rejected (dry run).",
            |c| c.dry_run_rejected,
        ),
        counter(
            "banned",
            "Requests refused because their key was banned.",
            |c| c.banned,
        ),
    ];
}

/// Per zone: `weir_zone_<key>[_total]`.
impl Fields for TableStats {
    const FIELDS: &'static [Field<Self>] = &[
        gauge("capacity", "Keys the zone can hold.", |s| s.capacity),
        gauge("occupancy", "Keys stored.", |s| s.occupancy),
        counter("inserts", "Keys stored since creation.", |s| s.inserts),
        counter(
            "evictions_expired",
            "Expired states evicted (lossless).",
            |s| s.evicted_expired,
        ),
        counter(
            "evictions_active",
            "Active states evicted for lack of room.",
            |s| s.evicted_active,
        ),
        gauge("longest_probe", "Longest probe distance seen.", |s| {
            s.longest_probe
        }),
        counter("passed", "Checks the zone passed.", |s| s.passed),
        counter("delayed", "Checks the zone delayed.", |s| s.delayed),
        counter("rejected", "Checks the zone rejected.", |s| s.rejected),
    ];
}

/// Per cluster zone: `weir_cluster_<key>[_total]`.
impl Fields for ClusterCounts {
    const FIELDS: &'static [Field<Self>] = &[
        counter("syncs", "Successful syncs with Redis.", |c| c.syncs),
        counter("sync_errors", "Failed sync or connection attempts.", |c| {
            c.sync_errors
        }),
        counter(
            "fallback_decisions",
            "Requests decided on the local share while Redis was away.",
            |c| c.fallback_decisions,
        ),
        counter(
            "pushed_units",
            "Admitted cost units pushed to Redis.",
            |c| c.pushed_units,
        ),
        counter(
            "remote_evictions_active",
            "Remote counts evicted for lack of room (remote table overflow).",
            |c| c.remote_evictions_active,
        ),
        gauge(
            "leader",
            "1 while this process's syncer is the zone's elected syncer.",
            |c| c.leader,
        ),
        gauge(
            "leader_pid",
            "Process id of the syncer that synced last.",
            |c| c.leader_pid,
        ),
        gauge(
            "fallback_active",
            "1 while the zone decides on the local fallback share.",
            |c| c.fallback_active,
        ),
        gauge(
            "sync_age_ms",
            "Milliseconds since the last successful sync (0 before the first).",
            |c| c.sync_age_ms,
        ),
        gauge(
            "share",
            "Concurrency pool: units this node may hold over its keys (floors and grants).",
            |c| c.share,
        ),
        gauge(
            "demand",
            "Concurrency pool: units in flight and queued on this node.",
            |c| c.demand,
        ),
        gauge(
            "in_flight",
            "Concurrency pool: units in flight on this node.",
            |c| c.in_flight,
        ),
        gauge(
            "leased_keys",
            "Concurrency pool: keys this node holds or wants a grant for.",
            |c| c.leased_keys,
        ),
    ];
}

/// A group's numbers under the name of what they count (a limit, a zone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named<T> {
    pub name: String,
    pub counts: T,
}

/// Every number an engine and the zones beside it expose, read at one time (each counter read
/// without a lock: counts added meanwhile may or may not show). Its size is fixed by the
/// configuration (the top keys are a bounded list per limit).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Engine-wide counts (summed over the engines); `None` without an engine.
    pub engine: Option<EngineCounts>,
    /// The engines' limits, in order.
    pub limits: Vec<Named<LimitCounts>>,
    /// Each limit's top keys and clients and per-second history, as `limits` (JSON only:
    /// the Prometheus text has no per-key data).
    pub tops: Vec<LimitTop>,
    /// The engines' zones, then the zones outside any engine.
    pub zones: Vec<Named<TableStats>>,
    /// The engines' cluster zones.
    pub clusters: Vec<Named<ClusterCounts>>,
    /// Each concurrency limit's saturation, as `limits` (`None` for rate limits).
    pub saturation: Vec<Option<crate::policy::saturation::Saturation>>,
}

impl Snapshot {
    /// Reads the counters of `engines` (nginx: the policy's and the directives'; their totals
    /// summed, their limits, zones and cluster zones listed in turn) and of `zones` — tables
    /// outside any engine, named; cluster health is judged at `now` (CLOCK_MONOTONIC ns).
    pub fn take(engines: &[&Engine], zones: &[(&str, TableStats)], now: u64) -> Snapshot {
        fn named<T>(name: &str, counts: T) -> Named<T> {
            Named {
                name: name.to_owned(),
                counts,
            }
        }
        let mut s = Snapshot::default();
        for e in engines {
            let t = e.totals();
            let sum = s.engine.get_or_insert_with(EngineCounts::default);
            sum.requests += t.requests;
            sum.exempt += t.exempt;
            sum.unmatched += t.unmatched;
            sum.bad_target += t.bad_target;
            let p = e.policy();
            s.limits
                .extend((0..p.limits.len()).map(|i| named(e.limit_name(i), e.counters(i))));
            s.tops
                .extend((0..p.limits.len()).map(|i| e.limit_top(i, now)));
            s.saturation
                .extend((0..p.limits.len()).map(|i| e.saturation(i, now)));
            s.zones
                .extend((0..p.zones.len()).map(|z| named(&p.zones[z].name, e.zone_stats(z))));
            s.clusters
                .extend(e.clusters().map(|c| named(c.name(), c.counts(now))));
        }
        s.zones
            .extend(zones.iter().map(|(name, stats)| named(name, *stats)));
        s
    }
}
