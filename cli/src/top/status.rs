//! The JSON status (docs/METRICS.md "JSON status", version 2) as `weir top` reads it: leniently
//! (missing keys default: every struct is `#[serde(default)]`; unknown keys are ignored),
//! refusing another `version`.

use serde::Deserialize;

/// The status version this reader understands.
pub const VERSION: u64 = 2;

/// One status: its limits, in policy order.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Status {
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
    pub bans: Option<Vec<Ban>>,
}

/// `last_1m` / `last_15m`: counts over the window's seconds and its top rejected keys/clients.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Window {
    pub seconds: u64,
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
    pub keys: Vec<KeyCount>,
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
    pub passed: Vec<Option<u64>>,
    pub delayed: Vec<Option<u64>>,
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

/// Parses a status body: not JSON, not an object, or another `version` is an error (one line).
pub fn parse(body: &str) -> Result<Status, String> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("not a JSON status: {e}"))?;
    match v.get("version").map(|x| x.as_u64()) {
        Some(Some(VERSION)) => {}
        Some(Some(n)) => {
            return Err(format!(
                "JSON status version {n}; this weir top reads version {VERSION}"
            ))
        }
        _ => return Err("not a weir JSON status (no numeric \"version\")".into()),
    }
    serde_json::from_value(v).map_err(|e| format!("malformed JSON status: {e}"))
}
