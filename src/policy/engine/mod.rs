//! Evaluation: one request → one verdict, the same for every host.
//!
//! Order (nginx's rules where nginx has one):
//! 1. The target is normalized (`$uri` semantics); a target nginx would answer 400 is an error.
//!    A policy that tests neither path nor query (nor keys on the path) does not read the
//!    target at all; one that tests only the query does not normalize the path.
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
//!
//! [`Engine::evaluate_selected`] replaces steps 2 and 3's matching with the limits the host
//! names (its own directives, `class = "@host"`), in its order, and charges them the same way
//! (engine/charge.rs), with nginx's dry-run rule: a dry-run limit that would reject gives back
//! everything, as an enforced one does, and the longest would-be delay is reported. A limit
//! whose key has an absent or empty `var:` part does not apply, in both.

use std::fmt::Write as _;
use std::sync::Arc;

use arrayvec::ArrayVec;

use super::bounded::Bounded;
pub use super::bounded::MAX_HEADER_VALUES;
use super::config::{self, CompiledPolicy, Lane, Limit};
use super::counters::{fingerprint, Counters};
pub use super::counters::{EngineCounts, LimitCounts};
use super::key::{ip_key, KEY_BUF_LEN};
use super::key::{KeyPart, KeySpec};
use super::ledger::{Held, Ledger, UNTRACKED};
use super::matching::classset::ClassSet;
use super::matching::normalize::{self, UriError};
use super::request::{HeaderCache, HeaderPlan, OwnedRequest, PreparedRequest, RequestView};
use crate::cluster::{ClusterShared, ClusterZone};
use crate::limiter::{Concurrency, Decision, Gcra, Permit, SlidingWindow, Verdict, NS_PER_SEC};
use crate::table::{LogTable, SlidingLog, Table};

mod outcome;
mod render;
pub use outcome::*;
pub use render::LogAction;
mod limiters;
use limiters::*;
mod build;
pub use build::*;
#[cfg(not(loom))]
mod attach;
#[cfg(not(loom))]
pub use attach::{AttachError, AttachOptions, HostRegions};
mod ban_ids;
mod bans;
mod charge;
mod fast;
use fast::{TRAIT_CONCURRENCY, TRAIT_FAST, TRAIT_READS_PATH};
mod deferred;
mod headers;
mod keys;
pub use keys::KeyState;
mod renew;
use renew::held;
mod capacity;
pub use capacity::Sample;
mod standing;
pub use standing::{STANDING_DEADLINE_NS, STANDING_INTERVAL_NS, STANDING_TARGET_NS};

/// Concurrency limits one request can hold at once.
pub const MAX_PERMITS: usize = 4;
/// Limits with `charge_on_status` in one policy (each request carries their charges).
pub const MAX_CHARGES: usize = 4;
/// Targets up to this length are normalized in a stack buffer; longer ones use the heap.
const STACK_TARGET: usize = 2048;
use crate::limiter::QUEUE_SALT;

/// A compiled policy with its zones' tables: evaluates requests.
pub struct Engine {
    policy: CompiledPolicy,
    tables: Vec<Table>,
    limiters: Vec<Limiter>,
    counters: Counters,
    /// Per zone: its cluster side when `scope = "cluster"`.
    clusters: Vec<Option<Arc<ClusterZone>>>,
    /// Per zone: its exact sliding log when `algorithm = "sliding_log"`.
    logs: Vec<Option<Arc<LogTable>>>,
    /// The headers the policy reads, looked up in one pass per request.
    headers: HeaderPlan,
    /// The same names, all of them (the plan keeps the first few): see [`Engine::header_names`].
    header_names: Vec<Box<[u8]>>,
    /// The policy's classes and exemptions, compiled for matching.
    classes: ClassSet,
    /// Per limit: how its key is made.
    keys: Vec<KeyPlan>,
    /// Per limit: its traits (engine/fast.rs, `TRAIT_*`).
    traits: Vec<u8>,
    /// The limits [`Engine::evaluate`] checks, when the fast path can charge all of them.
    fast_policy: Option<Box<[u16]>>,
    /// Whether the fast path is taken (always, but in the tests that compare it with the
    /// general path).
    fast_on: bool,
    /// Whether [`Engine::evaluate`] needs the path (a class, exemption or key reads it) and
    /// the query; what it does not need is not parsed.
    policy_reads: Reads,
    /// The permits and queue places handed out and not yet given back.
    ledger: Ledger,
    /// Whether some limit has a `ban` (only then are bans looked up: engine/bans.rs).
    any_ban: bool,
    /// Per limit: the id its bans are stored under, 0 when it enforces none (engine/ban_ids.rs).
    ban_ids: Vec<u64>,
    /// Whether some limit has `charge_on_status` (engine/deferred.rs).
    any_deferred: bool,
    /// Per limit: its concurrency limit's latency sampler, learning or pinned at a fixed max
    /// (engine/capacity.rs).
    samplers: Vec<Option<crate::limiter::Adaptive>>,
    /// The classes that name a lane, with it.
    laned: Box<[(usize, Lane)]>,
}

/// One matched limit during an evaluation.
#[derive(Clone, Copy)]
struct Hit {
    limit: usize,
    key_hash: u64,
}

/// Most limits one request is checked against (more are ignored; policies are validated).
const MAX_HITS: usize = 32;
/// Most limits one [`Engine::evaluate_selected`] names.
pub const MAX_SELECTED: usize = MAX_HITS;

/// What of the request target an evaluation reads.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Reads {
    pub(super) path: bool,
    pub(super) query: bool,
}

/// Which limits an evaluation considers.
#[derive(Clone, Copy)]
enum Selection<'a> {
    /// Exemptions, then every limit whose class matches ([`Engine::evaluate`]).
    Policy,
    /// Exactly these limits, in this order ([`Engine::evaluate_selected`]).
    Host(&'a [u16]),
}

impl Engine {
    /// The cluster side of zone `zone` (index in [`CompiledPolicy::zones`]), if it has
    /// `scope = "cluster"`.
    pub fn cluster(&self, zone: usize) -> Option<&ClusterZone> {
        self.clusters.get(zone)?.as_deref()
    }

    /// Starts the cluster syncers that are not running (one thread per cluster zone).
    pub fn start_syncers(&self) -> Result<(), String> {
        for (c, t) in self.clusters.iter().zip(&self.tables) {
            if let Some(c) = c {
                c.start(t.alias())?;
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

    /// Every variable the policy's `var:` key parts name, in the order of their indexes: the
    /// engine asks [`RequestView::var`] for variable `i` by its index here. Hosts map the
    /// names to their own handles once, when the engine is built.
    pub fn var_names(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.policy.vars.iter().map(|n| n.as_bytes())
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

    /// Zone `zone`'s table counters (its exact sliding log's for `algorithm = "sliding_log"`).
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

    /// Limit `limit`'s top rejected keys and clients and its per-second history, as of `now`
    /// (CLOCK_MONOTONIC ns, the clock requests are evaluated with).
    pub fn limit_top(&self, limit: usize, now: u64) -> crate::policy::topkeys::LimitTop {
        let mut top = self.counters.limit_top(limit, now);
        if self.policy.limits[limit].ban.is_some() {
            top.bans = Some(self.enforced_bans(limit, now));
        }
        top
    }

    /// Engine-wide request counts (summed as [`Engine::counters`]).
    pub fn totals(&self) -> EngineCounts {
        self.counters.totals()
    }

    /// Evaluates a request at `now` (CLOCK_MONOTONIC ns, or the tables' injected clock).
    pub fn evaluate(&self, req: &dyn RequestView, now: u64) -> Result<Outcome, EvalError> {
        self.run(req, now, None, Selection::Policy)
    }

    /// Evaluates a queued request again; on anything but [`Action::Queue`] its ticket is
    /// handed back, otherwise it is returned in [`Outcome::ticket`]. Once the ticket's
    /// deadline (its limit's `timeout` after it was queued) has passed, the answer is that
    /// limit's rejection ([`Outcome::queue_timeout`]). A ticket already handed back (a stale
    /// copy) holds no place: the request is evaluated as a new one.
    pub fn evaluate_queued(
        &self,
        req: &dyn RequestView,
        now: u64,
        ticket: QueueTicket,
    ) -> Result<Outcome, EvalError> {
        self.run_queued(req, now, ticket, Selection::Policy)
    }

    /// Evaluates a request against exactly `limits` (indexes of limits, in this order), as a
    /// host's own directives select them (nginx: a location's `limit_req` zones): no
    /// exemptions, no classes, the same charging as [`Engine::evaluate`] — permits, charges
    /// in order, a rejection gives back everything charged before it, the longest delay wins
    /// — with nginx's dry-run rules: a dry-run limit's would-be rejection also gives
    /// everything back (and is reported), and the longest would-be delay is the one reported.
    /// A limit whose key has an absent or empty `var:` part does not apply; when none
    /// applies the outcome is [`Outcome::unmatched`]. Costs O(listed limits); the target is
    /// parsed only when a listed key reads the path. Engine-wide totals
    /// ([`Engine::totals`]) count only [`Engine::evaluate`]'s requests.
    pub fn evaluate_selected(
        &self,
        req: &dyn RequestView,
        limits: &[u16],
        now: u64,
    ) -> Result<Outcome, EvalError> {
        self.run(req, now, None, Selection::Host(limits))
    }

    /// [`Engine::evaluate_queued`] for [`Engine::evaluate_selected`] (the same `limits`).
    pub fn evaluate_selected_queued(
        &self,
        req: &dyn RequestView,
        limits: &[u16],
        now: u64,
        ticket: QueueTicket,
    ) -> Result<Outcome, EvalError> {
        self.run_queued(req, now, ticket, Selection::Host(limits))
    }

    /// A queued request asking again: a ticket already handed back (a stale copy) holds no
    /// place, and the request is evaluated as a new one; a live ticket whose deadline has
    /// passed is given back and answered with its limit's rejection.
    fn run_queued(
        &self,
        req: &dyn RequestView,
        now: u64,
        ticket: QueueTicket,
        sel: Selection<'_>,
    ) -> Result<Outcome, EvalError> {
        if !self.ledger.is_held(ticket.generation) {
            return self.run(req, now, None, sel);
        }
        if now < ticket.deadline_ns {
            return self.run(req, now, Some(ticket), sel);
        }
        let limit = ticket.limit;
        let key_hash = ticket.permit.key_hash ^ QUEUE_SALT;
        self.abandon(ticket, now);
        if let Some(l) = self.policy.limits.get(usize::from(limit)) {
            self.shed(
                usize::from(limit),
                key_hash,
                l.lane.unwrap_or_default(),
                now,
            );
        }
        let mut out = Outcome::new();
        out.action = Action::Reject;
        out.status = self
            .policy
            .limits
            .get(usize::from(limit))
            .map_or(503, |l| l.status);
        out.limit = Some(limit);
        out.excess_milli = 1000;
        out.queue_timeout = true;
        Ok(out)
    }

    /// Gives up a place in a queue (the host's wait timed out or the client went away).
    /// A ticket already handed back, or of no concurrency limit, changes nothing.
    pub fn abandon(&self, ticket: QueueTicket, now: u64) {
        self.give_up(ticket, now, false)
    }

    /// How long the request holding `ticket` has waited at `now`.
    fn waited(&self, ticket: &QueueTicket, now: u64) -> u64 {
        let timeout =
            (self.policy.limits.get(usize::from(ticket.limit))).map_or(0, Limit::timeout_ns);
        now.saturating_sub(ticket.deadline_ns.saturating_sub(timeout))
    }

    /// Gives back a place in a queue; `admitted`: its request got its slot.
    fn give_up(&self, ticket: QueueTicket, now: u64, admitted: bool) {
        let l = ticket.limit as usize;
        if let Some(Limiter::Concurrency(c)) = self.limiters.get(l) {
            let waited = self.waited(&ticket, now);
            let (key_hash, bucket) = ticket.permit.into_raw();
            if let Some(bucket) = self.ledger.give_back(ticket.generation, bucket) {
                if admitted {
                    self.served(l, key_hash ^ QUEUE_SALT, waited, now);
                }
                self.queue_of(c).release_in(
                    &self.tables[self.policy.limits[l].zone],
                    Permit::from_raw(key_hash, bucket),
                    now,
                );
            }
        }
    }

    /// Releases an admitted request's permits (when its response is complete). A permit
    /// already released (a stale copy), or of no concurrency limit, changes nothing.
    pub fn release(&self, permits: Permits, now: u64) {
        self.give_back(&permits, None, now)
    }

    /// [`Engine::release`] with the backend's time for the request: it teaches learned limits
    /// (`max = "auto"`) and feeds the latency figures of every concurrency limit held.
    pub fn release_sampled(&self, permits: Permits, sample: Option<Sample>, now: u64) {
        self.give_back(&permits, sample, now)
    }

    /// Both releases, inlined into each (the permits are not copied to another frame).
    #[inline(always)]
    fn give_back(&self, permits: &Permits, sample: Option<Sample>, now: u64) {
        // Read in place, field by field: moving the array out (`into_iter`) copies it with
        // wide loads that wait for the narrower stores that have just written it.
        for held in &permits.held {
            let Some((l, p, generation)) = held else {
                break;
            };
            if let Some(Limiter::Concurrency(c)) = self.limiters.get(usize::from(*l)) {
                // The bucket it counts in now: a renewal may have moved it.
                let Some(bucket) = self.ledger.give_back(*generation, p.bucket) else {
                    continue;
                };
                let limit = &self.policy.limits[usize::from(*l)];
                let key_hash = p.key_hash;
                let p = Permit::from_raw(key_hash, bucket);
                let held = self.tables[limit.zone].release_units(c, p, limit.cost, now);
                if let Some(s) = sample {
                    self.learn(usize::from(*l), key_hash, s, held, now);
                }
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
        sel: Selection<'_>,
    ) -> Result<Outcome, EvalError> {
        match sel {
            Selection::Policy => {
                // A queued request polling again is the same request.
                if ticket.is_none() {
                    self.counters.add_total(|t| &t.requests);
                    if let (Some(limits), true) = (&self.fast_policy, self.fast_on) {
                        if let Some(out) = self.fast(req, limits, now) {
                            return Ok(out);
                        }
                    }
                }
                if !self.policy_reads.path && !self.policy_reads.query {
                    return self.decide(req, b"", b"", now, ticket, sel);
                }
            }
            Selection::Host(limits) => {
                let mut conc = 0;
                let mut bad = limits.len() > MAX_SELECTED;
                // Traits some listed limit has, and that every one has.
                let (mut any, mut all) = (0, TRAIT_FAST);
                for &l in limits {
                    let Some(&t) = self.traits.get(usize::from(l)) else {
                        bad = true;
                        break;
                    };
                    conc += usize::from(t & TRAIT_CONCURRENCY);
                    (any, all) = (any | t, all & t);
                }
                if bad || conc > MAX_PERMITS {
                    if let Some(t) = ticket {
                        self.abandon(t, now);
                    }
                    return Err(EvalError::BadSelection);
                }
                if all & TRAIT_FAST != 0 && ticket.is_none() && self.fast_on {
                    if let Some(out) = self.fast(req, limits, now) {
                        return Ok(out);
                    }
                }
                let path = any & TRAIT_READS_PATH != 0;
                if !path {
                    // No listed key reads the path: the target is not even parsed.
                    return self.decide(req, b"", b"", now, ticket, sel);
                }
            }
        }
        let parts = normalize::split_target(req.target()).map_err(|e| self.bad(e))?;
        let query = parts.query.unwrap_or(b"");
        if matches!(sel, Selection::Policy) && !self.policy_reads.path {
            return self.decide(req, b"", query, now, ticket, sel);
        }
        if normalize::is_normal(parts.path) {
            // Nearly every real path: already what nginx's $uri would be; no copy.
            return self.decide(req, parts.path, query, now, ticket, sel);
        }
        self.run_normalized(req, parts.path, query, now, ticket, sel)
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
        sel: Selection<'_>,
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
        self.decide(req, &buf[..len], query, now, ticket, sel)
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
        sel: Selection<'_>,
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

        let mut hits = ArrayVec::<Hit, MAX_HITS>::new();
        // The request's lane at concurrency limits: its classes', with the same facts.
        let mut lane = Lane::Normal;
        match sel {
            Selection::Policy => {
                let mut facts = self.classes.facts(&prepared);
                if let Some(i) = self.classes.exemption(&prepared, &mut facts) {
                    if overflow(&mut ticket) {
                        return Err(EvalError::TooManyHeaderValues);
                    }
                    self.counters.add_total(|t| &t.exempt);
                    let mut out = Outcome::new();
                    out.exempt = Some(i as u16);
                    if let Some(t) = ticket.take() {
                        self.abandon(t, now);
                    }
                    return Ok(out);
                }
                for (i, limit) in self.policy.limits.iter().enumerate() {
                    if limit.selected
                        || !limit.classes.is_empty()
                            && !limit
                                .classes
                                .iter()
                                .any(|&c| self.classes.class(c, &prepared, &mut facts))
                    {
                        continue;
                    }
                    let Some(key_hash) = self.key_of(i, limit, &prepared) else {
                        continue;
                    };
                    if hits.try_push(Hit { limit: i, key_hash }).is_err() {
                        break;
                    }
                }
                if !self.laned.is_empty() {
                    lane = self.class_lane(&prepared, &mut facts);
                }
            }
            Selection::Host(limits) => {
                // Checked by `run`: every index names a limit, at most MAX_HITS of them.
                for &l in limits {
                    let i = usize::from(l);
                    if let Some(key_hash) = self.key_of(i, &self.policy.limits[i], &prepared) {
                        let _ = hits.try_push(Hit { limit: i, key_hash });
                    }
                }
            }
        }
        if overflow(&mut ticket) {
            return Err(EvalError::TooManyHeaderValues);
        }
        let host = matches!(sel, Selection::Host(_));
        if hits.is_empty() {
            if !host {
                self.counters.add_total(|t| &t.unmatched);
            }
            if let Some(t) = ticket.take() {
                self.abandon(t, now);
            }
            let mut out = Outcome::new();
            out.unmatched = true;
            return Ok(out);
        }
        self.settle(&hits, &prepared, ticket, now, host, lane)
    }

    /// The hash of limit `i`'s key for `req`, or `None` when the limit does not apply: a
    /// `var:` part the host left absent or empty.
    #[inline(always)]
    fn key_of(&self, i: usize, limit: &Limit, req: &PreparedRequest<'_>) -> Option<u64> {
        Some(match self.keys[i] {
            KeyPlan::Fixed(h) => h,
            KeyPlan::Ip {
                v4_prefix,
                v6_prefix,
            } => {
                let mut ip = [0u8; 20];
                let len = ip_key(req.client, v4_prefix, v6_prefix, &mut ip);
                self.key_hash(limit.zone, &ip[..len])
            }
            KeyPlan::Var(index) => match req.view.var(index) {
                Some(v) if !v.is_empty() => self.tables[limit.zone].key_hash(v),
                _ => return None,
            },
            KeyPlan::ClusterVar(index, prefix) => match req.view.var(index) {
                Some(v) if !v.is_empty() => KeySpec::finish_var(prefix, v),
                _ => return None,
            },
            KeyPlan::General => self.general_key(limit, req),
            KeyPlan::GeneralVars if limit.key.vars_set(req) => self.general_key(limit, req),
            KeyPlan::GeneralVars => return None,
        })
    }

    #[inline(always)]
    fn general_key(&self, limit: &Limit, req: &PreparedRequest<'_>) -> u64 {
        match &self.clusters[limit.zone] {
            // A cluster zone's keys are named alike on every node: its own hash.
            Some(c) => limit.key.hash_pieces(req, c.key_hasher()),
            None => limit
                .key
                .hash_pieces(req, self.tables[limit.zone].key_hasher()),
        }
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

    /// Answers a rejection by `limit` of the key `key_hash`, counting it (and, for a limit
    /// with `ban`, striking the key).
    fn reject(
        &self,
        out: &mut Outcome,
        limit: usize,
        key_hash: u64,
        retry_after_ns: u64,
        req: &PreparedRequest<'_>,
        now: u64,
    ) {
        let l = &self.policy.limits[limit];
        let reference = self.key_reference(limit, key_hash);
        self.counters.rejected(limit, &l.key, req, reference, now);
        out.action = Action::Reject;
        out.status = l.status;
        out.retry_after_ns = retry_after_ns;
        out.limit = Some(limit as u16);
        if let Some(ban) = &l.ban {
            self.strike(out, limit, ban, key_hash, req, now);
        }
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
}
