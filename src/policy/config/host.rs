//! Policies a host declares in its own configuration (nginx's `weir_req_zone` / `weir_req`,
//! Caddy's inline zones), built in code and compiled by the policy file's own compiler: the
//! same checks, error words, zone layouts and schemas as the TOML.
//!
//! Every limit of a [`HostLimits`] is selected by the host (`class = "@host"`): the engine
//! evaluates it only when the host names it ([`crate::policy::Engine::evaluate_selected`]).

use super::*;
use crate::limiter::NS_PER_SEC;

/// A zone of a [`HostLimits`].
#[derive(Clone, Debug)]
pub struct HostZone {
    /// Memory in bytes.
    pub size: u64,
    /// A concurrency zone may say `max: 0` when each of its limits gives its own `max`.
    pub algorithm: Algorithm,
}

/// The cluster settings of a [`HostLimits`] zone (nginx's `scope=cluster redis=…` on a zone
/// directive): a policy zone's `scope`, `redis` … `expected_nodes`, as text, checked by the
/// policy compiler with the same words.
#[derive(Clone, Debug, Default)]
pub struct HostCluster {
    pub scope: Option<String>,
    /// One URL, or several (Redis Cluster seeds, Sentinels).
    pub redis: Vec<String>,
    pub redis_mode: Option<String>,
    pub sentinel_master: Option<String>,
    pub password: Option<String>,
    pub tls_ca_file: Option<String>,
    pub tls_cert_file: Option<String>,
    pub tls_key_file: Option<String>,
    /// A duration in the policy's syntax (`"100ms"`).
    pub sync_interval: Option<String>,
    pub expected_nodes: Option<u64>,
}

/// A limit of a [`HostLimits`]: the fields of a policy's `[[limit]]`, without classes.
#[derive(Clone, Debug)]
pub struct HostLimit {
    /// Name in logs, headers and metrics; `None`: `ZONE.INDEX`.
    pub name: Option<String>,
    /// Key parts in the policy's syntax (`"ip"`, `"var:NAME"`, `"header:NAME"` …); empty: `ip`.
    pub key: Vec<String>,
    pub ipv4_prefix: Option<u8>,
    pub ipv6_prefix: Option<u8>,
    /// gcra only.
    pub burst: u64,
    /// gcra only.
    pub delay: Delay,
    pub dry_run: bool,
    pub status: u16,
    pub log_level: LogLevel,
    pub cost: u64,
    /// Concurrency only: most requests in flight per key for this limit (nginx's
    /// `limit_conn zone N`); `None`: the zone's `max`.
    pub max: Option<u64>,
    /// Concurrency only.
    pub queue: u64,
    /// Concurrency only, with `queue`: `None` is the policy's default.
    pub timeout: Option<Duration>,
}

impl Default for HostLimit {
    fn default() -> HostLimit {
        HostLimit {
            name: None,
            key: Vec::new(),
            ipv4_prefix: None,
            ipv6_prefix: None,
            burst: 0,
            delay: Delay::Delay,
            dry_run: false,
            status: DEFAULT_STATUS,
            log_level: LogLevel::Error,
            cost: 1,
            max: None,
            queue: 0,
            timeout: None,
        }
    }
}

/// Zones and host-selected limits, compiled into a [`CompiledPolicy`] by [`HostLimits::build`].
#[derive(Clone, Debug, Default)]
pub struct HostLimits {
    zones: Vec<(String, HostZone)>,
    limits: Vec<(String, HostLimit)>,
    /// Leases of concurrency zones that do not keep the default ([`HostLimits::lease`]).
    leases: Vec<(String, Duration)>,
    /// Concurrency zones that learn their limit or reserve slots ([`HostLimits::capacity`]).
    capacities: Vec<(String, Learn, u64)>,
    /// Zones with cluster settings ([`HostLimits::cluster`]).
    clusters: Vec<(String, HostCluster)>,
}

/// A zone's learning: `None` fixed; `Some(bounds)` learned (`None` inside: default bounds).
type Learn = Option<Option<(u64, u64)>>;

/// Spans stand for items: zone `z` at `ZONE_AT + z`, limit `i` at `LIMIT_AT + i`, so an error
/// names the item it is about.
const ZONE_AT: usize = 1;
const LIMIT_AT: usize = 1 << 32;

fn at<T>(item: usize, value: T) -> Spanned<T> {
    Spanned::new(item..item, value)
}

fn int(item: usize, n: u64) -> Spanned<i64> {
    at(item, i64::try_from(n).unwrap_or(i64::MAX))
}

/// A duration in the policy's syntax, exactly (whole milliseconds), or `None`.
fn duration_text(d: Duration) -> Option<String> {
    (d.subsec_nanos() % 1_000_000 == 0).then(|| format!("{}ms", d.as_millis()))
}

impl HostLimits {
    pub fn new() -> HostLimits {
        HostLimits::default()
    }

    /// Adds zone `name` (a later zone of the same name is an error at [`HostLimits::build`]).
    pub fn zone(&mut self, name: &str, zone: HostZone) {
        self.zones.push((name.to_owned(), zone));
    }

    /// Sets concurrency zone `name`'s lease (a policy zone's `lease`; checked by
    /// [`HostLimits::build`], as the zone's other values).
    pub fn lease(&mut self, name: &str, lease: Duration) {
        self.leases.push((name.to_owned(), lease));
    }

    /// Makes concurrency zone `name` learn its limit (`learn`: `Some(bounds)`, a policy
    /// zone's `max = "auto"` with `bounds`, `None` inside for the default ones) and keep
    /// `reserve` slots for critical requests (checked by [`HostLimits::build`]). Its limits
    /// then give no `max` of their own.
    pub fn capacity(&mut self, name: &str, learn: Learn, reserve: u64) {
        self.capacities.push((name.to_owned(), learn, reserve));
    }

    /// Gives zone `name` cluster settings (checked by [`HostLimits::build`], as a policy
    /// zone's: `scope = "cluster"` needs `redis` and `expected_nodes`, and so on).
    pub fn cluster(&mut self, name: &str, cluster: HostCluster) {
        self.clusters.push((name.to_owned(), cluster));
    }

    /// Adds a limit on zone `zone`; its index in the built policy (limits keep their order).
    pub fn limit(&mut self, zone: &str, limit: HostLimit) -> u16 {
        self.limits.push((zone.to_owned(), limit));
        u16::try_from(self.limits.len() - 1).unwrap_or(u16::MAX)
    }

    /// Compiles the zones and limits as a policy file's; every problem found, one per line,
    /// each naming its zone or limit.
    pub fn build(&self) -> Result<CompiledPolicy, String> {
        let mut errors = Vec::new();
        if self.limits.len() > usize::from(u16::MAX) {
            errors.push(format!("{} limits; at most 65535", self.limits.len()));
        }
        let mut zones = BTreeMap::new();
        for (z, (name, zone)) in self.zones.iter().enumerate() {
            let spec = match self.zone_spec(z, name, zone) {
                Ok(s) => s,
                Err(e) => {
                    errors.push(format!("zone {name:?}: {e}"));
                    continue;
                }
            };
            if zones
                .insert(at(ZONE_AT + z, name.clone()), at(ZONE_AT + z, spec))
                .is_some()
            {
                errors.push(format!("zone {name:?} is declared twice"));
            }
        }
        let mut limit = Vec::new();
        for (i, (zone, l)) in self.limits.iter().enumerate() {
            match self.limit_spec(i, zone, l) {
                Ok(spec) => limit.push(at(LIMIT_AT + i, spec)),
                Err(e) => errors.push(self.item_error(LIMIT_AT + i, &e)),
            }
        }
        if !errors.is_empty() {
            return Err(errors.join("\n"));
        }
        let spec = FileSpec {
            failure_mode: None,
            headers: None,
            trusted_proxies: None,
            client_ip_header: None,
            status: None,
            key_text: None,
            zones,
            classes: BTreeMap::new(),
            exempt: BTreeMap::new(),
            limit,
        };
        compile_spec("", spec).map_err(|errs| {
            errs.into_iter()
                .map(|(offset, msg)| self.item_error(offset, &msg))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    /// `msg` prefixed with the item at `offset` (unless it names it already).
    fn item_error(&self, offset: usize, msg: &str) -> String {
        if offset >= LIMIT_AT {
            let i = offset - LIMIT_AT;
            let zone = self.limits.get(i).map_or("", |(z, _)| z.as_str());
            return format!("limit {i} (zone {zone:?}): {msg}");
        }
        match self.zones.get(offset.wrapping_sub(ZONE_AT)) {
            Some((name, _)) if !msg.starts_with(&format!("zone {name:?}")) => {
                format!("zone {name:?}: {msg}")
            }
            _ => msg.to_owned(),
        }
    }

    fn zone_spec(&self, z: usize, name: &str, zone: &HostZone) -> Result<ZoneSpec, String> {
        let item = ZONE_AT + z;
        let mut spec = ZoneSpec {
            description: None,
            size: at(
                item,
                Scalar::Int(i64::try_from(zone.size).unwrap_or(i64::MAX)),
            ),
            algorithm: at(item, zone.algorithm.name().to_owned()),
            rate: None,
            events: None,
            window: None,
            max: None,
            bounds: None,
            reserve: None,
            lease: None,
            scope: None,
            redis: None,
            redis_mode: None,
            sentinel_master: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            password: None,
            sync_interval: None,
            expected_nodes: None,
            fallback: None,
        };
        if let Some((_, learn, reserve)) = self.capacities.iter().rev().find(|(n, ..)| n == name) {
            if let Some(Some((lo, hi))) = learn {
                let b = vec![int(item, *lo), int(item, *hi)];
                spec.bounds = Some(at(item, b));
            }
            if *reserve > 0 {
                spec.reserve = Some(int(item, *reserve));
            }
        }
        if let Some((_, c)) = self.clusters.iter().rev().find(|(n, _)| n == name) {
            let text = |v: &Option<String>| v.clone().map(|v| at(item, v));
            spec.scope = text(&c.scope);
            if !c.redis.is_empty() {
                let urls = c.redis.iter().map(|u| (u.clone(), None)).collect();
                spec.redis = Some(at(item, StrList(urls)));
            }
            spec.redis_mode = text(&c.redis_mode);
            spec.sentinel_master = text(&c.sentinel_master);
            spec.password = text(&c.password);
            spec.tls_ca_file = text(&c.tls_ca_file);
            spec.tls_cert_file = text(&c.tls_cert_file);
            spec.tls_key_file = text(&c.tls_key_file);
            spec.sync_interval = c.sync_interval.clone().map(|d| at(item, Scalar::Str(d)));
            spec.expected_nodes = c.expected_nodes.map(|n| int(item, n));
        }
        if let Some(&(_, l)) = self.leases.iter().rev().find(|(n, _)| n == name) {
            let text = duration_text(l)
                .ok_or_else(|| format!("lease {l:?} is not a whole number of milliseconds"))?;
            spec.lease = Some(at(item, Scalar::Str(text)));
        }
        let window = |w: Duration| {
            duration_text(w)
                .map(|t| at(item, Scalar::Str(t)))
                .ok_or_else(|| format!("window {w:?} is not a whole number of milliseconds"))
        };
        match zone.algorithm {
            Algorithm::Gcra { rate } => {
                let units = [(1, "s"), (60, "m"), (3600, "h"), (86400, "d")];
                let Some((_, unit)) = units.iter().find(|(s, _)| s * NS_PER_SEC == rate.period_ns)
                else {
                    return Err(format!(
                        "rate of {} per {} ns: the period must be 1s, 1m, 1h or 1d",
                        rate.count, rate.period_ns
                    ));
                };
                spec.rate = Some(at(item, format!("{}r/{unit}", rate.count)));
            }
            Algorithm::Sliding { events, window: w }
            | Algorithm::SlidingLog { events, window: w } => {
                spec.events = Some(int(item, events));
                spec.window = Some(window(w)?);
            }
            Algorithm::Concurrency { .. }
                if self
                    .capacities
                    .iter()
                    .any(|(n, l, _)| n == name && l.is_some()) =>
            {
                spec.max = Some(at(item, Scalar::Str("auto".into())));
            }
            Algorithm::Concurrency { max: 0 } => {
                // Each limit gives its own max (checked with the limits); the zone's is the
                // largest (1 when no limit uses the zone).
                let most = self
                    .limits
                    .iter()
                    .filter(|(zn, _)| zn == name)
                    .filter_map(|(_, l)| l.max)
                    .max()
                    .unwrap_or(1);
                spec.max = Some(at(item, Scalar::Int(*int(item, most).get_ref())));
            }
            Algorithm::Concurrency { max } => {
                spec.max = Some(at(item, Scalar::Int(*int(item, max).get_ref())))
            }
        }
        Ok(spec)
    }

    fn limit_spec(&self, i: usize, zone: &str, l: &HostLimit) -> Result<LimitSpec, String> {
        let item = LIMIT_AT + i;
        let per_limit_max = self
            .zones
            .iter()
            .any(|(n, z)| n == zone && matches!(z.algorithm, Algorithm::Concurrency { max: 0 }));
        let learns = (self.capacities.iter()).any(|(n, learn, _)| n == zone && learn.is_some());
        if per_limit_max && !learns && l.max.is_none() {
            return Err(format!(
                "zone {zone:?} has no max of its own, so each of its limits needs one"
            ));
        }
        let timeout = match l.timeout {
            None => None,
            Some(d) => Some(at(
                item,
                Scalar::Str(duration_text(d).ok_or_else(|| {
                    format!("timeout {d:?} is not a whole number of milliseconds")
                })?),
            )),
        };
        let name = l.name.clone().unwrap_or_else(|| format!("{zone}.{i}"));
        let (delay, nodelay) = match l.delay {
            Delay::Delay => (None, None),
            Delay::After(n) => (Some(int(item, n)), None),
            Delay::NoDelay => (None, Some(at(item, true))),
        };
        let level = match l.log_level {
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        };
        let list = |parts: &[String]| {
            at(
                item,
                StrList(
                    parts
                        .iter()
                        .map(|p| (p.clone(), None::<Range<usize>>))
                        .collect(),
                ),
            )
        };
        Ok(LimitSpec {
            name: Some(at(item, name)),
            class: list(&[HOST_CLASS.to_owned()]),
            zone: at(item, zone.to_owned()),
            key: (!l.key.is_empty()).then(|| list(&l.key)),
            ipv4_prefix: l.ipv4_prefix.map(|p| int(item, p.into())),
            ipv6_prefix: l.ipv6_prefix.map(|p| int(item, p.into())),
            burst: (l.burst != 0).then(|| int(item, l.burst)),
            delay,
            nodelay,
            dry_run: Some(l.dry_run),
            status: Some(int(item, l.status.into())),
            log_level: Some(at(item, level.to_owned())),
            cost: (l.cost != 1).then(|| int(item, l.cost)),
            max: l.max.map(|m| int(item, m)),
            queue: (l.queue != 0).then(|| int(item, l.queue)),
            timeout,
            ban: None,
            lane: None,
            charge_on_status: None,
        })
    }
}
