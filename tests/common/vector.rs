//! The shared vectors (`tests/vectors/*.json`, format in `tests/vectors/README.md`), loaded and
//! checked once for every Rust runner: the engine's (`tests/policy/vectors.rs`) and the tower
//! layer's (`tower/tests/vectors.rs`, which includes this file by path).
//!
//! [`load`] refuses a directory with fewer than [`MIN_VECTORS`] vectors, a file not named
//! after its vector, a duplicate name, a missing description, unknown fields, time going
//! backwards and a step naming a step that is not earlier.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Deserializer};

/// Guard against a missing or emptied directory passing silently.
pub const MIN_VECTORS: usize = 70;
/// The engine's `now` at `t_ms = 0`: `now_ns = BASE_NS + t_ms * 1e6`.
pub const BASE_NS: u64 = 1_000_000_000_000;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct Vector {
    pub name: String,
    pub description: String,
    pub policy: String,
    pub steps: Vec<Step>,
}

/// One step; [`Step::kind`] says which of the four it is.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub t_ms: u64,
    pub method: Option<String>,
    pub target: Option<String>,
    pub peer: Option<String>,
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// NAME → value for the policy's `var:NAME` parts; `None`: no `vars` field.
    pub vars: Option<BTreeMap<String, String>>,
    /// Limit names for `evaluate_selected`.
    pub select: Option<Vec<String>>,
    pub release: Option<usize>,
    /// The status the upstream answers this request with once it is released (default 200).
    pub response_status: Option<u16>,
    pub retry: Option<usize>,
    pub abandon: Option<usize>,
    pub expect: Option<Expect>,
}

/// What a step is.
#[derive(Clone, Copy, Debug)]
pub enum Kind<'a> {
    /// A new request (`method`, `target`, `peer` are set) and what it must get.
    Request(&'a Expect),
    /// Step `I`'s queued request asks again.
    Retry(usize, &'a Expect),
    /// Step `I`'s response is complete (with its `response_status`): its deferred charges
    /// are charged, then its permits go back.
    Release(usize),
    /// Step `I` gives up its queue place.
    Abandon(usize),
}

impl Step {
    pub fn kind(&self) -> Kind<'_> {
        match (self.release, self.abandon, self.retry, &self.expect) {
            (Some(i), _, _, _) => Kind::Release(i),
            (_, Some(i), _, _) => Kind::Abandon(i),
            (_, _, Some(i), Some(e)) => Kind::Retry(i, e),
            (_, _, _, Some(e)) => Kind::Request(e),
            _ => unreachable!("checked by load"),
        }
    }

    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or_default()
    }

    pub fn target(&self) -> &str {
        self.target.as_deref().unwrap_or_default()
    }

    /// An IP address or `"unix:"`.
    pub fn peer(&self) -> &str {
        self.peer.as_deref().unwrap_or_default()
    }

    pub fn now_ns(&self) -> u64 {
        BASE_NS + self.t_ms * 1_000_000
    }
}

/// A step's expectation: `action` always, every other field only when present; a field given
/// as `null` is `Some(None)`.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub action: String,
    pub status: Option<u16>,
    #[serde(default, deserialize_with = "present")]
    pub limit: Option<Option<String>>,
    pub wait_ms: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    pub exemption: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub dry_run: Option<Option<String>>,
    /// Response fields: name → value, `None` for "must be absent".
    pub headers: Option<BTreeMap<String, Option<String>>>,
}

/// A field that is present (possibly `null`) is `Some`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// Every vector in `dir`, sorted by file name, checked as the module documentation says.
pub fn load(dir: &Path) -> Vec<Vector> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut names = HashSet::new();
    let vectors: Vec<Vector> = files
        .iter()
        .map(|f| {
            let file = f.file_name().unwrap().to_string_lossy().to_string();
            let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{file}: {e}"));
            let v: Vector = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert_eq!(
                format!("{}.json", v.name),
                file,
                "a file is named after its vector"
            );
            assert!(!v.description.is_empty(), "{}: description missing", v.name);
            assert!(names.insert(v.name.clone()), "{}: name used twice", v.name);
            check_steps(&v);
            v
        })
        .collect();
    assert!(
        vectors.len() >= MIN_VECTORS,
        "only {} vectors in {} (expected at least {MIN_VECTORS})",
        vectors.len(),
        dir.display()
    );
    vectors
}

fn check_steps(v: &Vector) {
    let mut last = 0;
    for (i, s) in v.steps.iter().enumerate() {
        let ctx = format!("{} step {i}", v.name);
        assert!(s.t_ms >= last, "{ctx}: time goes backwards");
        last = s.t_ms;
        let refs = [s.release, s.retry, s.abandon];
        assert!(
            refs.iter().flatten().count() <= 1,
            "{ctx}: one of release/retry/abandon"
        );
        for j in refs.into_iter().flatten() {
            assert!(j < i, "{ctx}: must name an earlier step");
        }
        let request = s.method.is_some() && s.target.is_some() && s.peer.is_some();
        assert!(
            s.response_status.is_none() || request,
            "{ctx}: response_status belongs to a request"
        );
        let fine = match (s.release, s.abandon, s.retry) {
            (Some(_), ..) | (_, Some(_), _) => s.expect.is_none() && !request,
            (.., Some(_)) => s.expect.is_some() && !request,
            _ => s.expect.is_some() && request,
        };
        assert!(fine, "{ctx}: not one of the four kinds of step");
    }
}
