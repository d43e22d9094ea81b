//! Evaluation: one request → one verdict, the same for every host.
//!
//! Order (nginx's rules where nginx has one):
//! 1. The target is normalized (`$uri` semantics); a target nginx would answer 400 is an error.
//! 2. Exemptions first: an exempt request is never limited and costs nothing.
//! 3. Every limit whose class matches, in file order. Concurrency limits take permits; a full
//!    one answers queue (when it has a queue with room) or reject, and gives back the permits
//!    already taken — unless an enforced rate limit would reject the request, which then
//!    decides (checked by a prediction that writes nothing).
//! 4. Rate limits are charged in order, one table access each. If an enforced one rejects, the
//!    ones already charged are refunded and the permits released: all-or-nothing, as nginx. The
//!    answer is the one that limit gives on its own (nothing else is reported), so it is the
//!    same as if every limit had been predicted first.
//! 5. The longest delay wins. Dry-run limits are charged and counted like the others, but their
//!    delays and rejections are only reported.

use std::fmt::Write as _;
use std::sync::Arc;

use arrayvec::ArrayVec;

use super::bounded::Bounded;
pub use super::bounded::MAX_HEADER_VALUES;
use super::classset::ClassSet;
use super::config::{self, CompiledPolicy, Limit};
use super::counters::{fingerprint, Counters};
pub use super::counters::{EngineCounts, LimitCounts};
use super::key::KeyPart;
use super::key::{ip_key, KEY_BUF_LEN};
use super::ledger::Ledger;
use super::normalize::{self, UriError};
use super::request::{HeaderCache, HeaderPlan, OwnedRequest, PreparedRequest, RequestView};
use crate::cluster::{ClusterShared, ClusterZone};
use crate::limiter::{
    concurrency::DEFAULT_LEASE_NS, Concurrency, Decision, Delay, Gcra, Permit, Rate, SlidingWindow,
    Verdict, NS_PER_SEC,
};
use crate::table::{LogTable, SlidingLog, Table};

/// Concurrency limits one request can hold at once.
pub const MAX_PERMITS: usize = 4;
/// Targets up to this length are normalized in a stack buffer; longer ones use the heap.
const STACK_TARGET: usize = 2048;
/// Salt that turns a concurrency key into the key of its wait queue (same table).
const QUEUE_SALT: u64 = 0x5157_4555_4520_5131;

/// What the host should do with the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Go ahead now.
    Pass,
    /// Go ahead after [`Outcome::wait_ns`].
    Delay,
    /// Answer [`Outcome::status`] with `Retry-After`.
    Reject,
    /// A concurrency limit is full but has queue room: wait (up to the limit's timeout), then
    /// call [`Engine::evaluate_queued`] again with the ticket, or [`Engine::abandon`] it.
    Queue,
}

/// A place in a concurrency limit's wait queue; hand it back exactly once.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a queue ticket must be handed back (evaluate_queued or abandon)"]
pub struct QueueTicket {
    limit: u16,
    permit: Permit,
    /// Its entry in the engine's [`Ledger`].
    generation: u64,
}

/// A permit or queue ticket as plain data, for hosts that carry them across an FFI. A copy
/// handed back after the original (or a forged one) changes nothing: `generation` names the
/// engine's record of it ([`super::ledger`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPermit {
    /// Index of the concurrency limit.
    pub limit: u16,
    pub key_hash: u64,
    pub bucket: u64,
    pub generation: u64,
}

impl QueueTicket {
    /// Index of the concurrency limit this ticket waits for.
    pub fn limit(&self) -> usize {
        self.limit as usize
    }

    /// The raw parts, for hosts that carry tickets across an FFI.
    pub fn into_raw(self) -> RawPermit {
        let (key_hash, bucket) = self.permit.into_raw();
        RawPermit {
            limit: self.limit,
            key_hash,
            bucket,
            generation: self.generation,
        }
    }

    /// Rebuilds a ticket from [`QueueTicket::into_raw`]'s parts.
    pub fn from_raw(raw: RawPermit) -> QueueTicket {
        QueueTicket {
            limit: raw.limit,
            permit: Permit::from_raw(raw.key_hash, raw.bucket),
            generation: raw.generation,
        }
    }
}

/// Concurrency permits held by an admitted request; release them when the response is done.
#[derive(Debug, Default)]
#[must_use = "permits must be released with Engine::release"]
pub struct Permits {
    /// The held permits first (limit, permit, ledger generation), then `None`s.
    held: [Option<(u16, Permit, u64)>; MAX_PERMITS],
}

impl Permits {
    pub fn is_empty(&self) -> bool {
        self.held[0].is_none()
    }

    /// The raw parts of each held permit, consuming them.
    pub fn into_raw(self) -> [Option<RawPermit>; MAX_PERMITS] {
        self.held.map(|h| {
            h.map(|(limit, p, generation)| {
                let (key_hash, bucket) = p.into_raw();
                RawPermit {
                    limit,
                    key_hash,
                    bucket,
                    generation,
                }
            })
        })
    }

    /// Rebuilds permits from [`Permits::into_raw`]'s parts (in any order, with gaps).
    pub fn from_raw(raw: [Option<RawPermit>; MAX_PERMITS]) -> Permits {
        let mut permits = Permits::default();
        for r in raw.into_iter().flatten() {
            permits.push(
                r.limit as usize,
                Permit::from_raw(r.key_hash, r.bucket),
                r.generation,
            );
        }
        permits
    }

    fn push(&mut self, limit: usize, p: Permit, generation: u64) {
        let slot = self
            .held
            .iter_mut()
            .find(|s| s.is_none())
            .expect("MAX_PERMITS exceeded");
        *slot = Some((limit as u16, p, generation));
    }
}

/// Numbers for the `RateLimit` / `RateLimit-Policy` fields: the matched rate limit with the
/// least room left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quota {
    pub limit: u16,
    /// `q`: requests per window.
    pub quota: u64,
    /// `w`: window in seconds.
    pub window_s: u64,
    /// `r`: requests left.
    pub remaining: u64,
    /// `t`: seconds until the quota is whole again.
    pub reset_s: u64,
}

/// The engine's answer for one request.
#[derive(Debug)]
pub struct Outcome {
    pub action: Action,
    /// Response status for [`Action::Reject`] (and for a queue that times out).
    pub status: u16,
    /// For [`Action::Delay`].
    pub wait_ns: u64,
    /// For [`Action::Reject`]: when the request would conform.
    pub retry_after_ns: u64,
    /// The limit that decided a delay, rejection or queueing.
    pub limit: Option<u16>,
    /// The exemption that matched.
    pub exempt: Option<u16>,
    /// No limit matched (and no exemption).
    pub unmatched: bool,
    /// A dry-run limit that would have delayed or rejected, and what it would have done.
    pub dry_run: Option<(u16, Action)>,
    /// On a rejection, the rejecting limit's quota; otherwise the tightest matched quota, and
    /// only when the policy emits RateLimit headers.
    pub quota: Option<Quota>,
    pub permits: Permits,
    pub ticket: Option<QueueTicket>,
}

impl Outcome {
    fn new() -> Outcome {
        Outcome {
            action: Action::Pass,
            status: 200,
            wait_ns: 0,
            retry_after_ns: 0,
            limit: None,
            exempt: None,
            unmatched: false,
            dry_run: None,
            quota: None,
            permits: Permits::default(),
            ticket: None,
        }
    }

    /// `Retry-After` in whole seconds, rounded up (at least 1 for a rejection).
    pub fn retry_after_s(&self) -> u64 {
        self.retry_after_ns.div_ceil(NS_PER_SEC).max(1)
    }
}

/// Why a request could not be evaluated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EvalError {
    /// A target nginx answers 400 for.
    BadTarget(UriError),
    /// More than [`MAX_HEADER_VALUES`] values of one header the policy reads (answer 400);
    /// nothing was charged.
    TooManyHeaderValues,
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EvalError::BadTarget(e) => write!(f, "bad request target: {e}"),
            EvalError::TooManyHeaderValues => write!(
                f,
                "more than {MAX_HEADER_VALUES} values of one header the policy reads"
            ),
        }
    }
}

impl std::error::Error for EvalError {}

/// The limiter of one limit, over its zone's table.
enum Limiter {
    Rate(RateAlg),
    Concurrency(Concurrency),
}

enum RateAlg {
    Gcra(Gcra),
    Sliding(SlidingWindow),
    /// A `scope = "cluster"` sliding zone: local counts plus the other nodes' (src/cluster).
    Cluster(Arc<ClusterZone>),
    /// An exact sliding log (its own table, in the zone's region; cost is always 1).
    Log(Arc<LogTable>),
}

impl RateAlg {
    fn predict(&self, t: &Table, h: u64, cost: u64, now: u64) -> Verdict {
        match self {
            RateAlg::Gcra(a) => t.predict(a, h, cost, now),
            RateAlg::Sliding(a) => t.predict(a, h, cost, now),
            RateAlg::Cluster(c) => c.predict(t, h, cost, now),
            RateAlg::Log(l) => l.predict(h, now),
        }
    }
    fn check(&self, t: &Table, h: u64, cost: u64, now: u64) -> Verdict {
        match self {
            RateAlg::Gcra(a) => t.check(a, h, cost, now),
            RateAlg::Sliding(a) => t.check(a, h, cost, now),
            RateAlg::Cluster(c) => c.check(t, h, cost, now),
            RateAlg::Log(l) => l.check(h, now),
        }
    }
    fn refund(&self, t: &Table, h: u64, cost: u64, now: u64) {
        match self {
            RateAlg::Gcra(a) => t.refund(a, h, cost, now),
            RateAlg::Sliding(a) => t.refund(a, h, cost, now),
            RateAlg::Cluster(c) => c.refund(t, h, cost, now),
            RateAlg::Log(l) => l.refund(h, now),
        }
    }
    /// `w` of `RateLimit-Policy`: the time a full quota takes to refill.
    fn window_s(&self) -> u64 {
        match self {
            RateAlg::Gcra(g) => ((g.burst() + 1) * g.interval_ns()).div_ceil(NS_PER_SEC),
            RateAlg::Sliding(s) => s.window_ns().div_ceil(NS_PER_SEC),
            RateAlg::Cluster(c) => c.window().window_ns().div_ceil(NS_PER_SEC),
            RateAlg::Log(l) => l.log().window_ns().div_ceil(NS_PER_SEC),
        }
    }
}

/// A compiled policy with its zones' tables: evaluates requests.
pub struct Engine {
    policy: CompiledPolicy,
    tables: Vec<Table>,
    limiters: Vec<Limiter>,
    counters: Counters,
    /// Per zone: its cluster side when `scope = "cluster"`.
    clusters: Vec<Option<Arc<ClusterZone>>>,
    /// Per zone: its exact sliding log when `algorithm = "log"`.
    logs: Vec<Option<Arc<LogTable>>>,
    /// The headers the policy reads, looked up in one pass per request.
    headers: HeaderPlan,
    /// The same names, all of them (the plan keeps the first few): see [`Engine::header_names`].
    header_names: Vec<Box<[u8]>>,
    /// The policy's classes and exemptions, compiled for matching.
    classes: ClassSet,
    /// Per limit: how its key is made.
    keys: Vec<KeyPlan>,
    /// The permits and queue places handed out and not yet given back.
    ledger: Ledger,
}

/// How a limit's key is made, decided when the engine is built.
#[derive(Clone, Copy)]
enum KeyPlan {
    /// A key that reads nothing of the request (`global`): the hash of the bytes
    /// [`super::key::KeySpec::build`] writes, computed once.
    Fixed(u64),
    /// `ip` alone: the bytes `build` would write, written straight into a fixed buffer.
    Ip { v4_prefix: u8, v6_prefix: u8 },
    /// Anything else: in a zone of this process's tables, the encoding's pieces hashed as
    /// they are produced ([`super::key::KeySpec::hash_pieces`]: no buffer to fill and read
    /// back); in a cluster zone, whose keys every node must name alike, the bytes `build`
    /// writes.
    General,
}

/// Every header name `policy` reads, lowercase, each once: the forwarding header, header and
/// cookie tests of classes and exemptions, header and cookie key parts.
fn read_headers(policy: &CompiledPolicy) -> Vec<Box<[u8]>> {
    let mut names: Vec<&[u8]> = Vec::new();
    names.extend(policy.client_ip.header_name());
    for shape in policy
        .classes
        .iter()
        .chain(&policy.exemptions)
        .flat_map(|c| &c.shapes)
    {
        names.extend(shape.headers.iter().map(|(n, _)| &n[..]));
        if !shape.cookies.is_empty() {
            names.push(b"cookie");
        }
    }
    for part in policy.limits.iter().flat_map(|l| l.key.parts.iter()) {
        match part {
            KeyPart::Header(n) => names.push(n),
            KeyPart::Cookie(_) => names.push(b"cookie"),
            _ => {}
        }
    }
    let mut out: Vec<Box<[u8]>> = Vec::new();
    for n in names {
        let n = n.to_ascii_lowercase().into_boxed_slice();
        if !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

impl Drop for Engine {
    /// Stops the cluster syncers before the tables they scan are freed.
    fn drop(&mut self) {
        for c in self.clusters.iter().flatten() {
            c.shutdown();
        }
    }
}

/// What a zone's table must be created with (hosts that place tables in shared memory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneLayout {
    pub name: String,
    pub bytes: usize,
    /// Identifies the meaning of the zone's states; a reload that changes it is refused.
    pub schema: u64,
    /// For a `scope = "cluster"` zone: bytes of its shared cluster region (remote counts,
    /// pushed counts, health and stats; [`ClusterShared`]), 0 for a local zone. Hosts with
    /// several processes over one table give it to [`Engine::with_shared`].
    pub cluster_bytes: usize,
}

/// A stable fingerprint of what a zone's states mean (algorithm and the parameters that give
/// states their meaning; a changed GCRA rate keeps its states usable, as nginx allows).
fn zone_schema(z: &config::Zone) -> u64 {
    let (kind, param) = match z.algorithm {
        config::Algorithm::Gcra { .. } => (1u64, 0u64),
        // Cluster zones keep wall-clock window ids and cluster key hashes: another meaning.
        config::Algorithm::Sliding { window, .. } if z.cluster.is_some() => {
            (4, window.as_nanos() as u64)
        }
        config::Algorithm::Sliding { window, .. } => (2, window.as_nanos() as u64),
        config::Algorithm::Concurrency { .. } => (3, DEFAULT_LEASE_NS),
        // The log's record size depends on `events`: both are part of the layout.
        config::Algorithm::Log { events, window } => (5 | events << 8, window.as_millis() as u64),
    };
    // FNV-1a over the fields: stable across builds and processes.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in kind.to_le_bytes().into_iter().chain(param.to_le_bytes()) {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn limiter_for(
    zone: &config::Zone,
    limit: &Limit,
    cluster: Option<&Arc<ClusterZone>>,
    log: Option<&Arc<LogTable>>,
) -> Result<Limiter, String> {
    let err = |e: crate::limiter::ParamError| format!("limit {}: {e}", limit.name);
    if let Some(l) = log {
        return Ok(Limiter::Rate(RateAlg::Log(Arc::clone(l))));
    }
    if let Some(c) = cluster {
        if limit.cost > c.fallback_events() {
            return Err(format!(
                "limit {}: cost {} exceeds zone {}'s fallback share of {} events per node",
                limit.name,
                limit.cost,
                c.name(),
                c.fallback_events()
            ));
        }
        return Ok(Limiter::Rate(RateAlg::Cluster(Arc::clone(c))));
    }
    Ok(match zone.algorithm {
        config::Algorithm::Gcra { rate } => {
            let rate = Rate {
                count: rate.count,
                period_ns: rate.per.as_nanos() as u64,
            };
            let delay = match limit.delay {
                config::Delay::Never => Delay::NoDelay,
                config::Delay::After(0) => Delay::Delay,
                config::Delay::After(n) => Delay::After(n),
            };
            Limiter::Rate(RateAlg::Gcra(
                Gcra::new(rate, limit.burst, delay).map_err(err)?,
            ))
        }
        config::Algorithm::Sliding { events, window } => Limiter::Rate(RateAlg::Sliding(
            SlidingWindow::new(events, window.as_nanos() as u64).map_err(err)?,
        )),
        config::Algorithm::Concurrency { max } => {
            Limiter::Concurrency(Concurrency::new(max, DEFAULT_LEASE_NS).map_err(err)?)
        }
        config::Algorithm::Log { .. } => unreachable!("log zones have their table"),
    })
}

/// The exact sliding log of an `algorithm = "log"` zone. It lives in the zone's region after
/// the slot table's 1152-byte header (whose seed gives the key hashes and whose identity the
/// hosts validate on reload); the slot area, never used by a log zone, holds the log table,
/// created there or attached with its state like the header.
fn log_for(zone: &config::Zone, table: &Table) -> Result<Option<Arc<LogTable>>, String> {
    let config::Algorithm::Log { events, window } = zone.algorithm else {
        return Ok(None);
    };
    let log = SlidingLog::new(events, window.as_nanos() as u64)
        .map_err(|e| format!("zone {}: {e}", zone.name))?;
    let skip = Table::bytes_for(0) - crate::table::MIN_CAPACITY * crate::table::SLOT_BYTES;
    let too_small = |bytes: usize| {
        format!(
            "zone {}: size {bytes} holds no log record; a log zone of {events} events needs at least {} bytes ({} per key)",
            zone.name,
            skip + LogTable::bytes_for(&log, 1),
            log.record_bytes()
        )
    };
    #[cfg(not(loom))]
    {
        let (ptr, len) = table.region();
        if len < skip + LogTable::bytes_for(&log, 1) {
            return Err(too_small(len));
        }
        // SAFETY: `[skip, len)` of the table's region is the slot area, valid as long as the
        // table, which the engine owns beside the log handle (dropping a handle on a borrowed
        // region touches nothing). No slot of a log zone's table is ever used, so the area is
        // all zero (as the table's creation left it) until a log table is created there.
        let (t, _) = unsafe {
            LogTable::create_or_attach_zeroed(ptr.add(skip), len - skip, log, table.clock_base())
        }
        .map_err(|e| format!("zone {}: {e}", zone.name))?;
        Ok(Some(Arc::new(t)))
    }
    #[cfg(loom)]
    {
        let _ = too_small;
        Ok(Some(Arc::new(
            LogTable::new(zone.size as usize, log, table.clock_base())
                .map_err(|e| format!("zone {}: {e}", zone.name))?,
        )))
    }
}

/// The cluster side of a `scope = "cluster"` zone (its remote counts in `shared` when given),
/// its syncer started over `table` when `start`.
fn cluster_for(
    zone: &config::Zone,
    table: &Table,
    shared: Option<ClusterShared>,
    start: bool,
) -> Result<Option<Arc<ClusterZone>>, String> {
    let (Some(spec), config::Algorithm::Sliding { events, window }) =
        (&zone.cluster, zone.algorithm)
    else {
        return Ok(None);
    };
    let c = Arc::new(ClusterZone::with_shared(
        &zone.name,
        spec.clone(),
        events,
        window.as_nanos() as u64,
        table,
        shared,
    )?);
    if start {
        // SAFETY: the engine owns `table` and stops the syncer (Engine::drop) before freeing it.
        c.start(unsafe { table.alias() })?;
    }
    Ok(Some(c))
}

/// One matched limit during an evaluation.
#[derive(Clone, Copy)]
struct Hit {
    limit: usize,
    key_hash: u64,
}

/// Most limits one request is checked against (more are ignored; policies are validated).
const MAX_HITS: usize = 32;

impl Engine {
    /// Zone tables in this process's memory, on the CLOCK_MONOTONIC time base.
    pub fn new(policy: CompiledPolicy) -> Result<Engine, String> {
        let tables = Engine::layouts(&policy)
            .iter()
            .map(|z| Table::new(z.bytes, z.schema, 0).map_err(|e| format!("zone {}: {e}", z.name)))
            .collect::<Result<Vec<_>, _>>()?;
        Engine::with_tables(policy, tables)
    }

    /// The tables a policy needs, in zone order.
    pub fn layouts(policy: &CompiledPolicy) -> Vec<ZoneLayout> {
        policy
            .zones
            .iter()
            .map(|z| ZoneLayout {
                name: z.name.clone(),
                bytes: z.size as usize,
                schema: zone_schema(z),
                cluster_bytes: if z.cluster.is_some() {
                    crate::cluster::shared_bytes(Table::capacity_for(z.size as usize))
                } else {
                    0
                },
            })
            .collect()
    }

    /// An engine over tables the host created or attached (one per zone, in zone order, as
    /// [`Engine::layouts`] describes them).
    pub fn with_tables(policy: CompiledPolicy, tables: Vec<Table>) -> Result<Engine, String> {
        let counters = Counters::new(policy.limits.len());
        Engine::with_tables_and_counters(policy, tables, counters)
    }

    /// Like [`Engine::with_tables`], with the counters in a block the host shares between
    /// processes ([`Engine::counters_layout`] gives its size and fingerprint).
    pub fn with_tables_and_counters(
        policy: CompiledPolicy,
        tables: Vec<Table>,
        counters: Counters,
    ) -> Result<Engine, String> {
        let shared = (0..tables.len()).map(|_| None).collect();
        Engine::with_shared(policy, tables, shared, counters, true)
    }

    /// The most general constructor, for hosts whose processes share the tables (nginx
    /// workers): `shared` gives, per zone in zone order, the shared region of a cluster zone
    /// (`None`: in this process; local zones take `None`). With `start_syncers` false the
    /// cluster syncers wait for [`Engine::start_syncers`] (nginx builds the engine in its
    /// master and starts the syncers in each worker: threads do not survive `fork`).
    pub fn with_shared(
        policy: CompiledPolicy,
        tables: Vec<Table>,
        shared: Vec<Option<ClusterShared>>,
        counters: Counters,
        start_syncers: bool,
    ) -> Result<Engine, String> {
        if tables.len() != policy.zones.len() || shared.len() != policy.zones.len() {
            return Err(format!(
                "{} tables and {} cluster regions for {} zones",
                tables.len(),
                shared.len(),
                policy.zones.len()
            ));
        }
        let clusters = policy
            .zones
            .iter()
            .zip(&tables)
            .zip(shared)
            .map(|((z, t), s)| cluster_for(z, t, s, start_syncers))
            .collect::<Result<Vec<_>, _>>()?;
        let logs = policy
            .zones
            .iter()
            .zip(&tables)
            .map(|(z, t)| log_for(z, t))
            .collect::<Result<Vec<_>, _>>()?;
        let limiters = policy
            .limits
            .iter()
            .map(|l| {
                let z = l.zone;
                limiter_for(&policy.zones[z], l, clusters[z].as_ref(), logs[z].as_ref())
            })
            .collect::<Result<Vec<_>, _>>()?;
        // A GCRA zone attached with another rate keeps each key's excess in requests (done
        // last: a refused engine changes no state).
        let now = crate::clock::monotonic_ns();
        for (z, t) in policy.zones.iter().zip(&tables) {
            if let config::Algorithm::Gcra { rate } = z.algorithm {
                t.set_gcra_interval(rate.per.as_nanos() as u64 / rate.count.max(1), now);
            }
        }
        let header_names = read_headers(&policy);
        let ledger = Ledger::new(
            limiters
                .iter()
                .any(|l| matches!(l, Limiter::Concurrency(_))),
        );
        let mut engine = Engine {
            ledger,
            headers: HeaderPlan::new(header_names.iter().map(|n| &n[..])),
            header_names,
            classes: ClassSet::new(&policy.classes, &policy.exemptions),
            policy,
            tables,
            limiters,
            counters,
            clusters,
            logs,
            keys: Vec::new(),
        };
        engine.keys = engine.key_plans();
        Ok(engine)
    }

    fn key_plans(&self) -> Vec<KeyPlan> {
        let anyone = OwnedRequest::new("GET", "/", std::net::Ipv4Addr::UNSPECIFIED.into());
        self.policy
            .limits
            .iter()
            .map(|l| match &l.key.parts[..] {
                [KeyPart::Ip {
                    v4_prefix,
                    v6_prefix,
                }] => KeyPlan::Ip {
                    v4_prefix: *v4_prefix,
                    v6_prefix: *v6_prefix,
                },
                parts if parts.iter().all(|p| *p == KeyPart::Global) => {
                    let req = PreparedRequest::new(&anyone, b"/", b"", anyone.peer);
                    let mut key = [0u8; KEY_BUF_LEN];
                    let len = l.key.build(&req, &mut key);
                    KeyPlan::Fixed(self.key_hash(l.zone, &key[..len]))
                }
                _ => KeyPlan::General,
            })
            .collect()
    }

    /// The size in bytes and the fingerprint of a shared counter block for this policy.
    pub fn counters_layout(policy: &CompiledPolicy) -> (usize, u64) {
        (
            Counters::bytes_for(policy.limits.len()),
            fingerprint(policy.limits.iter().map(|l| l.name.as_str())),
        )
    }

    /// The cluster side of zone `zone` (index in [`CompiledPolicy::zones`]), if it has
    /// `scope = "cluster"`.
    pub fn cluster(&self, zone: usize) -> Option<&ClusterZone> {
        self.clusters.get(zone)?.as_deref()
    }

    /// Starts the cluster syncers that are not running (one thread per cluster zone).
    pub fn start_syncers(&self) -> Result<(), String> {
        for (c, t) in self.clusters.iter().zip(&self.tables) {
            if let Some(c) = c {
                // SAFETY: the engine owns `t` and stops the syncer (Engine::drop) before
                // freeing it.
                c.start(unsafe { t.alias() })?;
            }
        }
        Ok(())
    }

    /// Stops the cluster syncers and waits for them (each leader resigns); also done on drop.
    pub fn stop_syncers(&self) {
        for c in self.clusters.iter().flatten() {
            c.shutdown();
        }
    }

    /// The cluster zones.
    pub fn clusters(&self) -> impl Iterator<Item = &ClusterZone> + Clone {
        self.clusters.iter().flatten().map(|c| &**c)
    }

    /// Every header the policy reads (lowercase, each once; `cookie` when it reads cookies).
    /// A host that copies headers for the engine needs to copy only these: the engine looks
    /// up no other header.
    pub fn header_names(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.header_names.iter().map(|n| &n[..])
    }

    pub fn policy(&self) -> &CompiledPolicy {
        &self.policy
    }

    pub fn tables(&self) -> &[Table] {
        &self.tables
    }

    /// Zone `zone`'s table counters (its exact sliding log's for `algorithm = "log"`).
    pub fn zone_stats(&self, zone: usize) -> crate::table::TableStats {
        match &self.logs[zone] {
            Some(l) => l.stats(),
            None => self.tables[zone].stats(),
        }
    }

    /// Limit `limit`'s request counts by verdict (every thread's, and every process's that
    /// shares the counter block).
    pub fn counters(&self, limit: usize) -> LimitCounts {
        self.counters.limit(limit)
    }

    /// Engine-wide request counts (summed as [`Engine::counters`]).
    pub fn totals(&self) -> EngineCounts {
        self.counters.totals()
    }

    /// Evaluates a request at `now` (CLOCK_MONOTONIC ns, or the tables' injected clock).
    pub fn evaluate(&self, req: &dyn RequestView, now: u64) -> Result<Outcome, EvalError> {
        self.run(req, now, None)
    }

    /// Evaluates a queued request again; on anything but [`Action::Queue`] its ticket is
    /// handed back, otherwise it is returned in [`Outcome::ticket`]. A ticket already handed
    /// back (a stale copy) holds no place: the request is evaluated as a new one.
    pub fn evaluate_queued(
        &self,
        req: &dyn RequestView,
        now: u64,
        ticket: QueueTicket,
    ) -> Result<Outcome, EvalError> {
        let live = self.ledger.is_held(ticket.generation);
        self.run(req, now, live.then_some(ticket))
    }

    /// Gives up a place in a queue (the host's wait timed out or the client went away).
    /// A ticket already handed back, or of no concurrency limit, changes nothing.
    pub fn abandon(&self, ticket: QueueTicket, now: u64) {
        let l = ticket.limit as usize;
        if let Some(Limiter::Concurrency(c)) = self.limiters.get(l) {
            if self.ledger.give_back(ticket.generation) {
                self.queue_of(c).release_in(
                    &self.tables[self.policy.limits[l].zone],
                    ticket.permit,
                    now,
                );
            }
        }
    }

    /// Releases an admitted request's permits (when its response is complete). A permit
    /// already released (a stale copy), or of no concurrency limit, changes nothing.
    pub fn release(&self, permits: Permits, now: u64) {
        // Read in place, field by field: moving the array out (`into_iter`) copies it with
        // wide loads that wait for the narrower stores that have just written it.
        for held in &permits.held {
            let Some((l, p, generation)) = held else {
                break;
            };
            if let Some(Limiter::Concurrency(c)) = self.limiters.get(usize::from(*l)) {
                if !self.ledger.give_back(*generation) {
                    continue;
                }
                let limit = &self.policy.limits[usize::from(*l)];
                let p = Permit::from_raw(p.key_hash, p.bucket);
                self.tables[limit.zone].release_units(c, p, limit.cost, now);
            }
        }
    }

    /// Whether limit `limit` exists and is a concurrency limit (for hosts that check the
    /// permits and tickets they carry across an FFI).
    pub fn is_concurrency_limit(&self, limit: usize) -> bool {
        matches!(self.limiters.get(limit), Some(Limiter::Concurrency(_)))
    }

    fn queue_of(&self, c: &Concurrency) -> QueueLimiter {
        QueueLimiter {
            lease_ns: c.lease_ns(),
        }
    }

    fn run(
        &self,
        req: &dyn RequestView,
        now: u64,
        ticket: Option<QueueTicket>,
    ) -> Result<Outcome, EvalError> {
        if ticket.is_none() {
            // A queued request polling again is the same request.
            self.counters.add_total(|t| &t.requests);
        }
        let parts = normalize::split_target(req.target()).map_err(|e| self.bad(e))?;
        let query = parts.query.unwrap_or(b"");
        if normalize::is_normal(parts.path) {
            // Nearly every real path: already what nginx's $uri would be; no copy.
            return self.decide(req, parts.path, query, now, ticket);
        }
        self.run_normalized(req, parts.path, query, now, ticket)
    }

    /// The slow path: decode and resolve the path into a buffer first.
    #[inline(never)]
    fn run_normalized(
        &self,
        req: &dyn RequestView,
        raw_path: &[u8],
        query: &[u8],
        now: u64,
        ticket: Option<QueueTicket>,
    ) -> Result<Outcome, EvalError> {
        let mut stack = [0u8; STACK_TARGET];
        let mut heap = Vec::new();
        let buf: &mut [u8] = if raw_path.len() <= STACK_TARGET {
            &mut stack[..raw_path.len()]
        } else {
            heap.resize(raw_path.len(), 0);
            &mut heap
        };
        let len = normalize::normalize_path(raw_path, buf).map_err(|e| self.bad(e))?;
        self.decide(req, &buf[..len], query, now, ticket)
    }

    /// Everything after normalization: exemptions, limits, charging. Every header is read
    /// before anything is charged, so a request with too many values of one is refused whole.
    fn decide(
        &self,
        host_req: &dyn RequestView,
        path: &[u8],
        query: &[u8],
        now: u64,
        mut ticket: Option<QueueTicket>,
    ) -> Result<Outcome, EvalError> {
        let bounded = Bounded::new(host_req);
        let req: &dyn RequestView = &bounded;
        let overflow = |ticket: &mut Option<QueueTicket>| {
            let over = bounded.overflowed();
            if over {
                if let Some(t) = ticket.take() {
                    self.abandon(t, now);
                }
            }
            over
        };
        let mut headers = HeaderCache::empty();
        headers.fill_in(&self.headers, req);
        let client = self.policy.client_ip.resolve_cached(req, &headers);
        let prepared = PreparedRequest::with_headers(req, path, query, client, &headers);

        let mut out = Outcome::new();
        let mut facts = self.classes.facts(&prepared);
        if let Some(i) = self.classes.exemption(&prepared, &mut facts) {
            if overflow(&mut ticket) {
                return Err(EvalError::TooManyHeaderValues);
            }
            self.counters.add_total(|t| &t.exempt);
            out.exempt = Some(i as u16);
            if let Some(t) = ticket.take() {
                self.abandon(t, now);
            }
            return Ok(out);
        }

        let mut hits = ArrayVec::<Hit, MAX_HITS>::new();
        for (i, limit) in self.policy.limits.iter().enumerate() {
            if !limit.classes.is_empty()
                && !limit
                    .classes
                    .iter()
                    .any(|&c| self.classes.class(c, &prepared, &mut facts))
            {
                continue;
            }
            let key_hash = match self.keys[i] {
                KeyPlan::Fixed(h) => h,
                KeyPlan::Ip {
                    v4_prefix,
                    v6_prefix,
                } => {
                    let mut ip = [0u8; 20];
                    let len = ip_key(prepared.client, v4_prefix, v6_prefix, &mut ip);
                    self.key_hash(limit.zone, &ip[..len])
                }
                KeyPlan::General => match &self.clusters[limit.zone] {
                    // A cluster zone's keys are named alike on every node: hashed as bytes.
                    Some(c) => {
                        let mut key = [0u8; KEY_BUF_LEN];
                        let len = limit.key.build(&prepared, &mut key);
                        c.key_hash(&key[..len])
                    }
                    None => limit
                        .key
                        .hash_pieces(&prepared, self.tables[limit.zone].key_hasher()),
                },
            };
            if hits.try_push(Hit { limit: i, key_hash }).is_err() {
                break;
            }
        }
        let hits = &hits[..];
        if overflow(&mut ticket) {
            return Err(EvalError::TooManyHeaderValues);
        }
        if hits.is_empty() {
            self.counters.add_total(|t| &t.unmatched);
            out.unmatched = true;
            if let Some(t) = ticket.take() {
                self.abandon(t, now);
            }
            return Ok(out);
        }

        // 3. Concurrency permits.
        let mut pending = [Counted::Pass; MAX_HITS];
        for (k, h) in hits.iter().enumerate() {
            let (limit, Limiter::Concurrency(c)) =
                (&self.policy.limits[h.limit], &self.limiters[h.limit])
            else {
                continue;
            };
            let table = &self.tables[limit.zone];
            match table.acquire_units(c, h.key_hash, limit.cost, now) {
                (_, Some(p)) => out.permits.push(h.limit, p, self.ledger.take()),
                (_, None) if limit.dry_run => {
                    pending[k] = Counted::DryRejected;
                    out.dry_run.get_or_insert((h.limit as u16, Action::Reject));
                }
                (_, None) => {
                    self.release(std::mem::take(&mut out.permits), now);
                    // A rate limit that rejects the request decides before a full concurrency
                    // limit does; nothing has been charged yet, so a prediction tells.
                    if let Some(rejected) = self.predicted_rejection(hits, now) {
                        if let Some(t) = ticket.take() {
                            self.abandon(t, now);
                        }
                        return Ok(rejected);
                    }
                    let mine = ticket.as_ref().is_some_and(|t| t.limit as usize == h.limit);
                    if mine || (ticket.is_none() && limit.queue > 0) {
                        let t = match ticket.take() {
                            // Still waiting: the same place, counted once when it was taken.
                            Some(t) => Some(t),
                            None => {
                                let entered = self
                                    .queue_of(c)
                                    .enter(table, h.key_hash, limit.queue, now)
                                    .map(|permit| QueueTicket {
                                        limit: h.limit as u16,
                                        permit,
                                        generation: self.ledger.take(),
                                    });
                                if entered.is_some() {
                                    self.counters.add_limit(h.limit, |c| &c.queued);
                                }
                                entered
                            }
                        };
                        if let Some(t) = t {
                            out.action = Action::Queue;
                            out.status = limit.status;
                            out.limit = Some(h.limit as u16);
                            out.ticket = Some(t);
                            return Ok(out);
                        }
                    }
                    self.reject(&mut out, h.limit, 0);
                    if let Some(t) = ticket.take() {
                        self.abandon(t, now);
                    }
                    return Ok(out);
                }
            }
        }
        if let Some(t) = ticket.take() {
            self.abandon(t, now);
        }

        // 4. Charge the rate limits, one table access each; an enforced rejection undoes every
        //    charge and permit before it (all-or-nothing).
        for (k, h) in hits.iter().enumerate() {
            let (limit, Limiter::Rate(alg)) =
                (&self.policy.limits[h.limit], &self.limiters[h.limit])
            else {
                continue;
            };
            let table = &self.tables[limit.zone];
            let v = alg.check(table, h.key_hash, limit.cost, now);
            // The quota only feeds RateLimit headers: skip its divisions when they are off,
            // and when this limit does not have less room left than the tightest so far.
            if self.policy.emit_headers
                && !limit.dry_run
                && out
                    .quota
                    .is_none_or(|best| v.remaining.below(best.remaining))
            {
                out.quota = Some(self.quota(h.limit, alg, &v));
            }
            match (v.decision, limit.dry_run) {
                (Decision::Pass, _) => {}
                (Decision::Delay, false) => {
                    pending[k] = Counted::Delayed;
                    if v.wait_ns > out.wait_ns {
                        out.wait_ns = v.wait_ns;
                        out.action = Action::Delay;
                        out.limit = Some(h.limit as u16);
                    }
                }
                (Decision::Delay, true) => {
                    pending[k] = Counted::DryDelayed;
                    out.dry_run.get_or_insert((h.limit as u16, Action::Delay));
                }
                (Decision::Reject, true) => {
                    pending[k] = Counted::DryRejected;
                    out.dry_run = Some((h.limit as u16, Action::Reject));
                }
                (Decision::Reject, false) => {
                    // Refund only what was charged: a dry-run rejection charged nothing.
                    for (e, counted) in hits[..k].iter().zip(&pending[..k]) {
                        if let (l, Limiter::Rate(a), false) = (
                            &self.policy.limits[e.limit],
                            &self.limiters[e.limit],
                            matches!(counted, Counted::DryRejected),
                        ) {
                            a.refund(&self.tables[l.zone], e.key_hash, l.cost, now);
                        }
                    }
                    self.release(std::mem::take(&mut out.permits), now);
                    // The request is answered as if this limit had been asked alone, on the
                    // states before this request: the same state unless an earlier limit
                    // charged this very bucket (two limits on one zone with one key). Then a
                    // rejection on the earlier state is that answer; a pass there means the
                    // earlier charge is what rejects, and this verdict stands.
                    let shared = hits[..k].iter().zip(&pending[..k]).any(|(e, counted)| {
                        e.key_hash == h.key_hash
                            && self.policy.limits[e.limit].zone == limit.zone
                            && !matches!(counted, Counted::DryRejected)
                    });
                    let alone = if shared {
                        let p = alg.predict(table, h.key_hash, limit.cost, now);
                        (p.decision == Decision::Reject).then_some(p)
                    } else {
                        Some(v)
                    };
                    let v = match alone {
                        Some(p) => {
                            // Rejected on its own: nothing else about the request is reported.
                            out.dry_run = None;
                            p
                        }
                        None => v,
                    };
                    out.action = Action::Pass;
                    out.wait_ns = 0;
                    self.reject(&mut out, h.limit, v.retry_after_ns);
                    out.quota = Some(self.quota(h.limit, alg, &v));
                    return Ok(out);
                }
            }
        }
        for (k, h) in hits.iter().enumerate() {
            self.counters.add_limit(h.limit, |c| match pending[k] {
                Counted::Pass => &c.passed,
                Counted::Delayed => &c.delayed,
                Counted::DryDelayed => &c.dry_run_delayed,
                Counted::DryRejected => &c.dry_run_rejected,
            });
        }
        Ok(out)
    }

    /// The first enforced rate limit among `hits` that would reject the request now, as the
    /// outcome to answer (nothing charged, nothing else reported); `None` if none would.
    #[inline(never)]
    fn predicted_rejection(&self, hits: &[Hit], now: u64) -> Option<Outcome> {
        for h in hits {
            let (limit, Limiter::Rate(alg)) =
                (&self.policy.limits[h.limit], &self.limiters[h.limit])
            else {
                continue;
            };
            let v = alg.predict(&self.tables[limit.zone], h.key_hash, limit.cost, now);
            if v.decision == Decision::Reject && !limit.dry_run {
                let mut out = Outcome::new();
                self.reject(&mut out, h.limit, v.retry_after_ns);
                out.quota = Some(self.quota(h.limit, alg, &v));
                return Some(out);
            }
        }
        None
    }

    /// The hash of `key` in zone `zone` (its table's, or its cluster's for a cluster zone).
    #[inline]
    fn key_hash(&self, zone: usize, key: &[u8]) -> u64 {
        match &self.clusters[zone] {
            Some(c) => c.key_hash(key),
            None => self.tables[zone].key_hash(key),
        }
    }

    fn bad(&self, e: UriError) -> EvalError {
        self.counters.add_total(|t| &t.bad_target);
        EvalError::BadTarget(e)
    }

    fn reject(&self, out: &mut Outcome, limit: usize, retry_after_ns: u64) {
        self.counters.add_limit(limit, |c| &c.rejected);
        out.action = Action::Reject;
        out.status = self.policy.limits[limit].status;
        out.retry_after_ns = retry_after_ns;
        out.limit = Some(limit as u16);
    }

    fn quota(&self, limit: usize, alg: &RateAlg, v: &Verdict) -> Quota {
        Quota {
            limit: limit as u16,
            quota: v.limit,
            window_s: alg.window_s(),
            remaining: v.remaining.get(),
            reset_s: v.reset_ns.div_ceil(NS_PER_SEC),
        }
    }

    /// Name of limit `i`.
    pub fn limit_name(&self, i: usize) -> &str {
        &self.policy.limits[i].name
    }

    /// The response fields for an outcome: `Retry-After` on rejection, and `RateLimit-Policy` /
    /// `RateLimit` (draft-ietf-httpapi-ratelimit-headers) when the policy enables them.
    /// Formats into a stack buffer; `emit` receives each (name, value).
    pub fn headers(&self, out: &Outcome, mut emit: impl FnMut(&str, &str)) {
        let mut buf = StackStr::new();
        if out.action == Action::Reject {
            let _ = write!(buf, "{}", out.retry_after_s());
            emit("Retry-After", buf.as_str());
        }
        if !self.policy.emit_headers {
            return;
        }
        if let Some(q) = out.quota {
            let name = self.limit_name(q.limit as usize);
            buf.clear();
            let _ = write!(buf, "\"{}\";q={};w={}", name, q.quota, q.window_s);
            emit("RateLimit-Policy", buf.as_str());
            buf.clear();
            let _ = write!(buf, "\"{}\";r={};t={}", name, q.remaining, q.reset_s);
            emit("RateLimit", buf.as_str());
        }
    }
}

#[derive(Clone, Copy)]
enum Counted {
    Pass,
    Delayed,
    DryDelayed,
    DryRejected,
}

/// A concurrency limit's wait queue: a second leased counter in the same table, under the
/// salted key, capped at the limit's `queue`.
struct QueueLimiter {
    lease_ns: u64,
}

impl QueueLimiter {
    fn enter(&self, table: &Table, key_hash: u64, queue: u64, now: u64) -> Option<Permit> {
        let c = Concurrency::new(queue.min(crate::limiter::MAX_COUNT), self.lease_ns).ok()?;
        table.acquire(&c, key_hash ^ QUEUE_SALT, now).1
    }

    fn release_in(&self, table: &Table, permit: Permit, now: u64) {
        // Release needs no max; any valid one does.
        if let Ok(c) = Concurrency::new(1, self.lease_ns) {
            table.release(&c, permit, now);
        }
    }
}

/// A small fixed buffer for formatting header values without allocating.
struct StackStr {
    buf: [u8; 256],
    len: usize,
}

impl StackStr {
    fn new() -> StackStr {
        StackStr {
            buf: [0; 256],
            len: 0,
        }
    }
    fn clear(&mut self) {
        self.len = 0;
    }
    fn as_str(&self) -> &str {
        // Only whole `&str`s are ever appended (see `write_str`).
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for StackStr {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
