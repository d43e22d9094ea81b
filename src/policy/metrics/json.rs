//! The snapshot as the JSON status (schema version [`JSON_VERSION`], docs/METRICS.md):
//!
//! `{"version": 2, "engine": {…} | null, "limits": [{"name": …, …}], "zones": […],
//! "clusters": […]}`, each object's keys the field tables' keys in their order; a limit's
//! object then has its live view (`last_1m`, `last_15m`, `per_second`).

use serde::ser::{Serialize, SerializeMap, SerializeStruct, Serializer};

use super::snapshot::{Fields, Named, Snapshot, JSON_VERSION};
use crate::policy::config::Lane;
use crate::policy::counters::LimitCounts;
use crate::policy::saturation::{Saturation, WAIT_BUCKETS_MS};
use crate::policy::topkeys::{Counted, LimitTop, PerSecond, Window};

/// One group as an object: `name` (when named), then every field.
struct Object<'a, T> {
    name: Option<&'a str>,
    counts: &'a T,
}

impl<T: Fields> Serialize for Object<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(T::FIELDS.len() + usize::from(self.name.is_some())))?;
        if let Some(name) = self.name {
            m.serialize_entry("name", name)?;
        }
        for f in T::FIELDS {
            m.serialize_entry(f.key, &(f.get)(self.counts))?;
        }
        m.end()
    }
}

/// A list of named groups as an array of objects.
struct List<'a, T>(&'a [Named<T>]);

impl<T: Fields> Serialize for List<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|g| Object {
            name: Some(&g.name),
            counts: &g.counts,
        }))
    }
}

/// A limit: its counts, then its live view.
struct LimitObject<'a> {
    limit: &'a Named<LimitCounts>,
    top: Option<&'a LimitTop>,
    saturation: Option<&'a Saturation>,
}

/// A concurrency limit's saturation (`capacity`).
struct CapacityObject<'a>(&'a Saturation);

impl Serialize for CapacityObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let ms = |ns: u64| ns as f64 / 1e6;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("limit", &c.limit)?;
        m.serialize_entry("auto", &c.auto)?;
        m.serialize_entry("in_flight", &c.in_flight)?;
        m.serialize_entry("queued", &c.queued)?;
        m.serialize_entry("noload_latency_ms", &ms(c.noload_ns))?;
        m.serialize_entry("latency_ms", &ms(c.latency_ns))?;
        let shed: std::collections::BTreeMap<_, _> = (Lane::ALL.iter().zip(c.shed))
            .map(|(l, n)| (l.name(), n))
            .collect();
        m.serialize_entry("shed", &shed)?;
        m.serialize_entry(
            "queue_wait",
            &serde_json::json!({
                "count": c.wait_count,
                "sum_ms": ms(c.wait_sum_ns),
                "buckets_ms": WAIT_BUCKETS_MS,
                "counts": c.wait_buckets,
            }),
        )?;
        m.end()
    }
}

impl Serialize for LimitObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("name", &self.limit.name)?;
        for f in LimitCounts::FIELDS {
            m.serialize_entry(f.key, &(f.get)(&self.limit.counts))?;
        }
        if let Some(t) = self.top {
            m.serialize_entry("last_1m", &WindowObject(&t.last_1m))?;
            m.serialize_entry("last_15m", &WindowObject(&t.last_15m))?;
            m.serialize_entry("per_second", &SecondsObject(&t.per_second))?;
            if let Some(bans) = &t.bans {
                let bans: Vec<_> = bans
                    .iter()
                    .map(|b| BanObject {
                        key: &b.key,
                        remaining_s: b.remaining_s,
                    })
                    .collect();
                m.serialize_entry("bans", &bans)?;
            }
        }
        if let Some(c) = self.saturation {
            m.serialize_entry("capacity", &CapacityObject(c))?;
        }
        m.end()
    }
}

/// An active ban: its key and the seconds it still lasts.
#[derive(serde::Serialize)]
struct BanObject<'a> {
    key: &'a str,
    remaining_s: u64,
}

struct WindowObject<'a>(&'a Window);

impl Serialize for WindowObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let w = self.0;
        let mut m = s.serialize_map(Some(6))?;
        m.serialize_entry("seconds", &w.seconds)?;
        m.serialize_entry("passed", &w.passed)?;
        m.serialize_entry("delayed", &w.delayed)?;
        m.serialize_entry("rejected", &w.rejected)?;
        m.serialize_entry("keys", &Names("key", &w.keys))?;
        m.serialize_entry("clients", &Names("client", &w.clients))?;
        m.end()
    }
}

/// `[{"<what>": name, "rejected": count}]`.
struct Names<'a>(&'static str, &'a [Counted]);

impl Serialize for Names<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.1.iter().map(|c| {
            let mut m = serde_json::Map::new();
            m.insert(self.0.into(), c.name.clone().into());
            m.insert("rejected".into(), c.count.into());
            m
        }))
    }
}

struct SecondsObject<'a>(&'a PerSecond);

impl Serialize for SecondsObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let p = self.0;
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("end", &p.end)?;
        m.serialize_entry("passed", &p.passed)?;
        m.serialize_entry("delayed", &p.delayed)?;
        m.serialize_entry("rejected", &p.rejected)?;
        m.end()
    }
}

impl Serialize for Snapshot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Snapshot", 5)?;
        st.serialize_field("version", &JSON_VERSION)?;
        let engine = self
            .engine
            .as_ref()
            .map(|counts| Object { name: None, counts });
        st.serialize_field("engine", &engine)?;
        let limits: Vec<_> = (self.limits.iter().enumerate())
            .map(|(i, limit)| LimitObject {
                limit,
                top: self.tops.get(i),
                saturation: self.saturation.get(i).and_then(Option::as_ref),
            })
            .collect();
        st.serialize_field("limits", &limits)?;
        st.serialize_field("zones", &List(&self.zones))?;
        st.serialize_field("clusters", &List(&self.clusters))?;
        st.end()
    }
}

impl Snapshot {
    /// The JSON status, one line.
    pub fn to_json(&self) -> String {
        // Serializing numbers and strings into a String cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}
