//! The policy file: TOML schema, validation and compilation into a
//! [`CompiledPolicy`].
//!
//! The operator reference for the format is `docs/POLICY.md`. In short:
//!
//! ```toml
//! failure_mode = "open"
//! trusted_proxies = ["10.0.0.0/8"]
//!
//! [zones.per_ip]
//! size = "10m"
//! algorithm = "gcra"
//! rate = "10r/s"
//!
//! [classes.api]
//! match = [{ path_prefix = "/api/" }]
//!
//! [exempt.health]
//! match = [{ path = ["/healthz", "/readyz"] }]
//!
//! [[limit]]
//! class = "api"
//! zone = "per_ip"
//! key = "ip"
//! burst = 20
//! nodelay = true
//! ```
//!
//! Parsing never stops at the first semantic problem: all errors are
//! collected with their position ([`check_policy`]); [`parse_policy`] returns
//! the one that comes first in the file.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::key::{KeyPart, KeySpec};
use super::matcher::{CidrSet, Class, Glob, PathTest, Shape, ValueMatcher};
use super::request::{ClientIpResolver, ForwardedSource, PreparedRequest, RequestView};

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// A problem in a policy file, with its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// File name, if the policy came from a file (or the caller named it).
    pub file: Option<String>,
    /// 1-based line; 0 when the error has no position (e.g. the file could
    /// not be read).
    pub line: usize,
    /// 1-based column in characters; 0 when there is no position.
    pub column: usize,
    /// What is wrong, and what would be right.
    pub message: String,
}

impl fmt::Display for PolicyError {
    /// `file:line:col: message` (parts that are unknown are left out).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{file}:")?;
        }
        if self.line > 0 {
            write!(f, "{}:{}:", self.line, self.column)?;
        }
        if self.file.is_some() || self.line > 0 {
            f.write_str(" ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for PolicyError {}

/// 1-based (line, column) of a byte offset; the column counts characters.
fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let mut o = offset.min(src.len());
    while !src.is_char_boundary(o) {
        o -= 1;
    }
    let before = &src[..o];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

// ---------------------------------------------------------------------------
// File schema (serde)
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    failure_mode: Option<Spanned<String>>,
    headers: Option<bool>,
    trusted_proxies: Option<Spanned<StrList>>,
    client_ip_header: Option<Spanned<String>>,
    #[serde(default)]
    zones: BTreeMap<Spanned<String>, Spanned<ZoneSpec>>,
    #[serde(default)]
    classes: BTreeMap<Spanned<String>, Spanned<ClassSpec>>,
    #[serde(default)]
    exempt: BTreeMap<Spanned<String>, Spanned<ClassSpec>>,
    #[serde(default)]
    limit: Vec<Spanned<LimitSpec>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ZoneSpec {
    #[allow(dead_code)]
    description: Option<String>,
    size: Spanned<Scalar>,
    algorithm: Spanned<String>,
    rate: Option<Spanned<String>>,
    events: Option<Spanned<i64>>,
    window: Option<Spanned<Scalar>>,
    max: Option<Spanned<i64>>,
    // Cluster scope (docs/CLUSTER.md).
    scope: Option<Spanned<String>>,
    redis: Option<Spanned<String>>,
    password: Option<Spanned<String>>,
    sync_interval: Option<Spanned<Scalar>>,
    expected_nodes: Option<Spanned<i64>>,
    fallback: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassSpec {
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(rename = "match")]
    shapes: Spanned<Vec<Spanned<ShapeSpec>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShapeSpec {
    method: Option<Spanned<StrList>>,
    path: Option<Spanned<StrList>>,
    path_prefix: Option<Spanned<StrList>>,
    path_glob: Option<Spanned<StrList>>,
    path_iglob: Option<Spanned<StrList>>,
    path_regex: Option<Spanned<StrList>>,
    query: Option<BTreeMap<Spanned<String>, Spanned<ValueSpec>>>,
    header: Option<BTreeMap<Spanned<String>, Spanned<ValueSpec>>>,
    cookie: Option<BTreeMap<Spanned<String>, Spanned<ValueSpec>>>,
    client: Option<Spanned<StrList>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ValueSpec {
    present: Option<bool>,
    equals: Option<Spanned<String>>,
    glob: Option<Spanned<String>>,
    iglob: Option<Spanned<String>>,
    regex: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitSpec {
    name: Option<Spanned<String>>,
    class: Spanned<StrList>,
    zone: Spanned<String>,
    key: Option<Spanned<StrList>>,
    ipv4_prefix: Option<Spanned<i64>>,
    ipv6_prefix: Option<Spanned<i64>>,
    burst: Option<Spanned<i64>>,
    delay: Option<Spanned<i64>>,
    nodelay: Option<Spanned<bool>>,
    dry_run: Option<bool>,
    status: Option<Spanned<i64>>,
    log_level: Option<Spanned<String>>,
    cost: Option<Spanned<i64>>,
    queue: Option<Spanned<i64>>,
    timeout: Option<Spanned<Scalar>>,
}

/// A string or an array of strings; array items keep their own span.
struct StrList(Vec<(String, Option<Range<usize>>)>);

impl<'de> Deserialize<'de> for StrList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrList, E> {
                Ok(StrList(vec![(v.to_owned(), None)]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StrList, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<Spanned<String>>()? {
                    let span = s.span();
                    out.push((s.into_inner(), Some(span)));
                }
                Ok(StrList(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string or an integer (sizes, durations).
enum Scalar {
    Str(String),
    Int(i64),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_owned()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                i64::try_from(v)
                    .map(Scalar::Int)
                    .map_err(|_| E::custom("number too large"))
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------
// Value syntaxes: sizes, rates, durations
// ---------------------------------------------------------------------------

/// A problem inside a value: message plus the byte range inside the string
/// it concerns (to point the column at the bad unit when possible).
type SubErr = (String, Option<Range<usize>>);

/// nginx size syntax: `512`, `512k`, `10m`, `1g` (case-insensitive units,
/// powers of 1024). Returns bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    parse_size_sub(s).map_err(|e| e.0)
}

fn parse_size_sub(s: &str) -> Result<u64, SubErr> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err((
            format!("invalid size {s:?}; expected bytes or a number with k, m or g, like \"10m\" or \"512k\""),
            None,
        ));
    }
    let n: u64 = s[..digits]
        .parse()
        .map_err(|_| (format!("size {s:?} is too large"), None))?;
    let mult: u64 = match &s[digits..] {
        "" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        u => {
            return Err((
                format!("unknown size unit {u:?}; expected k, m or g (or none for bytes)"),
                Some(digits..s.len()),
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| (format!("size {s:?} is too large"), None))
}

/// A request rate: `count` requests per `per`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    /// Requests per period (≥ 1).
    pub count: u64,
    /// The period: 1 s, 1 min, 1 h or 1 day.
    pub per: Duration,
}

impl Rate {
    /// GCRA emission interval: `per / count`, in nanoseconds.
    pub fn emission_interval_ns(&self) -> u64 {
        (self.per.as_nanos() / u128::from(self.count)) as u64
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = match self.per.as_secs() {
            1 => "s",
            60 => "m",
            3600 => "h",
            _ => "d",
        };
        write!(f, "{}r/{u}", self.count)
    }
}

/// Parse `10r/s`, `30r/m`, `100r/h`, `1000r/d`.
pub fn parse_rate(s: &str) -> Result<Rate, String> {
    parse_rate_sub(s).map_err(|e| e.0)
}

fn parse_rate_sub(s: &str) -> Result<Rate, SubErr> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let bad = || {
        (
            format!("invalid rate {s:?}; expected requests per unit like \"10r/s\", \"30r/m\", \"100r/h\" or \"1000r/d\""),
            None,
        )
    };
    if digits == 0 || !s[digits..].starts_with('r') {
        return Err(bad());
    }
    let count: u64 = s[..digits].parse().map_err(|_| bad())?;
    let per = match &s[digits..] {
        "r/s" => 1,
        "r/m" => 60,
        "r/h" => 3600,
        "r/d" => 86400,
        u => {
            return Err((
                format!("unknown rate unit {u:?}; expected r/s, r/m, r/h or r/d"),
                Some(digits..s.len()),
            ))
        }
    };
    if count == 0 {
        return Err((
            format!("rate {s:?} admits nothing; the count must be at least 1"),
            None,
        ));
    }
    if count > 1_000_000_000 {
        return Err((
            format!("rate {s:?} is too high; at most 1000000000 per unit"),
            None,
        ));
    }
    Ok(Rate {
        count,
        per: Duration::from_secs(per),
    })
}

/// nginx time syntax: `30s`, `500ms`, `1h30m`, `2d`, a bare number of
/// seconds (`90`); units `ms s m h d w M y` (month = 30 d, year = 365 d),
/// each at most once, largest first.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_duration_sub(s).map_err(|e| e.0)
}

fn parse_duration_sub(s: &str) -> Result<Duration, SubErr> {
    const UNITS: [(&str, u64); 8] = [
        ("y", 365 * 86_400_000),
        ("M", 30 * 86_400_000),
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let bytes = s.as_bytes();
    let bad = || {
        (
            format!("invalid duration {s:?}; expected nginx time syntax like \"30s\", \"500ms\", \"1h30m\" or \"7d\""),
            None,
        )
    };
    if s.is_empty() {
        return Err(bad());
    }
    let mut i = 0;
    let mut total_ms: u64 = 0;
    let mut last_unit: Option<usize> = None;
    while i < bytes.len() {
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
        let d0 = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if d0 == i {
            return Err(bad());
        }
        let n: u64 = s[d0..i].parse().map_err(|_| bad())?;
        let u0 = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[u0..i];
        let idx = if unit.is_empty() {
            if i != bytes.len() {
                return Err(bad());
            }
            6 // bare number: seconds
        } else {
            match UNITS.iter().position(|(u, _)| *u == unit) {
                Some(idx) => idx,
                None => {
                    return Err((
                        format!("unknown time unit {unit:?}; expected ms, s, m, h, d, w, M or y"),
                        Some(u0..i),
                    ))
                }
            }
        };
        if last_unit.is_some_and(|l| idx <= l) {
            return Err((
                format!(
                    "time units in {s:?} must each appear once, largest first (like \"1h30m\")"
                ),
                Some(u0..i),
            ));
        }
        last_unit = Some(idx);
        total_ms = n
            .checked_mul(UNITS[idx].1)
            .and_then(|v| v.checked_add(total_ms))
            .ok_or_else(|| (format!("duration {s:?} is too large"), None))?;
        while i < bytes.len() && bytes[i] == b' ' {
            i += 1;
        }
    }
    Ok(Duration::from_millis(total_ms))
}

// ---------------------------------------------------------------------------
// Compiled policy
// ---------------------------------------------------------------------------

/// What to do when the limiter can't decide (table full, shared memory
/// unavailable, internal error).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureMode {
    /// Let the request through (default).
    Open,
    /// Reject it with the limit's status.
    Closed,
}

/// Limiting algorithm of a zone, with its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// Generic cell rate algorithm (nginx `limit_req`).
    Gcra {
        /// Sustained rate.
        rate: Rate,
    },
    /// Sliding-window counter: at most `events` per `window`.
    Sliding {
        /// Events admitted per window (≥ 1).
        events: u64,
        /// Window length (1 s ..= 7 d).
        window: Duration,
    },
    /// At most `max` requests in flight at once.
    Concurrency {
        /// Maximum in flight (≥ 1).
        max: u64,
    },
    /// Exact sliding log (caddy-ratelimit's semantics): at most `events` admissions per key in
    /// any `window`, each key keeping its last `events` admission times.
    Log {
        /// Events per window (1 ..= 4096).
        events: u64,
        /// Window length (1 ms ..= 7 d).
        window: Duration,
    },
}

impl Algorithm {
    /// `"gcra"`, `"sliding"`, `"concurrency"` or `"log"`.
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::Gcra { .. } => "gcra",
            Algorithm::Sliding { .. } => "sliding",
            Algorithm::Concurrency { .. } => "concurrency",
            Algorithm::Log { .. } => "log",
        }
    }
}

/// A shared-memory zone: a table of buckets of one algorithm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    /// Name from the file (`[zones.NAME]`).
    pub name: String,
    /// Memory size in bytes.
    pub size: u64,
    /// Algorithm and parameters.
    pub algorithm: Algorithm,
    /// `scope = "cluster"`: counts shared between nodes through Redis (docs/CLUSTER.md).
    pub cluster: Option<crate::cluster::ClusterSpec>,
}

/// How excess (burst) requests of a GCRA limit are paced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    /// The first N excess requests pass at once, further excess requests
    /// (up to `burst`) are delayed to the rate. `After(0)` (the default) is
    /// nginx's behaviour without `delay`/`nodelay`.
    After(u64),
    /// No excess request is delayed (`nodelay = true`).
    Never,
}

/// Log level for rejections (delays are logged one level lower), as nginx
/// `limit_req_log_level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// `info`
    Info,
    /// `notice`
    Notice,
    /// `warn`
    Warn,
    /// `error` (default)
    Error,
}

/// One limit: requests in `classes` are counted in `zone` under `key`.
#[derive(Clone, Debug)]
pub struct Limit {
    /// Name (explicit, or `CLASS/ZONE`), used in logs and headers. Unique.
    pub name: String,
    /// Indexes into [`CompiledPolicy::classes`]; empty = every request.
    pub classes: Box<[usize]>,
    /// Index into [`CompiledPolicy::zones`].
    pub zone: usize,
    /// Key parts.
    pub key: KeySpec,
    /// GCRA burst (0 for other algorithms).
    pub burst: u64,
    /// GCRA delay mode (`After(0)` for other algorithms).
    pub delay: Delay,
    /// Count and log, but never reject or delay.
    pub dry_run: bool,
    /// Status for rejected requests (default 429).
    pub status: u16,
    /// Log level for rejections.
    pub log_level: LogLevel,
    /// Units consumed per request (default 1).
    pub cost: u64,
    /// Concurrency zones: requests allowed to wait for a slot (default 0).
    pub queue: u64,
    /// Concurrency zones: how long a queued request waits (default 5 s).
    pub timeout: Duration,
}

/// A validated, compiled policy, ready for evaluation.
#[derive(Clone, Debug)]
pub struct CompiledPolicy {
    /// Behaviour when the limiter fails.
    pub failure_mode: FailureMode,
    /// Emit `RateLimit` / `RateLimit-Policy` response headers.
    pub emit_headers: bool,
    /// Client address resolution (trusted proxies).
    pub client_ip: ClientIpResolver,
    /// Zones, sorted by name.
    pub zones: Vec<Zone>,
    /// Classes, sorted by name.
    pub classes: Vec<Class>,
    /// Exemptions, sorted by name.
    pub exemptions: Vec<Class>,
    /// Limits, in file order.
    pub limits: Vec<Limit>,
}

/// Default status for rejected requests (nginx's default is 503; policy mode
/// uses the more accurate 429 Too Many Requests).
pub const DEFAULT_STATUS: u16 = 429;
/// Default concurrency queue timeout.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(5);

impl CompiledPolicy {
    /// Parse and compile TOML source. `file` is only used in errors.
    pub fn parse(src: &str, file: Option<&str>) -> Result<CompiledPolicy, PolicyError> {
        parse_policy(src, file)
    }

    /// Index of a zone by name.
    pub fn zone_index(&self, name: &str) -> Option<usize> {
        self.zones.iter().position(|z| z.name == name)
    }

    /// Index of a class by name.
    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.classes.iter().position(|c| c.name == name)
    }

    /// The client address of a request (trusted-proxy resolution; `None`: the local client).
    pub fn client_ip(&self, view: &dyn RequestView) -> Option<std::net::IpAddr> {
        self.client_ip.resolve(view)
    }

    /// Bundle a host view with its normalized path and raw query, resolving
    /// the client address through `trusted_proxies`.
    pub fn prepare<'a>(
        &self,
        view: &'a dyn RequestView,
        path: &'a [u8],
        query: &'a [u8],
    ) -> PreparedRequest<'a> {
        PreparedRequest::new(view, path, query, self.client_ip.resolve(view))
    }

    /// The first exemption matching the request, if any. Exempt requests are
    /// not limited at all.
    pub fn exemption(&self, req: &PreparedRequest<'_>) -> Option<&Class> {
        self.exemptions.iter().find(|e| e.matches(req))
    }

    /// The limits that apply to the request, in file order (exemptions are
    /// not consulted here). Each class is evaluated at most once per call
    /// (for the first 128 classes); no allocation.
    pub fn matching_limits<'p>(&'p self, req: &'p PreparedRequest<'p>) -> MatchingLimits<'p> {
        MatchingLimits {
            policy: self,
            req,
            next: 0,
            known: 0,
            hit: 0,
        }
    }
}

/// Iterator returned by [`CompiledPolicy::matching_limits`]: `(index, limit)`.
pub struct MatchingLimits<'p> {
    policy: &'p CompiledPolicy,
    req: &'p PreparedRequest<'p>,
    next: usize,
    known: u128,
    hit: u128,
}

impl MatchingLimits<'_> {
    fn class_matches(&mut self, c: usize) -> bool {
        if c < 128 {
            let bit = 1u128 << c;
            if self.known & bit == 0 {
                self.known |= bit;
                if self.policy.classes[c].matches(self.req) {
                    self.hit |= bit;
                }
            }
            self.hit & bit != 0
        } else {
            self.policy.classes[c].matches(self.req)
        }
    }
}

impl<'p> Iterator for MatchingLimits<'p> {
    type Item = (usize, &'p Limit);
    fn next(&mut self) -> Option<Self::Item> {
        while let Some(limit) = self.policy.limits.get(self.next) {
            let i = self.next;
            self.next += 1;
            if limit.classes.is_empty() || limit.classes.iter().any(|&c| self.class_matches(c)) {
                return Some((i, limit));
            }
        }
        None
    }
}

/// Parse and compile a policy; on failure, the first error in file order.
pub fn parse_policy(src: &str, file: Option<&str>) -> Result<CompiledPolicy, PolicyError> {
    check_policy(src, file).map_err(|mut errs| errs.swap_remove(0))
}

/// Parse and compile a policy; on failure, every error found, in file order
/// (a TOML syntax or schema error stops parsing, so it comes alone).
pub fn check_policy(src: &str, file: Option<&str>) -> Result<CompiledPolicy, Vec<PolicyError>> {
    let mk = |offset: Option<usize>, message: String| {
        let (line, column) = offset.map_or((1, 1), |o| line_col(src, o));
        PolicyError {
            file: file.map(str::to_owned),
            line,
            column,
            message,
        }
    };
    let spec: FileSpec = match toml::from_str(src) {
        Ok(s) => s,
        Err(e) => {
            return Err(vec![mk(
                e.span().map(|s| s.start),
                e.message().trim_end().to_owned(),
            )])
        }
    };
    let mut cx = Cx {
        src,
        errors: Vec::new(),
    };
    let policy = compile(&mut cx, spec);
    if cx.errors.is_empty() {
        Ok(policy)
    } else {
        cx.errors.sort_by_key(|e| e.0);
        Err(cx.errors.into_iter().map(|(o, m)| mk(Some(o), m)).collect())
    }
}

/// Read, parse and compile a policy file.
pub fn load_policy(path: &Path) -> Result<CompiledPolicy, PolicyError> {
    let name = path.display().to_string();
    let src = std::fs::read(path).map_err(|e| PolicyError {
        file: Some(name.clone()),
        line: 0,
        column: 0,
        message: format!("cannot read policy: {e}"),
    })?;
    parse_policy(policy_text(&src, Some(&name))?, Some(&name))
}

/// `src` as text, or an error at the line and column of its first byte that is not UTF-8.
pub fn policy_text<'s>(src: &'s [u8], file: Option<&str>) -> Result<&'s str, PolicyError> {
    std::str::from_utf8(src).map_err(|e| {
        let good = e.valid_up_to();
        // The prefix up to `valid_up_to` is valid UTF-8 by definition.
        let before = std::str::from_utf8(&src[..good]).unwrap_or("");
        let (line, column) = line_col(before, good);
        PolicyError {
            file: file.map(str::to_owned),
            line,
            column,
            message: format!(
                "the policy is not valid UTF-8 (byte {:#04x}); save it as UTF-8",
                src[good]
            ),
        }
    })
}

// ---------------------------------------------------------------------------
// Compilation
// ---------------------------------------------------------------------------

struct Cx<'s> {
    src: &'s str,
    errors: Vec<(usize, String)>,
}

impl Cx<'_> {
    fn err(&mut self, span: &Range<usize>, msg: impl Into<String>) {
        self.errors.push((span.start, msg.into()));
    }

    /// Error about a part of a string value: point inside the string when the
    /// source spells it literally (no escapes), else at the value.
    fn err_sub(&mut self, span: &Range<usize>, value: &str, e: SubErr) {
        let raw = self.src.get(span.clone()).unwrap_or("");
        let literal = raw.len() == value.len() + 2
            && (raw.starts_with('"') || raw.starts_with('\''))
            && &raw[1..raw.len() - 1] == value;
        let at = match e.1 {
            Some(r) if literal => span.start + 1 + r.start,
            _ => span.start,
        };
        self.errors.push((at, e.0));
    }
}

fn items(list: &Spanned<StrList>) -> impl Iterator<Item = (&str, Range<usize>)> {
    let outer = list.span();
    list.get_ref()
        .0
        .iter()
        .map(move |(s, sp)| (s.as_str(), sp.clone().unwrap_or(outer.clone())))
}

fn nonempty_list(cx: &mut Cx<'_>, list: &Spanned<StrList>, what: &str) -> bool {
    if list.get_ref().0.is_empty() {
        cx.err(
            &list.span(),
            format!("`{what}` is an empty list; list at least one value or remove it"),
        );
        false
    } else {
        true
    }
}

fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn check_name(cx: &mut Cx<'_>, name: &Spanned<String>, what: &str) {
    if !valid_name(name.get_ref()) {
        cx.err(
            &name.span(),
            format!(
                "invalid {what} name {:?}; use 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit",
                name.get_ref()
            ),
        );
    }
}

/// RFC 9110 token characters (header names, methods).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn compile(cx: &mut Cx<'_>, spec: FileSpec) -> CompiledPolicy {
    let failure_mode = match spec.failure_mode.as_ref() {
        None => FailureMode::Open,
        Some(s) => match s.get_ref().as_str() {
            "open" => FailureMode::Open,
            "closed" => FailureMode::Closed,
            other => {
                cx.err(
                    &s.span(),
                    format!("unknown failure_mode {other:?}; expected \"open\" or \"closed\""),
                );
                FailureMode::Open
            }
        },
    };

    let mut client_ip = ClientIpResolver::default();
    if let Some(list) = &spec.trusted_proxies {
        for (s, span) in items(list) {
            if let Err(e) = client_ip.trusted.push_entry(s) {
                cx.err(&span, e);
            }
        }
    }
    if let Some(h) = &spec.client_ip_header {
        let name = h.get_ref().to_ascii_lowercase();
        if spec.trusted_proxies.is_none() {
            cx.err(
                &h.span(),
                "client_ip_header has no effect without trusted_proxies; add trusted_proxies = [\"CIDR\", …] or remove it",
            );
        } else if name == "forwarded" {
            client_ip.source = ForwardedSource::Forwarded;
        } else if is_token(&name) {
            client_ip.source = ForwardedSource::List(name.into_bytes().into_boxed_slice());
        } else {
            cx.err(
                &h.span(),
                format!("invalid header name {:?}; expected e.g. \"x-forwarded-for\", \"x-real-ip\" or \"forwarded\"", h.get_ref()),
            );
        }
    }

    let mut zones = Vec::new();
    for (name, z) in &spec.zones {
        check_name(cx, name, "zone");
        if let Some(zone) = compile_zone(cx, name.get_ref(), z) {
            zones.push(zone);
        }
    }

    let mut classes = Vec::new();
    for (name, c) in &spec.classes {
        check_name(cx, name, "class");
        if name.get_ref() == "*" {
            continue;
        }
        classes.push(compile_class(cx, name.get_ref(), c));
    }
    let mut exemptions = Vec::new();
    for (name, c) in &spec.exempt {
        check_name(cx, name, "exemption");
        exemptions.push(compile_class(cx, name.get_ref(), c));
    }

    if spec.limit.is_empty() {
        // At the end of the file, where a limit would go (and after any other error).
        let end = cx.src.len();
        cx.err(
            &(end..end),
            "the policy has no [[limit]], so it would limit nothing (an empty file is not a policy)",
        );
    }
    let mut limits: Vec<Limit> = Vec::new();
    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    for l in &spec.limit {
        if let Some(limit) = compile_limit(cx, l, &spec, &zones, &classes) {
            let span = l.get_ref().name.as_ref().map_or(l.span(), |n| n.span());
            if let Some(first) = names.get(&limit.name) {
                let (line, _) = line_col(cx.src, *first);
                cx.err(
                    &span,
                    format!(
                        "duplicate limit name {:?} (first used on line {line}); give one of them a distinct `name`",
                        limit.name
                    ),
                );
            } else {
                names.insert(limit.name.clone(), span.start);
            }
            limits.push(limit);
        }
    }

    CompiledPolicy {
        failure_mode,
        emit_headers: spec.headers.unwrap_or(false),
        client_ip,
        zones,
        classes,
        exemptions,
        limits,
    }
}

fn positive(cx: &mut Cx<'_>, v: &Spanned<i64>, what: &str, min: i64, max: i64) -> Option<u64> {
    let n = *v.get_ref();
    if n < min || n > max {
        cx.err(
            &v.span(),
            format!("{what} must be between {min} and {max}, not {n}"),
        );
        None
    } else {
        Some(n as u64)
    }
}

fn duration_value(cx: &mut Cx<'_>, v: &Spanned<Scalar>) -> Option<Duration> {
    match v.get_ref() {
        Scalar::Int(n) if *n >= 0 => Some(Duration::from_secs(*n as u64)),
        Scalar::Int(n) => {
            cx.err(&v.span(), format!("duration must not be negative, not {n}"));
            None
        }
        Scalar::Str(s) => match parse_duration_sub(s) {
            Ok(d) => Some(d),
            Err(e) => {
                cx.err_sub(&v.span(), s, e);
                None
            }
        },
    }
}

fn compile_zone(cx: &mut Cx<'_>, name: &str, z: &Spanned<ZoneSpec>) -> Option<Zone> {
    let zs = z.get_ref();
    let size = match zs.size.get_ref() {
        Scalar::Int(n) if *n > 0 => Some(*n as u64),
        Scalar::Int(n) => {
            cx.err(
                &zs.size.span(),
                format!("zone size must be positive, not {n}"),
            );
            None
        }
        Scalar::Str(s) => match parse_size_sub(s) {
            Ok(0) => {
                cx.err(&zs.size.span(), "zone size must be positive, like \"10m\"");
                None
            }
            Ok(n) => Some(n),
            Err(e) => {
                cx.err_sub(&zs.size.span(), s, e);
                None
            }
        },
    };
    let alg = zs.algorithm.get_ref().as_str();
    let allowed: &[&str] = match alg {
        "gcra" => &["rate"],
        "sliding" | "log" => &["events", "window"],
        "concurrency" => &["max"],
        other => {
            cx.err(
                &zs.algorithm.span(),
                format!("unknown algorithm {other:?}; expected \"gcra\", \"sliding\", \"concurrency\" or \"log\""),
            );
            return None;
        }
    };
    let present: [(&str, Option<Range<usize>>); 4] = [
        ("rate", zs.rate.as_ref().map(|v| v.span())),
        ("events", zs.events.as_ref().map(|v| v.span())),
        ("window", zs.window.as_ref().map(|v| v.span())),
        ("max", zs.max.as_ref().map(|v| v.span())),
    ];
    let mut ok = true;
    for (field, span) in &present {
        if let Some(span) = span {
            if !allowed.contains(field) {
                let owner = match *field {
                    "rate" => "gcra",
                    "max" => "concurrency",
                    _ => "sliding or log",
                };
                cx.err(
                    span,
                    format!("`{field}` is a {owner} parameter; zone {name:?} uses algorithm {alg:?}, which takes {}", fields(allowed)),
                );
                ok = false;
            }
        }
    }
    for field in allowed {
        if present.iter().any(|(f, s)| f == field && s.is_none()) {
            let example = match *field {
                "rate" => "rate = \"10r/s\"",
                "events" => "events = 100",
                "window" => "window = \"1m\"",
                _ => "max = 10",
            };
            cx.err(
                &zs.algorithm.span(),
                format!("zone {name:?}: algorithm {alg:?} needs `{field}` (e.g. {example})"),
            );
            ok = false;
        }
    }
    if !ok {
        return None;
    }
    // Sliding and concurrency states count up to MAX_COUNT (src/limiter/packed.rs).
    let most = crate::limiter::MAX_COUNT as i64;
    let algorithm = match alg {
        "gcra" => {
            let r = zs.rate.as_ref()?;
            match parse_rate_sub(r.get_ref()) {
                Ok(rate) => Algorithm::Gcra { rate },
                Err(e) => {
                    cx.err_sub(&r.span(), r.get_ref(), e);
                    return None;
                }
            }
        }
        "sliding" => {
            let events = positive(cx, zs.events.as_ref()?, "events", 1, most);
            let w = zs.window.as_ref()?;
            let window = duration_value(cx, w)?;
            if window < Duration::from_secs(1) || window > Duration::from_secs(7 * 86400) {
                cx.err(&w.span(), "sliding window must be between 1s and 7d");
                return None;
            }
            Algorithm::Sliding {
                events: events?,
                window,
            }
        }
        "log" => {
            let max = crate::table::MAX_LOG_EVENTS;
            let events = zs.events.as_ref()?;
            {
                let n = *events.get_ref();
                if n > max as i64 {
                    cx.err(
                        &events.span(),
                        format!("a log zone keeps at most {max} events per key (8 bytes each), got {n}; use algorithm = \"sliding\" for larger counts"),
                    );
                    return None;
                }
            }
            let events = positive(cx, events, "events", 1, max as i64);
            let w = zs.window.as_ref()?;
            let window = duration_value(cx, w)?;
            if window < Duration::from_millis(1) || window > Duration::from_secs(7 * 86400) {
                cx.err(&w.span(), "log window must be between 1ms and 7d");
                return None;
            }
            Algorithm::Log {
                events: events?,
                window,
            }
        }
        _ => Algorithm::Concurrency {
            max: positive(cx, zs.max.as_ref()?, "max", 1, most)?,
        },
    };
    let cluster = compile_cluster(cx, name, zs, &algorithm).ok()?;
    let size = size?;
    if let Some(e) = super::zone_size::size_error(size, &algorithm) {
        cx.err(&zs.size.span(), format!("zone {name:?}: {e}"));
        return None;
    }
    Some(Zone {
        name: name.to_owned(),
        size,
        algorithm,
        cluster,
    })
}

/// `scope = "cluster"` and its settings. Only sliding windows: their state is a pair of
/// counters, which sum across nodes exactly (Redis `INCRBY` on one counter per window). A GCRA
/// state is one theoretical arrival time; there is no sum of arrival times, and converting it
/// into a window approximation would silently change the limit's meaning. Concurrency would
/// need distributed leases. Both are refused with a pointer to `sliding`.
fn compile_cluster(
    cx: &mut Cx<'_>,
    name: &str,
    zs: &ZoneSpec,
    algorithm: &Algorithm,
) -> Result<Option<crate::cluster::ClusterSpec>, ()> {
    let settings: [(&str, Option<Range<usize>>); 5] = [
        ("redis", zs.redis.as_ref().map(|v| v.span())),
        ("password", zs.password.as_ref().map(|v| v.span())),
        ("sync_interval", zs.sync_interval.as_ref().map(|v| v.span())),
        (
            "expected_nodes",
            zs.expected_nodes.as_ref().map(|v| v.span()),
        ),
        ("fallback", zs.fallback.as_ref().map(|v| v.span())),
    ];
    let scope = match &zs.scope {
        None => None,
        Some(s) => match s.get_ref().as_str() {
            "local" => None,
            "cluster" => Some(s.span()),
            other => {
                cx.err(
                    &s.span(),
                    format!("unknown scope {other:?}; expected \"local\" (default) or \"cluster\""),
                );
                return Err(());
            }
        },
    };
    let Some(scope) = scope else {
        let mut ok = true;
        for (field, span) in &settings {
            if let Some(span) = span {
                cx.err(
                    span,
                    format!("`{field}` applies only to zones with scope = \"cluster\"; zone {name:?} is local"),
                );
                ok = false;
            }
        }
        return if ok { Ok(None) } else { Err(()) };
    };
    let (events, window) = match *algorithm {
        Algorithm::Sliding { events, window } => (events, window),
        Algorithm::Gcra { .. } => {
            cx.err(
                &scope,
                format!("zone {name:?}: scope = \"cluster\" needs algorithm = \"sliding\" (events per window): a gcra state is one arrival time, which cannot be summed across nodes"),
            );
            return Err(());
        }
        Algorithm::Concurrency { .. } => {
            cx.err(
                &scope,
                format!("zone {name:?}: scope = \"cluster\" supports sliding zones only; concurrency across nodes would need distributed leases"),
            );
            return Err(());
        }
        Algorithm::Log { .. } => {
            cx.err(
                &scope,
                format!("zone {name:?}: scope = \"cluster\" supports sliding zones only; a log zone's per-key event times are not shared across nodes"),
            );
            return Err(());
        }
    };
    let mut ok = true;
    let redis = match &zs.redis {
        None => {
            cx.err(
                &scope,
                format!("zone {name:?}: scope = \"cluster\" needs `redis` (e.g. redis = \"redis://127.0.0.1:6379/0\")"),
            );
            ok = false;
            String::new()
        }
        Some(r) => {
            use redis::IntoConnectionInfo;
            if let Err(e) = r.get_ref().as_str().into_connection_info() {
                cx.err(
                    &r.span(),
                    format!("invalid redis URL {:?}: {e}", r.get_ref()),
                );
                ok = false;
            }
            r.get_ref().clone()
        }
    };
    let sync_interval = match &zs.sync_interval {
        None => crate::cluster::DEFAULT_SYNC_INTERVAL,
        Some(v) => match duration_value(cx, v) {
            Some(d) if d >= Duration::from_millis(10) && d * 4 <= window => d,
            Some(_) => {
                cx.err(
                    &v.span(),
                    "sync_interval must be at least 10ms and at most a quarter of the window",
                );
                ok = false;
                Duration::ZERO
            }
            None => {
                ok = false;
                Duration::ZERO
            }
        },
    };
    let expected_nodes = match &zs.expected_nodes {
        None => {
            cx.err(
                &scope,
                format!("zone {name:?}: scope = \"cluster\" needs `expected_nodes` (nodes sharing the limit; each admits events ÷ expected_nodes while Redis is unreachable)"),
            );
            ok = false;
            1
        }
        Some(v) => match positive(cx, v, "expected_nodes", 1, 1024) {
            Some(n) if n > events => {
                cx.err(
                    &v.span(),
                    format!("expected_nodes ({n}) exceeds events ({events}): the fallback share events ÷ expected_nodes would be 0"),
                );
                ok = false;
                n
            }
            Some(n) => n,
            None => {
                ok = false;
                1
            }
        },
    };
    if let Some(f) = &zs.fallback {
        if f.get_ref() != "local" {
            cx.err(
                &f.span(),
                format!(
                    "unknown fallback {:?}; expected \"local\" (events ÷ expected_nodes per node)",
                    f.get_ref()
                ),
            );
            ok = false;
        }
    }
    if !ok {
        return Err(());
    }
    Ok(Some(crate::cluster::ClusterSpec {
        redis,
        password: zs.password.as_ref().map(|p| p.get_ref().clone()),
        sync_interval,
        expected_nodes,
        fallback: crate::cluster::Fallback::Local,
    }))
}

fn fields(list: &[&str]) -> String {
    list.iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(" and ")
}

fn compile_class(cx: &mut Cx<'_>, name: &str, c: &Spanned<ClassSpec>) -> Class {
    let shapes_spec = &c.get_ref().shapes;
    if shapes_spec.get_ref().is_empty() {
        cx.err(
            &shapes_spec.span(),
            format!("{name:?} has an empty `match` list; add at least one entry like {{ path_prefix = \"/api/\" }}"),
        );
    }
    let shapes = shapes_spec
        .get_ref()
        .iter()
        .map(|s| compile_shape(cx, s))
        .collect();
    Class {
        name: name.to_owned(),
        shapes,
    }
}

fn compile_regex(cx: &mut Cx<'_>, s: &str, span: &Range<usize>) -> Option<regex::bytes::Regex> {
    match regex::bytes::RegexBuilder::new(s)
        .size_limit(1 << 20)
        .build()
    {
        Ok(r) => Some(r),
        Err(e) => {
            let detail = e.to_string();
            let last = detail.lines().last().unwrap_or("").trim();
            let last = last.strip_prefix("error: ").unwrap_or(last);
            cx.err(span, format!("invalid regex {s:?}: {last}"));
            None
        }
    }
}

fn compile_glob(cx: &mut Cx<'_>, s: &str, span: &Range<usize>) -> Option<Glob> {
    glob_or_err(cx, Glob::new(s), span)
}

fn compile_iglob(cx: &mut Cx<'_>, s: &str, span: &Range<usize>) -> Option<Glob> {
    glob_or_err(cx, Glob::new_ignore_case(s), span)
}

fn glob_or_err(cx: &mut Cx<'_>, g: Result<Glob, String>, span: &Range<usize>) -> Option<Glob> {
    match g {
        Ok(g) => Some(g),
        Err(e) => {
            cx.err(span, e);
            None
        }
    }
}

fn compile_shape(cx: &mut Cx<'_>, s: &Spanned<ShapeSpec>) -> Shape {
    let spec = s.get_ref();
    let mut shape = Shape::default();
    let mut any = false;

    if let Some(list) = &spec.method {
        any = true;
        if nonempty_list(cx, list, "method") {
            for (m, span) in items(list) {
                if !is_token(m) {
                    cx.err(
                        &span,
                        format!("invalid method {m:?}; expected a token like \"GET\""),
                    );
                } else if m.bytes().any(|b| b.is_ascii_lowercase())
                    && m.bytes().all(|b| b.is_ascii_alphabetic())
                {
                    cx.err(
                        &span,
                        format!(
                            "methods are case-sensitive; did you mean {:?}?",
                            m.to_ascii_uppercase()
                        ),
                    );
                } else {
                    shape.methods.push(m.as_bytes().into());
                }
            }
        }
    }

    type Mk = fn(&mut Cx<'_>, &str, &Range<usize>) -> Option<PathTest>;
    let path_fields: [(&str, &Option<Spanned<StrList>>, Mk); 5] = [
        ("path", &spec.path, |cx, v, span| {
            if !v.starts_with('/') {
                cx.err(
                    span,
                    format!("path {v:?} must start with '/'; use path_glob for patterns"),
                );
                return None;
            }
            Some(PathTest::Exact(v.as_bytes().into()))
        }),
        ("path_prefix", &spec.path_prefix, |cx, v, span| {
            if !v.starts_with('/') {
                cx.err(span, format!("path_prefix {v:?} must start with '/'"));
                return None;
            }
            Some(PathTest::Prefix(v.as_bytes().into()))
        }),
        ("path_glob", &spec.path_glob, |cx, v, span| {
            compile_glob(cx, v, span).map(PathTest::Glob)
        }),
        ("path_iglob", &spec.path_iglob, |cx, v, span| {
            compile_iglob(cx, v, span).map(PathTest::Glob)
        }),
        ("path_regex", &spec.path_regex, |cx, v, span| {
            compile_regex(cx, v, span).map(PathTest::Regex)
        }),
    ];
    for (field, list, mk) in path_fields {
        let Some(list) = list else { continue };
        any = true;
        if nonempty_list(cx, list, field) {
            let alts: Vec<PathTest> = items(list)
                .filter_map(|(v, span)| mk(cx, v, &span))
                .collect();
            shape.path.push(alts.into_boxed_slice());
        }
    }

    if let Some(list) = &spec.client {
        any = true;
        if nonempty_list(cx, list, "client") {
            let mut set = CidrSet::new();
            for (v, span) in items(list) {
                if let Err(e) = set.push_entry(v) {
                    cx.err(&span, e);
                }
            }
            shape.client = Some(set);
        }
    }

    let maps = [
        ("header", &spec.header),
        ("cookie", &spec.cookie),
        ("query", &spec.query),
    ];
    for (kind, map) in maps {
        let Some(map) = map else { continue };
        any = true;
        for (name, v) in map {
            let n = name.get_ref();
            let key: Box<[u8]> = match kind {
                "header" => {
                    if !is_token(n) || n.len() > 255 {
                        cx.err(&name.span(), format!("invalid header name {n:?}"));
                        continue;
                    }
                    n.to_ascii_lowercase().into_bytes().into()
                }
                "cookie" => {
                    if !is_token(n) || n.len() > 255 {
                        cx.err(&name.span(), format!("invalid cookie name {n:?}"));
                        continue;
                    }
                    n.as_bytes().into()
                }
                _ => {
                    if n.is_empty() {
                        cx.err(&name.span(), "empty query argument name");
                        continue;
                    }
                    n.as_bytes().into()
                }
            };
            if let Some(m) = compile_value(cx, v) {
                match kind {
                    "header" => shape.headers.push((key, m)),
                    "cookie" => shape.cookies.push((key.into(), m)),
                    _ => shape.query.push((key, m)),
                }
            }
        }
    }

    if !any {
        cx.err(
            &s.span(),
            "empty match entry would match every request; list at least one of method, path, path_prefix, path_glob, path_iglob, path_regex, query, header, cookie, client (for every request use class = \"*\" in the limit)",
        );
    }
    shape
}

fn compile_value(cx: &mut Cx<'_>, v: &Spanned<ValueSpec>) -> Option<ValueMatcher> {
    let spec = v.get_ref();
    let n = spec.present.is_some() as u8
        + spec.equals.is_some() as u8
        + spec.glob.is_some() as u8
        + spec.iglob.is_some() as u8
        + spec.regex.is_some() as u8;
    if n != 1 {
        cx.err(
            &v.span(),
            "expected exactly one of `present = true|false`, `equals = \"…\"`, `glob = \"…\"`, `iglob = \"…\"` or `regex = \"…\"`",
        );
        return None;
    }
    if let Some(p) = spec.present {
        return Some(if p {
            ValueMatcher::Present
        } else {
            ValueMatcher::Absent
        });
    }
    if let Some(e) = &spec.equals {
        return Some(ValueMatcher::Equals(e.get_ref().as_bytes().into()));
    }
    if let Some(g) = &spec.glob {
        return compile_glob(cx, g.get_ref(), &g.span()).map(ValueMatcher::Glob);
    }
    if let Some(g) = &spec.iglob {
        return compile_iglob(cx, g.get_ref(), &g.span()).map(ValueMatcher::Glob);
    }
    let r = spec.regex.as_ref()?;
    compile_regex(cx, r.get_ref(), &r.span()).map(ValueMatcher::Regex)
}

fn compile_key(cx: &mut Cx<'_>, l: &LimitSpec) -> Option<KeySpec> {
    let mut parts = Vec::new();
    let mut ok = true;
    let mut ip_span = None;
    match &l.key {
        None => {
            parts.push(KeyPart::IP);
        }
        Some(list) => {
            if !nonempty_list(cx, list, "key") {
                return None;
            }
            let mut seen: Vec<&str> = Vec::new();
            let multi = list.get_ref().0.len() > 1;
            for (p, span) in items(list) {
                if seen.contains(&p) {
                    cx.err(&span, format!("key part {p:?} is listed twice"));
                    ok = false;
                    continue;
                }
                seen.push(p);
                let part = match p {
                    "ip" => {
                        ip_span = Some(span.clone());
                        KeyPart::IP
                    }
                    "global" if multi => {
                        cx.err(
                            &span,
                            "\"global\" cannot be combined with other key parts; use it alone",
                        );
                        ok = false;
                        continue;
                    }
                    "global" => KeyPart::Global,
                    "path" => KeyPart::Path,
                    "method" => KeyPart::Method,
                    _ => {
                        let named = p
                            .strip_prefix("header:")
                            .map(|n| (true, n))
                            .or_else(|| p.strip_prefix("cookie:").map(|n| (false, n)));
                        match named {
                            Some((is_header, n)) if is_token(n) && n.len() <= 255 => {
                                if is_header {
                                    KeyPart::Header(n.to_ascii_lowercase().into_bytes().into())
                                } else {
                                    KeyPart::Cookie(n.as_bytes().into())
                                }
                            }
                            Some((is_header, n)) => {
                                let what = if is_header { "header" } else { "cookie" };
                                cx.err(
                                    &span,
                                    format!("invalid {what} name {n:?} in key part {p:?}"),
                                );
                                ok = false;
                                continue;
                            }
                            None => {
                                cx.err(
                                    &span,
                                    format!("unknown key part {p:?}; expected \"ip\", \"global\", \"path\", \"method\", \"header:NAME\" or \"cookie:NAME\""),
                                );
                                ok = false;
                                continue;
                            }
                        }
                    }
                };
                parts.push(part);
            }
        }
    }
    if l.key.is_none() {
        ip_span = Some(0..0);
    }
    let prefixes = [
        ("ipv4_prefix", &l.ipv4_prefix, 32),
        ("ipv6_prefix", &l.ipv6_prefix, 128),
    ];
    let mut v4 = 32u8;
    let mut v6 = 64u8;
    for (field, value, max) in prefixes {
        let Some(value) = value else { continue };
        if ip_span.is_none() {
            cx.err(
                &value.span(),
                format!("`{field}` has no effect: the key has no \"ip\" part"),
            );
            ok = false;
            continue;
        }
        match positive(cx, value, field, 0, max) {
            Some(n) if field == "ipv4_prefix" => v4 = n as u8,
            Some(n) => v6 = n as u8,
            None => ok = false,
        }
    }
    for p in &mut parts {
        if let KeyPart::Ip {
            v4_prefix,
            v6_prefix,
        } = p
        {
            *v4_prefix = v4;
            *v6_prefix = v6;
        }
    }
    ok.then(|| KeySpec::new(parts))
}

fn compile_limit(
    cx: &mut Cx<'_>,
    l: &Spanned<LimitSpec>,
    spec: &FileSpec,
    zones: &[Zone],
    classes: &[Class],
) -> Option<Limit> {
    let ls = l.get_ref();
    let mut ok = true;

    // Classes.
    let mut class_idx = Vec::new();
    let mut class_names = Vec::new();
    if nonempty_list(cx, &ls.class, "class") {
        let all = ls.class.get_ref().0.iter().any(|(c, _)| c == "*");
        if all && ls.class.get_ref().0.len() > 1 {
            cx.err(
                &ls.class.span(),
                "class \"*\" (every request) cannot be combined with other classes",
            );
            ok = false;
        }
        for (c, span) in items(&ls.class) {
            class_names.push(c.to_owned());
            if c == "*" {
                continue;
            }
            match classes.iter().position(|k| k.name == c) {
                Some(i) => class_idx.push(i),
                None if spec.classes.contains_key(c) => ok = false, // already reported
                None => {
                    cx.err(
                        &span,
                        format!(
                            "unknown class {c:?}; {}",
                            known("classes", spec.classes.keys())
                        ),
                    );
                    ok = false;
                }
            }
        }
    } else {
        ok = false;
    }

    // Zone.
    let zname = ls.zone.get_ref();
    let zone = zones.iter().position(|z| &z.name == zname);
    if zone.is_none() && !spec.zones.contains_key(zname.as_str()) {
        cx.err(
            &ls.zone.span(),
            format!(
                "unknown zone {zname:?}; {}",
                known("zones", spec.zones.keys())
            ),
        );
    }
    let key = compile_key(cx, ls);

    let name = match &ls.name {
        Some(n) => {
            check_name(cx, n, "limit");
            n.get_ref().clone()
        }
        None => format!("{}/{}", class_names.join("+"), zname),
    };

    let status = match &ls.status {
        None => DEFAULT_STATUS,
        Some(s) => positive(cx, s, "status", 400, 599).map_or(DEFAULT_STATUS, |n| n as u16),
    };
    let log_level = match ls.log_level.as_ref() {
        None => LogLevel::Error,
        Some(v) => match v.get_ref().as_str() {
            "info" => LogLevel::Info,
            "notice" => LogLevel::Notice,
            "warn" => LogLevel::Warn,
            "error" => LogLevel::Error,
            other => {
                cx.err(
                    &v.span(),
                    format!("unknown log_level {other:?}; expected \"info\", \"notice\", \"warn\" or \"error\""),
                );
                LogLevel::Error
            }
        },
    };
    let cost = match &ls.cost {
        None => Some(1),
        Some(c) => positive(cx, c, "cost", 1, 1 << 32),
    };

    // Algorithm-specific options.
    let zone = zone?;
    let z = &zones[zone];
    let alg = z.algorithm.name();
    let wrong = |cx: &mut Cx<'_>, field: &str, span: Range<usize>, owner: &str| {
        cx.err(
            &span,
            format!(
                "`{field}` applies only to {owner} zones; zone {:?} is {alg}",
                z.name
            ),
        );
    };
    let is_gcra = matches!(z.algorithm, Algorithm::Gcra { .. });
    let is_conc = matches!(z.algorithm, Algorithm::Concurrency { .. });
    let gcra_fields = [
        ("burst", ls.burst.as_ref().map(|v| v.span())),
        ("delay", ls.delay.as_ref().map(|v| v.span())),
        ("nodelay", ls.nodelay.as_ref().map(|v| v.span())),
    ];
    let conc_fields = [
        ("queue", ls.queue.as_ref().map(|v| v.span())),
        ("timeout", ls.timeout.as_ref().map(|v| v.span())),
    ];
    for (f, span) in gcra_fields {
        if let (Some(span), false) = (span, is_gcra) {
            wrong(cx, f, span, "gcra");
            ok = false;
        }
    }
    for (f, span) in conc_fields {
        if let (Some(span), false) = (span, is_conc) {
            wrong(cx, f, span, "concurrency");
            ok = false;
        }
    }
    let mut burst = 0;
    let mut delay = Delay::After(0);
    let mut queue = 0;
    let mut timeout = DEFAULT_QUEUE_TIMEOUT;
    if is_gcra {
        if let Some(b) = &ls.burst {
            burst = positive(cx, b, "burst", 0, 1 << 32).unwrap_or(0);
        }
        match (&ls.delay, &ls.nodelay) {
            (Some(d), Some(_)) => {
                cx.err(
                    &d.span(),
                    "use either `delay = N` or `nodelay = true`, not both",
                );
                ok = false;
            }
            (Some(d), None) => {
                if let Some(n) = positive(cx, d, "delay", 0, 1 << 32) {
                    if n > burst {
                        cx.err(
                            &d.span(),
                            format!("delay = {n} exceeds burst = {burst}; delay counts excess requests passed without delay, so it must be at most the burst (or use nodelay = true)"),
                        );
                        ok = false;
                    }
                    delay = Delay::After(n);
                }
            }
            (None, Some(nd)) => {
                if *nd.get_ref() {
                    delay = Delay::Never;
                }
            }
            (None, None) => {}
        }
    }
    if is_conc {
        if let Some(q) = &ls.queue {
            queue = positive(cx, q, "queue", 0, 1 << 32).unwrap_or(0);
        }
        if let Some(t) = &ls.timeout {
            if queue == 0 {
                cx.err(&t.span(), "`timeout` has no effect without `queue`; set queue = N (waiting requests) or remove timeout");
                ok = false;
            } else if let Some(d) = duration_value(cx, t) {
                if d.is_zero() || d > Duration::from_secs(3600) {
                    cx.err(&t.span(), "queue timeout must be between 1ms and 1h");
                    ok = false;
                } else {
                    timeout = d;
                }
            }
        }
    }
    let cost = cost?;
    if let (Algorithm::Gcra { rate }, Some(b)) = (z.algorithm, &ls.burst) {
        // The limiter keeps (burst + 1) emission intervals in ns (src/limiter/gcra.rs).
        if (burst + 1)
            .checked_mul(rate.emission_interval_ns())
            .is_none()
        {
            cx.err(
                &b.span(),
                format!("burst = {burst} is too large for rate {rate}: (burst + 1) intervals must fit in 584 years"),
            );
            ok = false;
        }
    }
    let cap = match z.algorithm {
        Algorithm::Gcra { .. } => burst + 1,
        // Without Redis a cluster zone admits its share on each node (src/cluster/mod.rs).
        Algorithm::Sliding { events, .. } => match &z.cluster {
            Some(c) => (events / c.expected_nodes.max(1)).max(1),
            None => events,
        },
        Algorithm::Concurrency { max } => max,
        // One log entry per admitted request.
        Algorithm::Log { .. } => 1,
    };
    if cost > cap {
        if let Some(c) = &ls.cost {
            let why = match z.algorithm {
                Algorithm::Gcra { .. } => format!("burst + 1 = {cap}"),
                Algorithm::Sliding { .. } if z.cluster.is_some() => {
                    format!("the zone's share of events per node without Redis, {cap}")
                }
                Algorithm::Sliding { .. } => format!("the zone's events = {cap}"),
                Algorithm::Concurrency { .. } => format!("the zone's max = {cap}"),
                Algorithm::Log { .. } => {
                    "1, the only cost a log zone takes (it records one event per request)"
                        .to_string()
                }
            };
            cx.err(
                &c.span(),
                format!("cost = {cost} can never be admitted: it exceeds {why}"),
            );
            ok = false;
        }
    }
    let key = key?;
    ok.then(|| Limit {
        name,
        classes: class_idx.into_boxed_slice(),
        zone,
        key,
        burst,
        delay,
        dry_run: ls.dry_run.unwrap_or(false),
        status,
        log_level,
        cost,
        queue,
        timeout,
    })
}

fn known<'a>(what: &str, names: impl Iterator<Item = &'a Spanned<String>>) -> String {
    let list: Vec<String> = names.map(|n| format!("{:?}", n.get_ref())).collect();
    if list.is_empty() {
        format!("no {what} are defined")
    } else {
        format!("defined {what}: {}", list.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("10M"), Ok(10 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("10mb").unwrap_err().contains("\"mb\""));
        assert!(parse_size("m").is_err());
        assert!(parse_size("99999999999999999999").is_err());
    }

    #[test]
    fn rates() {
        let r = parse_rate("10r/s").unwrap();
        assert_eq!(r.emission_interval_ns(), 100_000_000);
        assert_eq!(parse_rate("30r/m").unwrap().per, Duration::from_secs(60));
        assert_eq!(parse_rate("100r/h").unwrap().to_string(), "100r/h");
        assert_eq!(
            parse_rate("1000r/d").unwrap().per,
            Duration::from_secs(86400)
        );
        assert_eq!(
            parse_rate("5r/w").unwrap_err(),
            "unknown rate unit \"r/w\"; expected r/s, r/m, r/h or r/d"
        );
        assert!(parse_rate("0r/s").is_err());
        assert!(parse_rate("r/s").is_err());
        assert!(parse_rate("10/s").is_err());
    }

    #[test]
    fn durations() {
        let ms = |s| parse_duration(s).map(|d| d.as_millis() as u64);
        assert_eq!(ms("1s"), Ok(1000));
        assert_eq!(ms("500ms"), Ok(500));
        assert_eq!(ms("1h30m"), Ok(5_400_000));
        assert_eq!(ms("1h 30m"), Ok(5_400_000));
        assert_eq!(ms("7d"), Ok(7 * 86_400_000));
        assert_eq!(ms("90"), Ok(90_000));
        assert_eq!(ms("1m30"), Ok(90_000));
        assert_eq!(ms("1M"), Ok(30 * 86_400_000));
        assert_eq!(ms("1w1d"), Ok(8 * 86_400_000));
        assert!(parse_duration("30m1h")
            .unwrap_err()
            .contains("largest first"));
        assert!(parse_duration("1m1m").is_err());
        assert!(parse_duration("5x").unwrap_err().contains("\"x\""));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("h").is_err());
    }

    #[test]
    fn line_cols() {
        let s = "ab\ncdé f\n";
        assert_eq!(line_col(s, 0), (1, 1));
        assert_eq!(line_col(s, 3), (2, 1));
        assert_eq!(line_col(s, 8), (2, 5)); // after 'é' (2 bytes)
    }
}
