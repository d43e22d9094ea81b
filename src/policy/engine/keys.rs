//! One key's state in one limit, for operators: read it, forget it, lift its ban
//! (`policy::keyops` turns these into the status endpoint's key operations). Nothing here
//! runs on the request path.
//!
//! The key is given as a request ([`PreparedRequest`]) whose parts make it, so its hash is the
//! one evaluation computes ([`Engine::key_of`]), whatever the zone hashes keys with.

use super::bans::ban_hash;
use super::*;

/// One key's state in one limit at one instant ([`Engine::key_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyState {
    /// `gcra`, `sliding_window`, `sliding_log` or `concurrency`.
    pub algorithm: &'static str,
    /// Quota units a request could still take now (concurrency: `max` less those in flight).
    pub remaining: u64,
    /// When a request of the limit's cost would be refused or delayed now: how long until it
    /// would not be (rate limits; a ban's time left when longer). 0 when it would pass, and
    /// for a full concurrency limit (which cannot tell: see `in_flight`).
    pub retry_after_ns: u64,
    /// Time left of the key's ban, when it is banned.
    pub ban_left_ns: Option<u64>,
    /// Concurrency limits: the requests (cost units) in flight, and waiting in its queue.
    pub in_flight: Option<u64>,
    pub queued: Option<u64>,
}

impl KeyState {
    /// Whether a request of this key would pass now.
    pub fn passes(&self) -> bool {
        self.retry_after_ns == 0 && self.ban_left_ns.is_none() && self.remaining > 0
    }
}

impl Engine {
    /// The index of the limit named `name`.
    pub fn limit_index(&self, name: &str) -> Option<usize> {
        self.policy.limits.iter().position(|l| l.name == name)
    }

    /// The hash limit `limit` keys `req` by (as evaluation computes it), or `None` when the
    /// limit does not apply to it (an absent or empty `var:` part) or does not exist.
    pub(crate) fn key_hash_of(&self, limit: usize, req: &PreparedRequest<'_>) -> Option<u64> {
        let l = self.policy.limits.get(limit)?;
        self.key_of(limit, l, req)
    }

    /// Key `key_hash`'s state in limit `limit` (an index that exists) at `now`, read without
    /// writing anything (the limiters' predictions).
    pub(crate) fn key_state(&self, limit: usize, key_hash: u64, now: u64) -> KeyState {
        let l = &self.policy.limits[limit];
        let table = &self.tables[l.zone];
        let rel = now.saturating_sub(table.clock_base());
        let ban_left_ns = l.ban.as_ref().and_then(|b| {
            b.left(
                table
                    .peek(ban_hash(key_hash, self.ban_ids[limit]))
                    .unwrap_or(0),
                rel,
            )
        });
        let mut st = match &self.limiters[limit] {
            Limiter::Concurrency(c) => {
                let held = c.in_flight(table.peek(key_hash).unwrap_or(0), rel);
                let queued = c.in_flight(table.peek(key_hash ^ QUEUE_SALT).unwrap_or(0), rel);
                KeyState {
                    algorithm: "concurrency",
                    remaining: c.max().saturating_sub(held),
                    retry_after_ns: 0,
                    ban_left_ns: None,
                    in_flight: Some(held),
                    queued: Some(queued),
                }
            }
            Limiter::Rate(alg) => {
                let v = alg.predict(table, key_hash, l.cost, now);
                let (remaining, retry_after_ns) = match v.decision {
                    Decision::Pass => (v.remaining.get().saturating_add(l.cost).min(v.limit), 0),
                    Decision::Delay => (0, v.wait_ns.max(1)),
                    Decision::Reject => (0, v.retry_after_ns.max(1)),
                };
                KeyState {
                    algorithm: match alg {
                        RateAlg::Gcra(_) | RateAlg::ClusterGcra(..) => "gcra",
                        RateAlg::Sliding(_) | RateAlg::Cluster(_) => "sliding_window",
                        RateAlg::Log(_) => "sliding_log",
                    },
                    remaining,
                    retry_after_ns,
                    ban_left_ns: None,
                    in_flight: None,
                    queued: None,
                }
            }
        };
        if let Some(left) = ban_left_ns {
            st.ban_left_ns = Some(left);
            st.retry_after_ns = st.retry_after_ns.max(left);
        }
        st
    }

    /// Forgets key `key_hash`'s state in limit `limit` as if the key had never been seen: its
    /// rate state (a cluster zone: this node's count; the other nodes' counts stay until they
    /// leave the window), or its concurrency count (requests in flight keep running, and
    /// when they end their releases lower the count of those admitted after the reset, never
    /// below zero: a reset lets up to `max` more in until their next lease renewal, from which
    /// on they count again), and the strikes counted
    /// toward a ban. A ban in
    /// force stays ([`Engine::unban_key`] lifts it). Whether anything was recorded.
    pub(crate) fn reset_key(&self, limit: usize, key_hash: u64, now: u64) -> bool {
        let l = &self.policy.limits[limit];
        let table = &self.tables[l.zone];
        let forget = |h: u64| table.update(h, now, |s, _| s, |s, _| (0, s != 0), false);
        let mut changed = match &self.limiters[limit] {
            Limiter::Rate(RateAlg::Log(log)) => log.forget(key_hash, now),
            _ => forget(key_hash),
        };
        if let Some(ban) = &l.ban {
            changed |= table.update(
                ban_hash(key_hash, self.ban_ids[limit]),
                now,
                |s, n| ban.residual(s, n),
                |s, n| match ban.left(s, n) {
                    Some(_) => (s, false),
                    None => (0, s != 0),
                },
                false,
            );
        }
        changed
    }

    /// Lifts key `key_hash`'s ban in limit `limit` (and the strikes toward the next one) and
    /// takes it off the status's list of active bans. Whether a ban was in force or listed.
    pub(crate) fn unban_key(&self, limit: usize, key_hash: u64, now: u64) -> bool {
        let l = &self.policy.limits[limit];
        let (Some(ban), id) = (&l.ban, self.ban_ids[limit]) else {
            return false;
        };
        let hash = ban_hash(key_hash, id);
        let was = self.tables[l.zone].update(
            hash,
            now,
            |s, n| ban.residual(s, n),
            |s, n| (0, ban.left(s, n).is_some()),
            false,
        );
        let freed = self.counters.remove_ban(limit, hash, now);
        was || freed > 0
    }
}
