//! Charging the limits that apply to a request: permits first, then rate limits in order,
//! all-or-nothing (steps 3 to 5 of the module documentation of [`super`]).

use super::*;

impl Engine {
    /// Permits and charges for the limits that apply (`hits`, at least one), all-or-nothing.
    /// With `host` (limits the host selected) a dry-run limit acts as nginx's `*_dry_run`
    /// directives do: its would-be rejection leaves nothing charged and ends the evaluation,
    /// and the longest would-be delay is the one reported.
    #[inline(always)]
    pub(super) fn settle(
        &self,
        hits: &[Hit],
        req: &PreparedRequest<'_>,
        mut ticket: Option<QueueTicket>,
        now: u64,
        host: bool,
        lane: Lane,
    ) -> Result<Outcome, EvalError> {
        if self.any_ban {
            if let Some((limit, left)) = self.banned_hit(hits, now) {
                return Ok(self.refuse_banned(limit, left, ticket, now));
            }
        }
        let mut out = Outcome::new();
        // 3. Concurrency permits.
        let mut pending = [Counted::Pass; MAX_HITS];
        for (k, h) in hits.iter().enumerate() {
            let (limit, Limiter::Concurrency(c)) =
                (&self.policy.limits[h.limit], &self.limiters[h.limit])
            else {
                continue;
            };
            let table = &self.tables[limit.zone];
            let zone = &self.policy.zones[limit.zone];
            let lane = limit.lane.unwrap_or(lane);
            let mine = ticket.as_ref().is_some_and(|t| t.limit as usize == h.limit);
            // A waiter that waited too long in a standing queue is refused (CoDel's rule).
            let dropped = mine
                && ticket.as_ref().is_some_and(|t| {
                    self.drop_waiter(h.limit, h.key_hash, self.waited(t, now), now)
                });
            // A new arrival does not overtake the requests waiting for a slot (the freed slot
            // is theirs), unless it is critical.
            let barred = dropped
                || !mine
                    && limit.queue > 0
                    && lane != Lane::Critical
                    && self.waiting(h.limit, c, h.key_hash, now) > 0;
            let pool = self.clusters[limit.zone].as_deref();
            let acquired = if barred {
                (Verdict::refused(c.max()), None)
            } else if zone.learn.is_none()
                && zone.reserve == 0
                && lane == Lane::Normal
                && pool.is_none()
            {
                table.acquire_units(c, h.key_hash, limit.cost, now)
            } else {
                let mut cap = self.lane_cap(h.limit, c, h.key_hash, lane);
                if let Some(p) = pool {
                    // A cluster pool: no more than this node's share of the key.
                    cap = cap.min(p.pool_cap(h.key_hash, now));
                }
                let got = table.acquire_capped(c, h.key_hash, limit.cost, cap, now);
                if let (Some(p), None) = (pool, &got.1) {
                    p.pool_want(table, h.key_hash, now);
                }
                got
            };
            match acquired {
                (_, Some(p)) => {
                    let generation = self.ledger.take(held(h.limit, false, &p));
                    out.permits.push(h.limit, p, generation);
                    if mine {
                        if let Some(t) = ticket.take() {
                            self.give_up(t, now, true);
                        }
                    }
                }
                (_, None) if limit.dry_run && !host => {
                    pending[k] = Counted::DryRejected;
                    if out.dry_run.is_none() {
                        out.dry_run = Some((h.limit as u16, Action::Reject));
                        out.dry_run_excess_milli = 1000;
                    }
                }
                (_, None) if limit.dry_run => {
                    self.release(std::mem::take(&mut out.permits), now);
                    if let Some(t) = ticket.take() {
                        self.abandon(t, now);
                    }
                    return Ok(self.dry_rejected(h.limit, 1000));
                }
                (_, None) => {
                    self.release(std::mem::take(&mut out.permits), now);
                    // A rate limit that rejects the request decides before a full concurrency
                    // limit does; nothing has been charged yet, so a prediction tells.
                    if let Some(rejected) = self.predicted_rejection(hits, req, now) {
                        if let Some(t) = ticket.take() {
                            self.abandon(t, now);
                        }
                        return Ok(rejected);
                    }
                    if !dropped && (mine || (ticket.is_none() && limit.queue > 0)) {
                        let t = match ticket.take() {
                            // Still waiting: the same place, counted once when it was taken.
                            Some(t) => Some(t),
                            None => {
                                let entered = self
                                    .queue_of(c)
                                    .enter(table, h.key_hash, limit.queue, now)
                                    .map(|permit| QueueTicket {
                                        limit: h.limit as u16,
                                        generation: self.ledger.take(held(h.limit, true, &permit)),
                                        permit,
                                        deadline_ns: now.saturating_add(limit.timeout_ns()),
                                    });
                                if entered.is_some() {
                                    self.counters.add_limit(h.limit, |c| &c.queued);
                                }
                                entered
                            }
                        };
                        if let Some(t) = t {
                            out.action = Action::Queue;
                            out.wait_ns = t.next_wait(now);
                            out.status = limit.status;
                            out.limit = Some(h.limit as u16);
                            out.ticket = Some(t);
                            return Ok(out);
                        }
                    }
                    self.reject(&mut out, h.limit, h.key_hash, 0, req, now);
                    self.shed(h.limit, h.key_hash, lane, now);
                    out.excess_milli = 1000;
                    out.queue_timeout = dropped;
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
        let mut dry_wait = 0;
        let mut deferred = false;
        let any_deferred = self.any_deferred;
        for (k, h) in hits.iter().enumerate() {
            let (limit, Limiter::Rate(alg)) =
                (&self.policy.limits[h.limit], &self.limiters[h.limit])
            else {
                continue;
            };
            let table = &self.tables[limit.zone];
            let v = if !any_deferred || limit.charge_on_status.is_empty() {
                alg.check(table, h.key_hash, limit.cost, now)
            } else {
                pending[k] = Counted::Checked;
                deferred = true;
                self.check_deferred(&mut out, h.limit, alg, h.key_hash, now)
            };
            // The quota only feeds RateLimit headers: skip its divisions when they are off,
            // and when this limit does not have less room left than the tightest so far.
            self.note_quota(&mut out, h.limit, alg, &v);
            match (v.decision, limit.dry_run) {
                (Decision::Pass, _) => {}
                // Critical requests (health checks) are counted but never held up by a rate
                // limit: a delay's charge stands, a rejection charged nothing.
                (Decision::Delay, false) if lane == Lane::Critical => {}
                (Decision::Reject, false) if lane == Lane::Critical => {
                    pending[k] = Counted::Spared;
                }
                (Decision::Delay, false) => {
                    pending[k] = Counted::Delayed;
                    self.note_delay(&mut out, h.limit, &v);
                }
                (Decision::Delay, true) => {
                    pending[k] = Counted::DryDelayed;
                    if out.dry_run.is_none() || host && v.wait_ns > dry_wait {
                        dry_wait = v.wait_ns;
                        out.dry_run = Some((h.limit as u16, Action::Delay));
                        out.dry_run_excess_milli = self.excess_milli(h.limit, &v);
                    }
                }
                (Decision::Reject, true) if !host => {
                    pending[k] = Counted::DryRejected;
                    out.dry_run = Some((h.limit as u16, Action::Reject));
                    out.dry_run_excess_milli = self.excess_milli(h.limit, &v);
                }
                (Decision::Reject, dry_run) => {
                    // Refund only what was charged: a dry-run rejection charged nothing.
                    for (e, counted) in hits[..k].iter().zip(&pending[..k]) {
                        if let (l, Limiter::Rate(a), false) = (
                            &self.policy.limits[e.limit],
                            &self.limiters[e.limit],
                            matches!(
                                counted,
                                Counted::DryRejected | Counted::Checked | Counted::Spared
                            ),
                        ) {
                            a.refund(&self.tables[l.zone], e.key_hash, l.cost, now);
                        }
                    }
                    self.release(std::mem::take(&mut out.permits), now);
                    out.charges = Charges::default();
                    // The request is answered as if this limit had been asked alone, on the
                    // states before this request: the same state unless an earlier limit
                    // charged this very bucket (two limits on one zone with one key). Then a
                    // rejection on the earlier state is that answer; a pass there means the
                    // earlier charge is what rejects, and this verdict stands.
                    let shared = hits[..k].iter().zip(&pending[..k]).any(|(e, counted)| {
                        e.key_hash == h.key_hash
                            && self.policy.limits[e.limit].zone == limit.zone
                            && !matches!(
                                counted,
                                Counted::DryRejected | Counted::Checked | Counted::Spared
                            )
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
                    if dry_run {
                        return Ok(self.dry_rejected(h.limit, self.excess_milli(h.limit, &v)));
                    }
                    out.action = Action::Pass;
                    out.wait_ns = 0;
                    self.reject(&mut out, h.limit, h.key_hash, v.retry_after_ns, req, now);
                    out.excess_milli = self.excess_milli(h.limit, &v);
                    out.quota = Some(self.quota(h.limit, alg, &v));
                    return Ok(out);
                }
            }
        }
        if deferred && !out.charges.is_empty() {
            out.charges.generation = self.ledger.take(Held::default());
            // No free entry in reach (tens of thousands of responses pending): a set that
            // could not be told from a forged one is not handed out, so nothing is charged.
            if out.charges.generation == UNTRACKED {
                out.charges = Charges::default();
            }
        }
        for (k, h) in hits.iter().enumerate() {
            match pending[k] {
                Counted::Pass | Counted::Checked | Counted::Spared => {
                    self.counters.add_limit(h.limit, |c| &c.passed)
                }
                Counted::Delayed => self.counters.delayed(h.limit, now),
                Counted::DryDelayed => self.counters.add_limit(h.limit, |c| &c.dry_run_delayed),
                Counted::DryRejected => self.counters.add_limit(h.limit, |c| &c.dry_run_rejected),
            }
        }
        Ok(out)
    }

    /// The quota of limit `limit`'s verdict `v`, kept when RateLimit headers are on and it
    /// has less room left than the tightest so far (its divisions are skipped otherwise).
    #[inline(always)]
    pub(super) fn note_quota(&self, out: &mut Outcome, limit: usize, alg: &RateAlg, v: &Verdict) {
        if self.policy.emit_headers
            && !self.policy.limits[limit].dry_run
            && out
                .quota
                .is_none_or(|best| v.remaining.below(best.remaining))
        {
            out.quota = Some(self.quota(limit, alg, v));
        }
    }

    /// An enforced delay by limit `limit`: the longest one decides.
    #[inline(always)]
    pub(super) fn note_delay(&self, out: &mut Outcome, limit: usize, v: &Verdict) {
        if v.wait_ns > out.wait_ns {
            out.wait_ns = v.wait_ns;
            out.action = Action::Delay;
            out.limit = Some(limit as u16);
            out.excess_milli = self.excess_milli(limit, v);
        }
    }

    /// A host-selected dry-run limit's would-be rejection, with everything given back: the
    /// request passes with the rejection reported.
    #[inline(never)]
    fn dry_rejected(&self, limit: usize, excess_milli: u64) -> Outcome {
        self.counters.add_limit(limit, |c| &c.dry_run_rejected);
        let mut out = Outcome::new();
        out.dry_run = Some((limit as u16, Action::Reject));
        out.dry_run_excess_milli = excess_milli;
        out
    }

    /// nginx's excess of limit `limit` for its verdict `v`, in thousandths of a request (see
    /// [`Outcome::excess_milli`]).
    pub(super) fn excess_milli(&self, limit: usize, v: &Verdict) -> u64 {
        let rejected = v.decision == Decision::Reject;
        let Limiter::Rate(RateAlg::Gcra(g)) = &self.limiters[limit] else {
            return if rejected { 1000 } else { 0 };
        };
        let t = g.interval_ns().max(1);
        let ahead = if rejected {
            // (burst + 1) intervals fit in u64 (checked when the policy is compiled).
            (g.burst() * t).saturating_add(v.retry_after_ns)
        } else {
            v.reset_ns.saturating_sub(t)
        };
        ahead / t * 1000 + ahead % t * 1000 / t
    }

    /// The first enforced rate limit among `hits` that would reject the request now, as the
    /// outcome to answer (nothing charged, nothing else reported); `None` if none would.
    #[inline(never)]
    fn predicted_rejection(
        &self,
        hits: &[Hit],
        req: &PreparedRequest<'_>,
        now: u64,
    ) -> Option<Outcome> {
        for h in hits {
            let (limit, Limiter::Rate(alg)) =
                (&self.policy.limits[h.limit], &self.limiters[h.limit])
            else {
                continue;
            };
            let v = alg.predict(&self.tables[limit.zone], h.key_hash, limit.cost, now);
            if v.decision == Decision::Reject && !limit.dry_run {
                let mut out = Outcome::new();
                self.reject(&mut out, h.limit, h.key_hash, v.retry_after_ns, req, now);
                out.excess_milli = self.excess_milli(h.limit, &v);
                out.quota = Some(self.quota(h.limit, alg, &v));
                return Some(out);
            }
        }
        None
    }
}

/// How a limit that applied is counted once the request is decided.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    Pass,
    /// A `charge_on_status` limit's check passed: counted as passed, charged (or not) after
    /// the response, never refunded.
    Checked,
    Delayed,
    DryDelayed,
    DryRejected,
    /// A critical request a rate limit would have refused: passed, charged nothing.
    Spared,
}
