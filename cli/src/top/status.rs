//! The JSON status (docs/METRICS.md "JSON status", version 2) as `weir top` reads it: leniently
//! (missing keys default: every struct is `#[serde(default)]`; unknown keys are ignored),
//! refusing another `version`.
//!
//! The status comes from a server `weir top` need not trust. Memory is bounded: the body is
//! read up to [`MAX_BODY_BYTES`], parsed straight into these structs (no generic JSON tree,
//! which took 20 times the body), every list's items count against [`MAX_PARSED_BYTES`], and a
//! per-second series keeps its last [`HISTORY`] entries. Every text (names, keys, clients) has
//! its control characters escaped once parsed, so nothing printed from it reaches the terminal
//! as a control sequence.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use crate::escape;

/// The status version this reader understands.
pub const VERSION: u64 = 2;
/// Longest status body read; a longer answer is an error.
pub const MAX_BODY_BYTES: u64 = 32 << 20;
/// Most memory the lists of one status take once parsed (the room their items take); a
/// status with more is an error (about 1,500 limits with full histories fit).
pub const MAX_PARSED_BYTES: usize = 64 << 20;
/// Per-second entries kept per series (the status's 900; older ones are dropped).
pub const HISTORY: usize = 900;

/// One status: its limits, in policy order.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Status {
    #[serde(deserialize_with = "list")]
    pub limits: Vec<Limit>,
}

/// One limit's entry: totals since start and its live view.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Limit {
    pub name: String,
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
    pub last_1m: Option<Window>,
    pub last_15m: Option<Window>,
    pub per_second: Option<PerSecond>,
    /// Active bans, when the host reports them (absent: the status has no bans at all).
    #[serde(deserialize_with = "some_list")]
    pub bans: Option<Vec<Ban>>,
    /// A concurrency limit's saturation (absent for rate limits).
    pub capacity: Option<Capacity>,
}

/// `capacity`: a concurrency limit's saturation (docs/METRICS.md).
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(default)]
pub struct Capacity {
    pub limit: u64,
    pub auto: bool,
    pub in_flight: u64,
    pub queued: u64,
    pub noload_latency_ms: f64,
    pub latency_ms: f64,
    pub shed: Shed,
}

/// Requests a concurrency limit refused, per lane.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize, PartialEq)]
#[serde(default)]
pub struct Shed {
    pub critical: u64,
    pub normal: u64,
    pub sheddable: u64,
}

impl Capacity {
    /// One line for people: `limit 19 (learned)  in flight 17  queued 3  latency 55.3 ms
    /// (no-load 50.1 ms)  shed: sheddable 340 normal 12 critical 0`.
    pub fn line(&self) -> String {
        let learned = if self.auto { " (learned)" } else { "" };
        let ms = |v: f64| {
            if v > 0.0 {
                format!("{v:.1} ms")
            } else {
                "-".into()
            }
        };
        format!(
            "limit {}{learned}  in flight {}  queued {}  latency {} (no-load {})  shed: sheddable {} normal {} critical {}",
            self.limit,
            self.in_flight,
            self.queued,
            ms(self.latency_ms),
            ms(self.noload_latency_ms),
            self.shed.sheddable,
            self.shed.normal,
            self.shed.critical
        )
    }
}

/// `last_1m` / `last_15m`: counts over the window's seconds and its top rejected keys/clients.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Window {
    pub seconds: u64,
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
    #[serde(deserialize_with = "list")]
    pub keys: Vec<KeyCount>,
    #[serde(deserialize_with = "list")]
    pub clients: Vec<ClientCount>,
}

/// A top key and its rejections.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct KeyCount {
    pub key: String,
    pub rejected: u64,
}

/// A top client address and its rejections.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct ClientCount {
    pub client: String,
    pub rejected: u64,
}

/// Per-second history, oldest first, the last entry for second `end` (the current one).
/// `null` entries (unknown passes) are `None`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PerSecond {
    pub end: u64,
    #[serde(deserialize_with = "history")]
    pub passed: Vec<Option<u64>>,
    #[serde(deserialize_with = "history")]
    pub delayed: Vec<Option<u64>>,
    #[serde(deserialize_with = "history")]
    pub rejected: Vec<Option<u64>>,
}

/// An active ban: its key (and client, when given) and the seconds it still lasts.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(default)]
pub struct Ban {
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Seconds left; `until` (a time in the host's clock) is kept when that is all there is.
    #[serde(
        alias = "remaining_s",
        alias = "remaining_seconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub remaining: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<f64>,
}

/// Parses a status body: not JSON, not an object, another `version`, or more than the
/// bounds allow is an error (one line).
pub fn parse<B: AsRef<[u8]> + ?Sized>(body: &B) -> Result<Status, String> {
    let body = body.as_ref();
    /// The first pass: the version alone (everything else is skipped, nothing kept).
    #[derive(Deserialize)]
    struct Head {
        version: Option<serde_json::Number>,
    }
    let head: Head = serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => {
            "not a weir JSON status (no numeric \"version\")".to_string()
        }
        _ => format!("not a JSON status: {e}"),
    })?;
    match head.version.map(|n| n.as_u64()) {
        Some(Some(VERSION)) => {}
        Some(Some(n)) => {
            return Err(format!(
                "JSON status version {n}; this weir top reads version {VERSION}"
            ))
        }
        _ => return Err("not a weir JSON status (no numeric \"version\")".into()),
    }
    LEFT.with(|l| l.set(MAX_PARSED_BYTES));
    let status = serde_json::from_slice::<Status>(body);
    LEFT.with(|l| l.set(usize::MAX));
    let mut status = status.map_err(|e| format!("malformed JSON status: {e}"))?;
    status.escape();
    Ok(status)
}

impl Status {
    /// Escapes the control characters of every text.
    fn escape(&mut self) {
        fn clean(s: &mut String) {
            if let std::borrow::Cow::Owned(o) = escape::line(s) {
                *s = o;
            }
        }
        for l in &mut self.limits {
            clean(&mut l.name);
            for w in [&mut l.last_1m, &mut l.last_15m].into_iter().flatten() {
                w.keys.iter_mut().for_each(|k| clean(&mut k.key));
                w.clients.iter_mut().for_each(|c| clean(&mut c.client));
            }
            for b in l.bans.iter_mut().flatten() {
                clean(&mut b.key);
                b.client.iter_mut().for_each(clean);
            }
        }
    }
}

thread_local! {
    /// Bytes the lists of the status being parsed may still take (`usize::MAX`: no parse).
    static LEFT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// A JSON list, its items counted against [`MAX_PARSED_BYTES`]; only the last `keep` kept.
struct Bounded<T> {
    keep: usize,
    item: PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for Bounded<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = seq.next_element()? {
            if v.len() == self.keep.saturating_mul(2) {
                v.drain(..self.keep);
            }
            let before = v.capacity();
            v.push(x);
            let grown = (v.capacity() - before) * std::mem::size_of::<T>();
            let left = LEFT.with(Cell::get);
            if grown > left {
                return Err(de::Error::custom(format!(
                    "the status is too large: its lists take more than {} MiB",
                    MAX_PARSED_BYTES >> 20
                )));
            }
            LEFT.with(|l| l.set(left - grown));
        }
        if v.len() > self.keep {
            v.drain(..v.len() - self.keep);
        }
        Ok(v)
    }
}

fn list<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    d.deserialize_seq(Bounded {
        keep: usize::MAX,
        item: PhantomData,
    })
}

fn history<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Option<u64>>, D::Error> {
    d.deserialize_seq(Bounded {
        keep: HISTORY,
        item: PhantomData,
    })
}

/// `null` or a list.
fn some_list<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    struct Opt<T>(PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for Opt<T> {
        type Value = Option<Vec<T>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list or null")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Self::Value, D2::Error> {
            list(d).map(Some)
        }
    }
    d.deserialize_option(Opt(PhantomData))
}
