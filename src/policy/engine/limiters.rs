//! The limiter of each limit over its zone's table: a rate algorithm, or a concurrency counter with its wait queue.

use super::*;

/// The limiter of one limit, over its zone's table.
pub(super) enum Limiter {
    Rate(RateAlg),
    Concurrency(Concurrency),
}

pub(super) enum RateAlg {
    Gcra(Gcra),
    Sliding(SlidingWindow),
    /// A `scope = "cluster"` sliding zone: local counts plus the other nodes' (src/cluster).
    Cluster(Arc<ClusterZone>),
    /// A `scope = "cluster"` GCRA zone: the limit's GCRA and its share while Redis is away,
    /// over states the cluster's TAT is merged into (src/cluster/gcra.rs). Boxed: the enum
    /// stays the size of a local GCRA's, which every evaluation matches on.
    ClusterGcra(Arc<ClusterZone>, Box<[Gcra; 2]>),
    /// An exact sliding log (its own table, in the zone's region; cost is always 1).
    Log(Arc<LogTable>),
}

impl RateAlg {
    #[inline]
    pub(super) fn predict(&self, t: &Table, h: u64, cost: u64, now: u64) -> Verdict {
        match self {
            RateAlg::Gcra(a) => t.predict(a, h, cost, now),
            RateAlg::Sliding(a) => t.predict(a, h, cost, now),
            RateAlg::Cluster(c) => c.predict(t, h, cost, now),
            RateAlg::ClusterGcra(c, g) => c.gcra_predict(t, [&g[0], &g[1]], h, cost, now),
            RateAlg::Log(l) => l.predict(h, now),
        }
    }
    #[inline]
    pub(super) fn check(&self, t: &Table, h: u64, cost: u64, now: u64) -> Verdict {
        match self {
            RateAlg::Gcra(a) => t.check(a, h, cost, now),
            RateAlg::Sliding(a) => t.check(a, h, cost, now),
            RateAlg::Cluster(c) => c.check(t, h, cost, now),
            RateAlg::ClusterGcra(c, g) => c.gcra_check(t, [&g[0], &g[1]], h, cost, now),
            RateAlg::Log(l) => l.check(h, now),
        }
    }
    #[inline]
    pub(super) fn refund(&self, t: &Table, h: u64, cost: u64, now: u64) {
        match self {
            RateAlg::Gcra(a) => t.refund(a, h, cost, now),
            RateAlg::Sliding(a) => t.refund(a, h, cost, now),
            RateAlg::Cluster(c) => c.refund(t, h, cost, now),
            RateAlg::ClusterGcra(c, g) => c.gcra_refund(t, &g[0], h, cost, now),
            RateAlg::Log(l) => l.refund(h, now),
        }
    }
    /// `w` of `RateLimit-Policy`: the time a full quota takes to refill.
    #[inline]
    pub(super) fn window_s(&self) -> u64 {
        match self {
            RateAlg::Gcra(g) => ((g.burst() + 1) * g.interval_ns()).div_ceil(NS_PER_SEC),
            RateAlg::ClusterGcra(_, g) => {
                ((g[0].burst() + 1) * g[0].interval_ns()).div_ceil(NS_PER_SEC)
            }
            RateAlg::Sliding(s) => s.window_ns().div_ceil(NS_PER_SEC),
            RateAlg::Cluster(c) => c.window().map_or(0, |w| w.window_ns().div_ceil(NS_PER_SEC)),
            RateAlg::Log(l) => l.log().window_ns().div_ceil(NS_PER_SEC),
        }
    }
}

/// A concurrency limit's wait queue: a second leased counter in the same table, under the
/// salted key, capped at the limit's `queue`.
pub(super) struct QueueLimiter {
    pub(super) lease_ns: u64,
}

impl QueueLimiter {
    #[inline]
    pub(super) fn enter(
        &self,
        table: &Table,
        key_hash: u64,
        queue: u64,
        now: u64,
    ) -> Option<Permit> {
        let c = Concurrency::new(queue.min(crate::limiter::MAX_COUNT), self.lease_ns).ok()?;
        table.acquire(&c, key_hash ^ QUEUE_SALT, now).1
    }

    #[inline]
    pub(super) fn release_in(&self, table: &Table, permit: Permit, now: u64) {
        // Release needs no max; any valid one does.
        if let Ok(c) = Concurrency::new(1, self.lease_ns) {
            table.release(&c, permit, now);
        }
    }
}
