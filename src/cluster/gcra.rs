//! Cluster GCRA: `algorithm = "gcra"` with `scope = "cluster"`, by TAT exchange. Each node runs
//! nginx's `limit_req` GCRA on its own state, which also counts the units this node admitted.
//! Redis keeps one cluster-wide TAT per key; every sync, the syncer adds the units admitted
//! here since its last push to it (as GCRA does: `max(TAT, now) + n·T`, one script per key,
//! [`EXCHANGE`]) and merges the result into the local state (`TAT := max(TAT, Redis's)`). So
//! every node's state is the cluster's bucket, late by at most the sync lag; rate, burst,
//! `delay` and `nodelay` keep their meaning, and what the nodes admitted unseen during a lag is
//! paid back (the shared TAT runs ahead until it drains). Redis's TAT is relative to its own
//! clock and handed out as "ahead of now", so the nodes' clocks need not agree.
//!
//! State of a cluster GCRA key: `tat : 46 | count : 18`, the TAT in units of 256 ns modulo
//! 2^46 (read relative to now: a TAT more than 2^45 units, 104 days, behind now reads as past)
//! and the units admitted modulo 2^18 (the syncer takes differences; a node admits far fewer
//! than 2^18 units of one key between two syncs).

use super::ClusterZone;
use crate::limiter::{Gcra, RateStep, Verdict};
use crate::table::Table;

const UNIT_SHIFT: u32 = 8;
const COUNT_BITS: u32 = 18;
pub(super) const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const TAT_BITS: u32 = 64 - COUNT_BITS;
const TAT_MASK: u64 = (1 << TAT_BITS) - 1;

/// The TAT (ns on the table's clock, 0 when past) and count of `state` at `now`.
#[inline]
pub(super) fn unpack(state: u64, now: u64) -> (u64, u64) {
    let count = state & COUNT_MASK;
    let now_u = now >> UNIT_SHIFT;
    let ahead = (state >> COUNT_BITS).wrapping_sub(now_u) & TAT_MASK;
    let tat = if state == 0 || ahead >= 1 << (TAT_BITS - 1) {
        0
    } else {
        (now_u + ahead) << UNIT_SHIFT
    };
    (tat, count)
}

/// Packs a TAT (rounded up: never earlier than computed) and a count; never 0 for a key that
/// admitted something.
#[inline]
pub(super) fn pack(tat: u64, count: u64) -> u64 {
    let tat_u = tat.div_ceil(1 << UNIT_SHIFT) & TAT_MASK;
    let s = (tat_u << COUNT_BITS) | (count & COUNT_MASK);
    if s == 0 {
        1 << COUNT_BITS
    } else {
        s
    }
}

/// `state` with the cluster-wide TAT, `ahead_ns` ahead of `now`, merged in: the later of
/// the two (the local one has this node's units since its push; Redis's has everybody's
/// pushed units).
pub(super) fn merge(state: u64, now: u64, ahead_ns: u64) -> u64 {
    let (tat, count) = unpack(state, now);
    pack(tat.max(now.saturating_add(ahead_ns)), count)
}

/// The exchange, run by Redis for one key (atomic). `KEYS[1]`: the key's cluster-wide TAT, µs
/// of Redis time. `ARGV`: units this node admitted since its last push, `T` in µs, how long to
/// keep a TAT once past (ms), µs since this node's last push. The units move the TAT as GCRA
/// does, as if they had come at the last push (they came since: an empty bucket is not
/// charged for the time they have drained): `max(TAT, now − since) + n·T`. Returns how far ahead of now the TAT is, µs
/// (0: an empty bucket).
pub(super) const EXCHANGE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local g = tonumber(redis.call('GET', KEYS[1]) or '0')
local n, step, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if n > 0 then
  g = math.max(g, now - tonumber(ARGV[4])) + n * step
  redis.call('SET', KEYS[1], string.format('%d', g), 'PX', math.floor((g - now) / 1000) + keep)
end
return math.max(g - now, 0)
";

/// A limit's GCRA over the packed state, counting the units it admits for the cluster when
/// `.1` (with Redis answering). Units admitted on the fallback share are not counted: they were
/// paid for under the fallback's `rate ÷ E`, and pushed after the outage, on top of a TAT the
/// nodes that resumed first already keep current, they would lock the key for as long as the
/// outage lasted.
pub(crate) struct Counted<'a>(pub(crate) &'a Gcra, pub(crate) bool);

impl RateStep for Counted<'_> {
    #[inline]
    fn step(&self, state: u64, now: u64, cost: u64) -> (u64, Verdict) {
        let (tat, count) = unpack(state, now);
        let (next, v) = self.0.step(tat, now, cost);
        if !v.admitted() {
            return (state, v);
        }
        (pack(next, count.wrapping_add(cost * u64::from(self.1))), v)
    }

    #[inline]
    fn residual(&self, state: u64, now: u64) -> u64 {
        // A key with unpushed units still matters a little.
        let (tat, count) = unpack(state, now);
        tat.saturating_sub(now).max(u64::from(count != 0))
    }

    #[inline]
    fn refund(&self, state: u64, now: u64, cost: u64) -> u64 {
        let (tat, count) = unpack(state, now);
        pack(
            self.0.refund(tat, now, cost),
            count.wrapping_sub(cost * u64::from(self.1)),
        )
    }
}

impl ClusterZone {
    /// [`Table::check`] of a limit's GCRA (`fallback`: its share while Redis is away) on a
    /// cluster GCRA zone. Lock-free, allocation-free, no I/O. Out of line: inlined, its two
    /// table checks made the engine's rate dispatch too large to inline into every path
    /// (+360 instructions per `weir_req` request on local zones).
    #[inline(never)]
    pub fn gcra_check(&self, t: &Table, g: [&Gcra; 2], h: u64, cost: u64, now: u64) -> Verdict {
        if self.healthy(now) {
            t.check(&Counted(g[0], true), h, cost, now)
        } else {
            self.stats
                .fallback_decisions
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            t.check(&Counted(g[1], false), h, cost, now)
        }
    }

    /// [`Table::refund`] likewise (this node's count too, while Redis answers).
    #[inline(never)]
    pub fn gcra_refund(&self, t: &Table, g: &Gcra, h: u64, cost: u64, now: u64) {
        t.refund(&Counted(g, self.healthy(now)), h, cost, now);
    }

    /// [`Table::predict`] likewise.
    #[inline(never)]
    pub fn gcra_predict(&self, t: &Table, g: [&Gcra; 2], h: u64, cost: u64, now: u64) -> Verdict {
        let g = if self.healthy(now) { g[0] } else { g[1] };
        t.predict(&Counted(g, false), h, cost, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Delay, Rate, NS_PER_SEC};

    #[test]
    fn packed_states_keep_tat_and_count() {
        let now = 1_000 * NS_PER_SEC;
        let s = pack(now + 5_000, 7);
        let (tat, n) = unpack(s, now);
        assert_eq!(n, 7);
        assert!((now + 5_000..now + 5_000 + 256).contains(&tat), "{tat}");
        assert_eq!(unpack(s, now + 10_000).0, 0, "past reads as 0");
        assert_eq!(unpack(0, now), (0, 0));
        // The count wraps; differences stay right.
        let s = pack(now, COUNT_MASK);
        assert_eq!(
            unpack(pack(now, unpack(s, now).1.wrapping_add(2)), now).1,
            1
        );
    }

    #[test]
    fn counted_gcra_is_limit_req_and_counts_admissions() {
        let g = Gcra::new(Rate::per_second(10), 2, Delay::NoDelay).unwrap();
        let c = Counted(&g, true);
        let now = 50 * NS_PER_SEC;
        let (mut s, mut passed) = (0, 0);
        for _ in 0..5 {
            let (n, v) = c.step(s, now, 1);
            s = n;
            passed += u64::from(v.admitted());
        }
        assert_eq!(passed, 3, "1 + burst back to back");
        assert_eq!(unpack(s, now).1, 3);
        // 100 ms later one more conforms.
        assert!(c.step(s, now + NS_PER_SEC / 10, 1).1.admitted());
        // The cluster's TAT, further ahead, is taken; a nearer one changes nothing.
        let f = merge(s, now, 5 * g.interval_ns());
        assert!(!c.step(f, now + NS_PER_SEC / 10, 1).1.admitted());
        assert_eq!(unpack(f, now).1, 3, "merging keeps this node's count");
        assert_eq!(merge(s, now, g.interval_ns()), s);
        assert_eq!(unpack(c.refund(s, now, 1), now).1, 2);
    }

    #[test]
    fn fallback_admissions_are_not_counted_for_the_cluster() {
        let g = Gcra::new(Rate::per_second(10), 2, Delay::NoDelay).unwrap();
        let now = 50 * NS_PER_SEC;
        let s = Counted(&g, true).step(0, now, 1).0;
        let (f, v) = Counted(&g, false).step(s, now, 1);
        assert!(v.admitted());
        assert_eq!(
            unpack(f, now).1,
            1,
            "the fallback's unit stays out of the push"
        );
        assert!(
            unpack(f, now).0 > unpack(s, now).0,
            "but this node's bucket is charged"
        );
        assert_eq!(unpack(Counted(&g, false).refund(f, now, 1), now).1, 1);
    }
}
