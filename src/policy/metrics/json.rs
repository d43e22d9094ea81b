//! The snapshot as the JSON status (schema version [`JSON_VERSION`], docs/METRICS.md):
//!
//! `{"version": 1, "engine": {…} | null, "limits": [{"name": …, …}], "zones": […],
//! "clusters": […]}`, each object's keys the field tables' keys in their order.

use serde::ser::{Serialize, SerializeMap, SerializeStruct, Serializer};

use super::snapshot::{Fields, Named, Snapshot, JSON_VERSION};

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

impl Serialize for Snapshot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("Snapshot", 5)?;
        st.serialize_field("version", &JSON_VERSION)?;
        let engine = self
            .engine
            .as_ref()
            .map(|counts| Object { name: None, counts });
        st.serialize_field("engine", &engine)?;
        st.serialize_field("limits", &List(&self.limits))?;
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
