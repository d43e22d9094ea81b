//! The compiled policy: zones, limits and the types the engine reads.

use super::*;

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
    /// Exact sliding log, `algorithm = "sliding_log"` (also read as `"log"`; caddy-ratelimit's
    /// semantics): at most `events` admissions per key in any `window`, each key keeping its
    /// last `events` admission times.
    SlidingLog {
        /// Events per window (1 ..= 4096).
        events: u64,
        /// Window length (1 ms ..= 7 d).
        window: Duration,
    },
}

impl Algorithm {
    /// The policy's spelling: `"gcra"`, `"sliding"`, `"concurrency"` or `"sliding_log"`.
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::Gcra { .. } => "gcra",
            Algorithm::Sliding { .. } => "sliding",
            Algorithm::Concurrency { .. } => "concurrency",
            Algorithm::SlidingLog { .. } => "sliding_log",
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
    /// Concurrency zones: a permit's lease, renewed while its request runs; a crashed
    /// holder's permits come back within two leases (default 120 s; other zones: the default).
    pub lease: Duration,
    /// `scope = "cluster"`: counts shared between nodes through Redis (docs/CLUSTER.md).
    pub cluster: Option<crate::cluster::ClusterSpec>,
    /// Concurrency zones with `max = "auto"`: the learned limit's bounds (`max` is their
    /// upper end).
    pub learn: Option<crate::limiter::Adaptive>,
    /// Concurrency zones: slots only [`Lane::Critical`] requests may take (`reserve`).
    pub reserve: u64,
}

/// A request's priority at a concurrency limit (`lane`): the lowest is shed first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// Shed first: at most 90% of the slots not reserved.
    Sheddable,
    /// Every slot not reserved (the default).
    #[default]
    Normal,
    /// Every slot, the reserved ones too; never queued behind other lanes.
    Critical,
}

impl Lane {
    /// Every lane, lowest first.
    pub const ALL: [Lane; 3] = [Lane::Sheddable, Lane::Normal, Lane::Critical];

    /// The policy's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Sheddable => "sheddable",
            Lane::Normal => "normal",
            Lane::Critical => "critical",
        }
    }

    /// Reads the policy's spelling.
    pub fn parse(s: &str) -> Option<Lane> {
        Lane::ALL.into_iter().find(|l| l.name() == s)
    }

    /// The slots this lane may fill under limit `limit` with `reserve` slots reserved.
    #[inline]
    pub fn cap(self, limit: u64, reserve: u64) -> u64 {
        match self {
            Lane::Critical => limit,
            Lane::Normal => limit.saturating_sub(reserve).max(1),
            Lane::Sheddable => (limit.saturating_sub(reserve) * 9 / 10).max(1),
        }
    }
}

/// How excess (burst) requests of a GCRA limit are paced: `delay = N` is `After(N)` (`Delay`
/// when N is 0, nginx's default), `nodelay = true` is `NoDelay`.
pub use crate::limiter::Delay;

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
    /// Indexes into [`CompiledPolicy::classes`]; empty = every request (unless `selected`).
    pub classes: Box<[usize]>,
    /// `class = "@host"`: never applies by classes; only when the host names it
    /// ([`crate::policy::Engine::evaluate_selected`]). Its `classes` are empty.
    pub selected: bool,
    /// Index into [`CompiledPolicy::zones`].
    pub zone: usize,
    /// Key parts.
    pub key: KeySpec,
    /// GCRA burst (0 for other algorithms).
    pub burst: u64,
    /// GCRA delay mode (`Delay` for other algorithms).
    pub delay: Delay,
    /// Count and log, but never reject or delay.
    pub dry_run: bool,
    /// Status for rejected requests (default 429).
    pub status: u16,
    /// Log level for rejections.
    pub log_level: LogLevel,
    /// Units consumed per request (default 1).
    pub cost: u64,
    /// Concurrency zones: most in flight per key for this limit, instead of the zone's `max`.
    pub max: Option<u64>,
    /// Concurrency zones: requests allowed to wait for a slot (default 0).
    pub queue: u64,
    /// Concurrency zones: how long a queued request waits (default 5 s).
    pub timeout: Duration,
    /// `ban`: a key this limit rejects `after` times `within` a window is refused outright
    /// by this limit for `duration` (not on `sliding_log` zones).
    pub ban: Option<crate::limiter::Ban>,
    /// `lane`: the lane of every request this limit counts, whatever its classes say.
    pub lane: Option<Lane>,
    /// `charge_on_status`: the response statuses this limit is charged for, sorted, each
    /// once (rate limits only). Empty: every request it passes is charged when checked.
    /// Otherwise a request is only checked before it runs and charged after its response
    /// ([`crate::policy::Engine::charge_response`]).
    pub charge_on_status: Box<[u16]>,
}

impl Limit {
    /// [`Limit::timeout`] in nanoseconds (saturating).
    pub fn timeout_ns(&self) -> u64 {
        u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX)
    }
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
    /// How the status shows client addresses (`[status] clients`).
    pub status_clients: crate::policy::key_text::Exposure,
    /// Whether rejections record their key and client (`[status] top_keys`, default true).
    pub status_top_keys: bool,
    /// Key parts whose values key text hides (`[key_text] hide`; default header and cookie).
    pub key_hide: crate::policy::key_text::Hide,
    /// Zones, sorted by name.
    pub zones: Vec<Zone>,
    /// Classes, sorted by name.
    pub classes: Vec<Class>,
    /// The lane each class names (`lane`), in the order of `classes`.
    pub class_lanes: Vec<Option<Lane>>,
    /// Exemptions, sorted by name.
    pub exemptions: Vec<Class>,
    /// Limits, in file order.
    pub limits: Vec<Limit>,
    /// The variables of `var:NAME` key parts, each once, in order of first use: a part's
    /// `index` is its name's position here.
    pub vars: Vec<String>,
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
    /// not consulted here; limits the host selects never apply here). Each class is evaluated at most once per call
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
    pub(super) policy: &'p CompiledPolicy,
    pub(super) req: &'p PreparedRequest<'p>,
    pub(super) next: usize,
    pub(super) known: u128,
    pub(super) hit: u128,
}

impl MatchingLimits<'_> {
    pub(super) fn class_matches(&mut self, c: usize) -> bool {
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
            if limit.selected {
                continue;
            }
            if limit.classes.is_empty() || limit.classes.iter().any(|&c| self.class_matches(c)) {
                return Some((i, limit));
            }
        }
        None
    }
}
