//! Cluster concurrency pools: `algorithm = "concurrency"` with `scope = "cluster"`. Each node
//! admits a key's requests against a *share* of the zone's `max` leased to it through Redis.
//!
//! * Every node may hold [`FLOOR`] unit per key without asking (a key's first request is never
//!   refused for want of a grant); the allocator sets aside one floor for each of
//!   `max(expected_nodes, registered nodes)`, so floors and grants together never exceed `max`
//!   while Redis is healthy and no more nodes share the zone than `expected_nodes`.
//! * Beyond its floor a node admits what Redis granted it for the key (its *extra*). The syncer
//!   reports each key's demand (in flight + queued + refused since the last sync), in flight and the extra it uses, and one
//!   Lua script per key ([`ALLOCATE`], atomic in Redis) grants a fair share: water-filling over
//!   the nodes' demands (an equal share first, then what the satisfied ones leave), plus an
//!   equal part of what nobody wants as headroom, never above what the others leave. A grant
//!   below what the node has in flight revokes nothing: it stops new admissions until enough
//!   requests finished, and Redis keeps counting what is in flight.
//! * Shrinking takes effect for the others only once the node reports it: Redis counts the
//!   largest of the extra the node uses, the new one and what it has in flight. So the others'
//!   grants never count on room the node may still fill.
//! * A grant is a lease of [`Pool::grant_lease_ns`]: the node uses it until then even while
//!   Redis is away, then falls back to `max ÷ expected_nodes`. Redis forgets a node's entry at
//!   the same time (measured from later, so never earlier): a killed node's share returns.
//! * A node with no demand for a key reports it once more and then holds nothing for it.
//!
//! The grants live in the zone's *remote table* (key hash → [`entry`]), read lock-free by
//! requests; only the syncer writes leases, requests only mark keys they need more for.

use std::sync::atomic::Ordering::Relaxed;

use super::ClusterZone;
use crate::limiter::Concurrency;
use crate::table::Table;

/// Units each node holds per key without a grant.
pub const FLOOR: u64 = 1;

/// Salt that turns a pool key into the key of its refusals since the last sync (zone table).
const REFUSED_SALT: u64 = 0x5245_4655_5345_4421;

/// A cluster pool's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool {
    /// The zone's permits (`max` cluster-wide, the permits' own lease).
    pub permits: Concurrency,
    /// What one node admits per key once its grant expired while Redis is away.
    pub fallback: u64,
    /// How long a grant lasts without a successful sync.
    pub grant_lease_ns: u64,
    /// `expected_nodes`: the floors set aside.
    pub expected: u64,
}

impl Pool {
    /// A pool of `permits.max()` over `expected` nodes syncing every `interval_ns`.
    pub fn new(permits: Concurrency, expected: u64, interval_ns: u64) -> Pool {
        Pool {
            permits,
            fallback: (permits.max() / expected.max(1)).max(FLOOR),
            grant_lease_ns: (10 * interval_ns).max(crate::limiter::NS_PER_SEC),
            expected,
        }
    }
}

// A grant entry: `extra : 24 | expiry : 40`, expiry in units of 2^20 ns of CLOCK_MONOTONIC.
const EXTRA_BITS: u32 = 24;
const EXTRA_MASK: u64 = (1 << EXTRA_BITS) - 1;
const UNIT_SHIFT: u32 = 20;
/// A key this node needs more than its floor for and holds no entry for: the syncer asks.
pub(super) const WANTED: u64 = 1 << EXTRA_BITS;

/// The entry of a grant of `extra` units beyond the floor, valid before `expiry_ns` (rounded
/// down: the node stops using it a little early, never late).
pub(super) fn entry(extra: u64, expiry_ns: u64) -> u64 {
    extra.min(EXTRA_MASK) | ((expiry_ns >> UNIT_SHIFT).max(2) << EXTRA_BITS)
}

fn extra(e: u64) -> u64 {
    e & EXTRA_MASK
}

fn expiry_ns(e: u64) -> u64 {
    (e >> EXTRA_BITS) << UNIT_SHIFT
}

/// The extra units `e` grants at `now` (0 once expired).
pub(super) fn granted(e: u64, now: u64) -> Option<u64> {
    (e >> EXTRA_BITS > 1 && expiry_ns(e) > now).then(|| extra(e))
}

/// How much an entry matters when the table needs room: a live grant most, an expired or
/// wanted one (still to report) a little.
fn residual(e: u64, now: u64) -> u64 {
    match granted(e, now) {
        Some(x) => 2 + x,
        None => u64::from(e != 0),
    }
}

impl ClusterZone {
    /// The units this node may hold for `key_hash` at `now` (CLOCK_MONOTONIC ns): its floor
    /// plus its grant; the floor alone for a key it holds no grant for while syncing (or
    /// before its first sync); `max ÷ expected_nodes` once a grant ran out with Redis away.
    /// Lock-free, allocation-free, no I/O. Out of line (as [`ClusterZone::pool_want`]): the
    /// engine's permit step is inlined into every evaluation, and a cluster pool's code in it
    /// cost local zones' requests too.
    #[inline(never)]
    pub fn pool_cap(&self, key_hash: u64, now: u64) -> u64 {
        let Some(p) = self.pool_params() else {
            return u64::MAX;
        };
        let e = self.remote.peek(key_hash).unwrap_or(0);
        if let Some(x) = granted(e, now) {
            return FLOOR + x;
        }
        let never = self.stats.last_ok_ns.load(Relaxed) == 0;
        if self.healthy(now) || never && now.saturating_sub(self.born) <= self.stale_after {
            FLOOR
        } else {
            self.stats.fallback_decisions.fetch_add(1, Relaxed);
            p.fallback
        }
    }

    /// Notes that a request for `key_hash` found no room (`local`: the zone's table): the
    /// refusal counts as demand at the next sync, which asks Redis for a grant also for a key
    /// this node holds none for yet.
    #[inline(never)]
    pub fn pool_want(&self, local: &Table, key_hash: u64, now: u64) {
        if self.pool_params().is_none() {
            return;
        }
        local.update(
            key_hash ^ REFUSED_SALT,
            now,
            |n, _| n,
            |n, _| (n.saturating_add(1), ()),
            true,
        );
        if self.remote.peek(key_hash).unwrap_or(0) == 0 {
            self.remote.update(
                key_hash,
                now,
                residual,
                |e, _| (if e == 0 { WANTED } else { e }, ()),
                true,
            );
        }
    }

    /// Refusals of `key_hash` since the last call (the syncer's, which reports them).
    pub(super) fn pool_refused(&self, local: &Table, key_hash: u64, now: u64) -> u64 {
        local.update(key_hash ^ REFUSED_SALT, now, |n, _| n, |n, _| (0, n), false)
    }

    /// Stores a sync's answer for `key_hash`: a grant of `extra` until `expiry_ns`, or none
    /// (Redis holds nothing for this node any more).
    pub(super) fn pool_store(&self, key_hash: u64, grant: Option<u64>, expiry_ns: u64, now: u64) {
        let e = grant.map_or(0, |x| entry(x, expiry_ns));
        self.remote
            .update(key_hash, now, residual, |_, _| (e, ()), e != 0);
    }
}

/// The allocator, run by Redis for one key and one node (atomic: no other script or command
/// runs meanwhile). `KEYS[1]`: the key's hash of nodes, each field `reserved demand expiry_ms`
/// (units beyond the floor; Redis time). `ARGV`: node, demand, in flight, max, expected_nodes,
/// lease (ms), the extra the node uses now. Returns 0 when the node holds nothing for the key
/// any more, else 1 + its extra grant.
pub(super) const ALLOCATE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local node = ARGV[1]
local demand, held = tonumber(ARGV[2]), tonumber(ARGV[3])
local max, expected = tonumber(ARGV[4]), tonumber(ARGV[5])
local lease, using = tonumber(ARGV[6]), tonumber(ARGV[7])
local mine, heldx = math.max(demand - 1, 0), math.max(held - 1, 0)
local others, n, wants = 0, 1, {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= node then
    local r, d, e = string.match(all[i + 1], '^(%d+) (%d+) (%d+)$')
    if r == nil or tonumber(e) < now then
      redis.call('HDEL', KEYS[1], all[i])
    else
      others = others + tonumber(r)
      n = n + 1
      if tonumber(d) > 0 then wants[#wants + 1] = tonumber(d) end
    end
  end
end
if mine > 0 then wants[#wants + 1] = mine end
local cap = max - math.max(expected, n)
table.sort(wants)
local left, level = cap, nil
for i, w in ipairs(wants) do
  local share = math.floor(left / (#wants - i + 1))
  if w > share then level = share break end
  left = left - w
end
local target = 0
if mine > 0 then
  if level then target = math.min(mine, level) else target = mine + math.floor(left / #wants) end
end
local g = math.max(math.min(target, cap - others), 0)
local reserved = math.max(using, g, heldx)
if demand == 0 and held == 0 and using == 0 then
  redis.call('HDEL', KEYS[1], node)
  return 0
end
redis.call('HSET', KEYS[1], node, string.format('%d %d %d', reserved, mine, now + lease))
redis.call('PEXPIRE', KEYS[1], 2 * lease)
return g + 1
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_expire() {
        let e = entry(7, 5 << UNIT_SHIFT);
        assert_eq!(granted(e, (5 << UNIT_SHIFT) - 1), Some(7));
        assert_eq!(granted(e, 5 << UNIT_SHIFT), None);
        assert_eq!(granted(WANTED, 1), None);
        assert_eq!(granted(0, 0), None);
        assert!(residual(e, 0) > residual(WANTED, 0) && residual(WANTED, 0) > 0);
        assert_eq!(residual(0, 0), 0);
        // Rounded down: never valid past the given expiry.
        let e = entry(1, (9 << UNIT_SHIFT) + 12345);
        assert_eq!(granted(e, 9 << UNIT_SHIFT), None);
    }

    #[test]
    fn fallback_and_lease_follow_the_settings() {
        let c = Concurrency::new(30, 120 * crate::limiter::NS_PER_SEC).unwrap();
        let p = Pool::new(c, 4, 100_000_000);
        assert_eq!((p.fallback, p.grant_lease_ns), (7, 1_000_000_000));
        let p = Pool::new(c, 3, 500_000_000);
        assert_eq!((p.fallback, p.grant_lease_ns), (10, 5_000_000_000));
    }
}
