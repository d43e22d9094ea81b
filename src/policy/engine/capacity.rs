//! Capacity of concurrency limits: how many slots a request's lane may fill (learned or
//! fixed limit, `reserve`), latency samples given back with permits, and the saturation
//! figures (`policy::saturation`). The queue's order is `standing`'s.
//!
//! A key's learned limit and its latency window are two more
//! words in the zone's table, under salted keys (as its queue and bans are): shared by every
//! process on the zone, kept across reloads that keep the zone, and updated by
//! compare-exchange. A zone so full that it evicts one of them restarts it (the learned limit
//! from [`crate::limiter::adaptive::INITIAL_LIMIT`]).

use super::*;
use crate::limiter::adaptive::Adaptive;

/// Salts that turn a concurrency key into the keys of its learned limit and its latency
/// window (same table).
pub(super) const CONTROL_SALT: u64 = 0x4c45_4152_4e5f_4c49;
const SAMPLE_SALT: u64 = 0x5341_4d50_4c45_5357;

/// A completed request's backend time, given back with its permits
/// ([`Engine::release_sampled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// How long the backend took (nginx: the upstream's response time; Caddy: reverse_proxy's
    /// upstream duration; tower: the inner service's future), ns.
    pub latency_ns: u64,
    /// The response status (0: none). A 5xx answered faster than the no-load latency is a
    /// failure, not a measure of the backend, and is left out (as is any answer four times
    /// faster than it).
    pub status: u16,
}

impl Engine {
    /// The learned-limit controller (or, for a fixed limit, a sampler pinned at its max) of
    /// limit `l`, when it is a concurrency limit.
    pub(super) fn samplers(policy: &CompiledPolicy, limiters: &[Limiter]) -> Vec<Option<Adaptive>> {
        (policy.limits.iter().zip(limiters))
            .map(|(l, lim)| match lim {
                Limiter::Concurrency(c) => policy.zones[l.zone]
                    .learn
                    .or_else(|| Adaptive::new(c.max(), c.max()).ok()),
                Limiter::Rate(_) => None,
            })
            .collect()
    }

    /// The most important lane among the classes `req` matches that name one.
    #[inline(never)]
    pub(super) fn class_lane(
        &self,
        req: &PreparedRequest<'_>,
        facts: &mut crate::policy::matching::classset::Facts<'_>,
    ) -> Lane {
        let mut named: Option<Lane> = None;
        for &(c, l) in self.laned.iter() {
            if named.is_none_or(|n| l > n) && self.classes.class(c, req, facts) {
                named = Some(l);
            }
        }
        named.unwrap_or_default()
    }

    /// The slots a request of `lane` may fill at limit `l` for `key_hash`: the learned limit
    /// (or fixed max) less what its lane leaves to others.
    #[inline]
    pub(super) fn lane_cap(&self, l: usize, c: &Concurrency, key_hash: u64, lane: Lane) -> u64 {
        let limit = &self.policy.limits[l];
        let zone = &self.policy.zones[limit.zone];
        let enforced = match &zone.learn {
            // A learned limit does not hold critical requests back: a cut below the requests
            // already in flight would refuse health checks until they drain. Its bounds do.
            Some(a) if lane == Lane::Critical => return a.max(),
            Some(a) => a.limit(
                self.tables[limit.zone]
                    .peek(key_hash ^ CONTROL_SALT)
                    .unwrap_or(0),
            ),
            None => c.max(),
        };
        lane.cap(enforced, zone.reserve)
    }

    /// How many wait in limit `l`'s queue for `key_hash`.
    #[inline]
    pub(super) fn waiting(&self, l: usize, c: &Concurrency, key_hash: u64, now: u64) -> u64 {
        let table = &self.tables[self.policy.limits[l].zone];
        let state = table.peek(key_hash ^ QUEUE_SALT).unwrap_or(0);
        c.in_flight(state, now.saturating_sub(table.clock_base()))
    }

    /// Limit `l` refused a request of `lane` (full, its queue full, or its wait over).
    #[inline]
    pub(super) fn shed(&self, l: usize, key_hash: u64, lane: Lane, now: u64) {
        self.counters.saturation().shed(l, lane);
        let limit = &self.policy.limits[l];
        if let Some(a) = &self.policy.zones[limit.zone].learn {
            // A limit nothing has updated for a while grows back (a backend whose answers
            // stopped coming: nothing completes to teach it).
            let table = &self.tables[limit.zone];
            if let Some(c) = table.peek(key_hash ^ CONTROL_SALT) {
                if a.refused(c, now.saturating_sub(table.clock_base()))
                    .is_some()
                {
                    table.update(
                        key_hash ^ CONTROL_SALT,
                        now,
                        |_, _| 1,
                        |c, now| (a.refused(c, now).unwrap_or(c), ()),
                        false,
                    );
                }
            }
        }
    }

    /// Feeds a completed request's backend time to limit `l`'s window for `key_hash`
    /// (`in_flight`: permits held before this one went back). Closing a window updates the
    /// learned limit and the saturation figures.
    #[inline(never)]
    pub(super) fn learn(&self, l: usize, key_hash: u64, sample: Sample, in_flight: u64, now: u64) {
        let Some(a) = &self.samplers[l] else {
            return;
        };
        let limit = &self.policy.limits[l];
        let table = &self.tables[limit.zone];
        let control = table.peek(key_hash ^ CONTROL_SALT).unwrap_or(0);
        let noload = a.noload_ns(control);
        // A 5xx faster than the no-load latency is a failure, not a measure of the backend;
        // an answer four times faster (a health check, a cached page) says nothing of how
        // long a slot is held either.
        if sample.latency_ns < noload / 4 || sample.status >= 500 && sample.latency_ns < noload {
            return;
        }
        // The limit holds requests back once the smallest lane's share is in use.
        let binding = Lane::Sheddable.cap(a.limit(control), self.policy.zones[limit.zone].reserve);
        let span = a.span_ns(control);
        let closed = table.update(
            key_hash ^ SAMPLE_SALT,
            now,
            |_, _| 1,
            |s, now| a.sample(s, now, sample.latency_ns, in_flight, binding, span),
            true,
        );
        let Some(window) = closed else {
            return;
        };
        let done = table.update(
            key_hash ^ CONTROL_SALT,
            now,
            |_, _| 1,
            |c, now| {
                let (next, closed) = a.close(c, window, now);
                (next, closed)
            },
            true,
        );
        let sat = self.counters.saturation();
        sat.closed(l, done.limit, done.noload_ns, done.mean_ns);
        if let Limiter::Concurrency(c) = &self.limiters[l] {
            let queued = self.waiting(l, c, key_hash, now);
            sat.seen(l, in_flight.saturating_sub(limit.cost), queued);
        }
    }

    /// Limit `l`'s saturation figures at `now`: read live when its key is one for every
    /// request, else as the key that last closed a latency window left them.
    pub fn saturation(&self, l: usize, now: u64) -> Option<crate::policy::saturation::Saturation> {
        let Limiter::Concurrency(c) = self.limiters.get(l)? else {
            return None;
        };
        let limit = &self.policy.limits[l];
        let zone = &self.policy.zones[limit.zone];
        let mut s = self.counters.saturation().read(l);
        s.auto = zone.learn.is_some();
        if let KeyPlan::Fixed(h) = self.keys[l] {
            let table = &self.tables[limit.zone];
            let rel = now.saturating_sub(table.clock_base());
            s.in_flight = c.in_flight(table.peek(h).unwrap_or(0), rel);
            s.queued = self.waiting(l, c, h, now);
            if let Some(a) = &zone.learn {
                let control = table.peek(h ^ CONTROL_SALT).unwrap_or(0);
                s.limit = a.limit(control);
                s.noload_ns = a.noload_ns(control);
            }
        }
        if !s.auto || s.limit == 0 {
            s.limit = match &zone.learn {
                Some(a) => a.limit(0),
                None => c.max(),
            };
        }
        Some(s)
    }
}
