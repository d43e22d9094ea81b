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
use super::config::{self, CompiledPolicy, Limit};
use super::counters::{fingerprint, Counters};
pub use super::counters::{EngineCounts, LimitCounts};
use super::key::KeyPart;
use super::key::{ip_key, KEY_BUF_LEN};
use super::ledger::Ledger;
use super::matching::classset::ClassSet;
use super::matching::normalize::{self, UriError};
use super::request::{HeaderCache, HeaderPlan, OwnedRequest, PreparedRequest, RequestView};
use crate::cluster::{ClusterShared, ClusterZone};
use crate::limiter::{
    concurrency::DEFAULT_LEASE_NS, Concurrency, Decision, Gcra, Permit, SlidingWindow, Verdict,
    NS_PER_SEC,
};
use crate::table::{LogTable, SlidingLog, Table};

mod outcome;
pub use outcome::*;
mod limiters;
use limiters::*;
mod build;
pub use build::*;
mod headers;

/// Concurrency limits one request can hold at once.
pub const MAX_PERMITS: usize = 4;
/// Targets up to this length are normalized in a stack buffer; longer ones use the heap.
const STACK_TARGET: usize = 2048;
/// Salt that turns a concurrency key into the key of its wait queue (same table).
const QUEUE_SALT: u64 = 0x5157_4555_4520_5131;

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
    /// The permits and queue places handed out and not yet given back.
    ledger: Ledger,
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
}

#[derive(Clone, Copy)]
enum Counted {
    Pass,
    Delayed,
    DryDelayed,
    DryRejected,
}
