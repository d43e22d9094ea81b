//! Keeping held permits counted: the process that holds concurrency permits and queue places
//! renews their leases in one sweep over its ledger ([`Engine::renew_held`]), which hosts run
//! on a timer ([`Engine::renew_interval_ns`]). A process that dies renews nothing, so its
//! permits still expire within two leases.

use super::*;

/// A ledger tag's queue bit (a place in a concurrency limit's queue, not a permit).
const QUEUE_TAG: u32 = 1 << 31;

/// What the ledger records to renew a permit (`queue`: a queue place) of limit `limit`.
#[inline(always)]
pub(super) fn held(limit: usize, queue: bool, p: &Permit) -> Held {
    Held {
        tag: (limit as u32 + 1) | if queue { QUEUE_TAG } else { 0 },
        key_hash: p.key_hash,
        bucket: p.bucket,
    }
}

impl Engine {
    /// Renews the lease of every concurrency permit and queue place this process holds whose
    /// bucket is the previous one (a fresh lease, in the current bucket), so that a request
    /// counts for as long as it is held. Call it at least once per lease, from any thread
    /// (every [`Engine::renew_interval_ns`]); permits released meanwhile are released in the
    /// bucket they were moved to. Work: a scan of the ledger (65,536 loads) plus one table
    /// update per permit held for more than a lease. Returns how many permits moved.
    pub fn renew_held(&self, now: u64) -> usize {
        self.ledger.renew_each(
            |h| match self.leased(h) {
                Some((table, c, units)) => {
                    let p = Permit::from_raw(h.key_hash, h.bucket);
                    table.renew_units(&c, p, units, now).into_raw().1
                }
                None => h.bucket,
            },
            |h| {
                if let Some((table, c, units)) = self.leased(h) {
                    table.release_units(&c, Permit::from_raw(h.key_hash, h.bucket), units, now);
                }
            },
        )
    }

    /// How often hosts call [`Engine::renew_held`]: a quarter of the shortest lease of the
    /// policy's concurrency limits (so a late or skipped tick still renews in time); `None`
    /// when it has none.
    pub fn renew_interval_ns(&self) -> Option<u64> {
        self.limiters
            .iter()
            .filter_map(|l| match l {
                Limiter::Concurrency(c) => Some(c.lease_ns() / 4),
                Limiter::Rate(_) => None,
            })
            .min()
    }

    /// The table, counter and units a ledger record's permit is counted with.
    fn leased(&self, h: Held) -> Option<(&Table, Concurrency, u64)> {
        let l = usize::try_from((h.tag & !QUEUE_TAG).checked_sub(1)?).ok()?;
        let Some(Limiter::Concurrency(c)) = self.limiters.get(l) else {
            return None;
        };
        let limit = &self.policy.limits[l];
        let table = &self.tables[limit.zone];
        if h.tag & QUEUE_TAG != 0 {
            // A queue place is one unit; its count needs no max to move or go.
            Some((table, Concurrency::new(1, c.lease_ns()).ok()?, 1))
        } else {
            Some((table, *c, limit.cost))
        }
    }
}
