//! The fast path: an evaluation whose limits are all plain local rate limits (GCRA, sliding
//! window or exact log; no dry run, no ban, no `charge_on_status`) keyed by `ip` (no trusted
//! proxies), a `var:` or nothing, for a request in the normal lane.
//!
//! Such a request needs none of [`Engine::decide`]'s machinery: no target, no headers, no
//! classes, no permits. The fast path makes each key straight from the host's view and
//! charges the limits with the same rules as [`Engine::settle`] (in order, a rejection gives
//! back every charge before it, the longest delay wins), so it answers exactly what the
//! general path answers; tests/policy/fast_path.rs checks that against the general path on
//! random policies and traffic. A request no limit applies to it hands to the general path,
//! with nothing charged.

use super::*;

/// Per-limit traits [`Engine::run`] reads for a host's selection, one byte per limit.
pub(super) const TRAIT_CONCURRENCY: u8 = 1;
pub(super) const TRAIT_READS_PATH: u8 = 2;
/// The limit can be charged by the fast path.
pub(super) const TRAIT_FAST: u8 = 4;

impl Engine {
    /// Turns the fast path off, so every request takes the general path: for the tests that
    /// compare the two (answers never differ).
    #[doc(hidden)]
    pub fn without_fast_path(mut self) -> Engine {
        self.fast_on = false;
        self
    }

    /// Whether the fast path takes [`Engine::evaluate`]'s requests (`None`), or
    /// [`Engine::evaluate_selected`]'s for `limits`: for the tests that compare the paths.
    #[doc(hidden)]
    pub fn fast_path_covers(&self, limits: Option<&[u16]>) -> bool {
        let fast = |l: &u16| {
            self.traits
                .get(usize::from(*l))
                .is_some_and(|t| t & TRAIT_FAST != 0)
        };
        match limits {
            None => self.fast_policy.is_some(),
            Some(limits) => limits.len() <= MAX_HITS && limits.iter().all(fast),
        }
    }

    /// Each limit's traits (`TRAIT_*`).
    pub(super) fn limit_traits(&self) -> Vec<u8> {
        let plain_client = self.policy.client_ip.header_name().is_none();
        (self.policy.limits.iter().enumerate())
            .map(|(i, l)| {
                let local_rate = matches!(
                    self.limiters[i],
                    Limiter::Rate(RateAlg::Gcra(_) | RateAlg::Sliding(_) | RateAlg::Log(_))
                );
                let plain_key = match self.keys[i] {
                    KeyPlan::Fixed(_) | KeyPlan::Var(_) => true,
                    KeyPlan::Ip { .. } => plain_client,
                    _ => false,
                };
                let fast = local_rate
                    && plain_key
                    && !l.dry_run
                    && l.ban.is_none()
                    && l.charge_on_status.is_empty();
                let mut t = 0;
                if matches!(self.limiters[i], Limiter::Concurrency(_)) {
                    t |= TRAIT_CONCURRENCY;
                }
                if l.key.parts.contains(&KeyPart::Path) {
                    t |= TRAIT_READS_PATH;
                }
                if fast {
                    t |= TRAIT_FAST;
                }
                t
            })
            .collect()
    }

    /// The limits [`Engine::evaluate`] checks when the fast path can charge all of them: no
    /// exemptions, no classes that name a lane, nothing that reads the target (so a target
    /// the general path would refuse is never let through), every limit that applies by
    /// classes applies to every request and is fast. `None` otherwise.
    pub(super) fn fast_policy(&self, traits: &[u8]) -> Option<Box<[u16]>> {
        let p = &self.policy;
        let reads = self.policy_reads;
        if !p.exemptions.is_empty() || !self.laned.is_empty() || reads.path || reads.query {
            return None;
        }
        let listed: Vec<u16> = (p.limits.iter().enumerate())
            .filter(|(_, l)| !l.selected)
            .map(|(i, _)| i as u16)
            .collect();
        let fast = listed.iter().all(|&i| {
            p.limits[usize::from(i)].classes.is_empty() && traits[usize::from(i)] & TRAIT_FAST != 0
        });
        (fast && !listed.is_empty() && listed.len() <= MAX_HITS).then(|| listed.into())
    }

    /// Evaluates `req` against `limits` (each fast, at most [`MAX_HITS`]) as
    /// [`Engine::settle`] would; `None` when the general path must answer, with nothing
    /// charged.
    #[inline(always)]
    pub(super) fn fast(&self, req: &dyn RequestView, limits: &[u16], now: u64) -> Option<Outcome> {
        // The keys `key_of` would make, read straight from the view: a `PreparedRequest`
        // for `key_of` costs about 65 instructions, 9 % of a minimal request.
        let mut hits = ArrayVec::<Hit, MAX_HITS>::new();
        for &l in limits {
            let limit = usize::from(l);
            let zone = self.policy.limits[limit].zone;
            let key_hash = match self.keys[limit] {
                KeyPlan::Fixed(h) => h,
                KeyPlan::Var(index) => match req.var(index) {
                    Some(v) if !v.is_empty() => self.tables[zone].key_hash(v),
                    _ => continue,
                },
                KeyPlan::Ip {
                    v4_prefix,
                    v6_prefix,
                } => {
                    let mut ip = [0u8; 20];
                    let client = req.peer().map(|p| p.to_canonical());
                    let len = ip_key(client, v4_prefix, v6_prefix, &mut ip);
                    self.tables[zone].key_hash(&ip[..len])
                }
                _ => unreachable!("limit {limit} is not fast"),
            };
            let _ = hits.try_push(Hit { limit, key_hash });
        }
        if hits.is_empty() {
            return None;
        }
        let mut out = Outcome::new();
        // Bit k: hit k delayed the request.
        let mut delayed = 0u32;
        for (k, h) in hits.iter().enumerate() {
            let limit = &self.policy.limits[h.limit];
            let Limiter::Rate(alg) = &self.limiters[h.limit] else {
                unreachable!("limit {} is not fast", h.limit)
            };
            let table = &self.tables[limit.zone];
            let v = alg.check(table, h.key_hash, limit.cost, now);
            self.note_quota(&mut out, h.limit, alg, &v);
            match v.decision {
                Decision::Pass => {}
                Decision::Delay => {
                    delayed |= 1 << k;
                    self.note_delay(&mut out, h.limit, &v);
                }
                Decision::Reject => {
                    self.refund_hits(&hits[..k], now);
                    // As the general path: answered as if this limit had been asked alone,
                    // on the state before this request's own charges (which differs only
                    // when an earlier limit charged this very bucket).
                    let shared = hits[..k].iter().any(|e| {
                        e.key_hash == h.key_hash && self.policy.limits[e.limit].zone == limit.zone
                    });
                    let v = match shared {
                        true => Some(alg.predict(table, h.key_hash, limit.cost, now))
                            .filter(|p| p.decision == Decision::Reject)
                            .unwrap_or(v),
                        false => v,
                    };
                    let headers = HeaderCache::empty();
                    let client = req.peer().map(|p| p.to_canonical());
                    let prepared = PreparedRequest::with_headers(req, b"", b"", client, &headers);
                    let mut out = Outcome::new();
                    self.reject(
                        &mut out,
                        h.limit,
                        h.key_hash,
                        v.retry_after_ns,
                        &prepared,
                        now,
                    );
                    out.excess_milli = self.excess_milli(h.limit, &v);
                    out.quota = Some(self.quota(h.limit, alg, &v));
                    return Some(out);
                }
            }
        }
        for (k, h) in hits.iter().enumerate() {
            if delayed & (1 << k) == 0 {
                self.counters.add_limit(h.limit, |c| &c.passed);
            } else {
                self.counters.delayed(h.limit, now);
            }
        }
        Some(out)
    }

    /// Gives back the charges of `hits` (each charged by a rate limit's check).
    fn refund_hits(&self, hits: &[Hit], now: u64) {
        for h in hits {
            let limit = &self.policy.limits[h.limit];
            if let Limiter::Rate(a) = &self.limiters[h.limit] {
                a.refund(&self.tables[limit.zone], h.key_hash, limit.cost, now);
            }
        }
    }
}
