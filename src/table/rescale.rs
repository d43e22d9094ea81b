//! A GCRA zone's rate changed (an nginx reload with a new `rate`): the stored TATs are times
//! measured in the old emission interval `T`. nginx `limit_req` keeps each key's excess in
//! requests and reads it against the new rate; the same here: a live TAT becomes
//! `now + (TAT − now)·T_new/T_old`, so a key keeps its excess in requests, and expired states
//! stay as they are. The header records the interval the states were written with.

use super::slot::{self, EMPTY};
use super::Table;
use std::sync::atomic::Ordering::{AcqRel, Acquire};

impl Table {
    /// Records that this GCRA table's states use emission interval `interval_ns` from now on,
    /// rescaling every live state when another one was recorded. Returns the number of states
    /// rescaled. Call it once per attach of a GCRA zone (nginx: the master's zone init), never
    /// on another kind of table. A process still deciding with the old interval meanwhile
    /// (an old nginx worker finishing its requests) writes states in the old unit, off by at
    /// most the ratio of the intervals for those keys.
    pub fn set_gcra_interval(&self, interval_ns: u64, now: u64) -> usize {
        if interval_ns == 0 {
            return 0;
        }
        let old = self.header().gcra_interval.swap(interval_ns, AcqRel);
        if old == 0 || old == interval_ns {
            return 0;
        }
        let now = now.saturating_sub(self.clock_base);
        let mut rescaled = 0;
        for i in 0..self.capacity {
            let s = self.slot(i);
            let mut w = s.load(Acquire);
            loop {
                let (tag, tat) = (slot::tag(w), slot::state(w));
                if tag == EMPTY || tat <= now {
                    break;
                }
                let ahead = (tat - now) as u128 * interval_ns as u128 / old as u128;
                let new = now.saturating_add(u64::try_from(ahead).unwrap_or(u64::MAX));
                match s.compare_exchange(w, slot::pack(tag, new.max(1)), AcqRel, Acquire) {
                    Ok(_) => {
                        rescaled += 1;
                        break;
                    }
                    // Changed meanwhile (maybe another key now): rescale what is there now.
                    Err(cur) => w = cur,
                }
            }
        }
        rescaled
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::limiter::{Decision, Delay, Gcra, Rate};
    use crate::table::Table;

    const S: u64 = 1_000_000_000;

    fn gcra(rate: Rate) -> Gcra {
        Gcra::new(rate, 5, Delay::NoDelay).unwrap()
    }

    /// nginx's verdicts across a rate change: the excess (requests) carries over and drains at
    /// the new rate, in both directions.
    #[test]
    fn a_rate_change_keeps_the_excess_in_requests() {
        let t = Table::new(64 << 10, 1, 0).unwrap();
        let (slow, fast) = (Rate::per_minute(1), Rate::per_second(100));
        assert_eq!(t.set_gcra_interval(slow.interval_ns().unwrap(), 0), 0);
        let (a, b) = (t.key_hash(b"a"), t.key_hash(b"b"));
        let now = 1000 * S;
        let statuses = |t: &Table, alg: &Gcra, key, now, n| {
            (0..n)
                .map(|_| t.check(alg, key, 1, now).decision)
                .collect::<Vec<_>>()
        };
        let six = [vec![Decision::Pass; 6], vec![Decision::Reject]].concat();
        assert_eq!(statuses(&t, &gcra(slow), a, now, 7), six);

        // Raised: 6 requests of excess at 10 ms each drain in 60 ms.
        assert_eq!(t.set_gcra_interval(fast.interval_ns().unwrap(), now), 1);
        let g = gcra(fast);
        assert_eq!(t.check(&g, a, 1, now + S / 200).decision, Decision::Reject);
        assert_eq!(t.check(&g, a, 1, now + S / 50).decision, Decision::Pass);

        // Lowered: b fills its burst at the fast rate; the slow rate then blocks it for a minute.
        assert_eq!(statuses(&t, &g, b, now + S, 7), six);
        assert_eq!(t.set_gcra_interval(slow.interval_ns().unwrap(), now + S), 1);
        let g = gcra(slow);
        assert_eq!(t.check(&g, b, 1, now + 30 * S).decision, Decision::Reject);
        assert_eq!(t.check(&g, b, 1, now + 62 * S).decision, Decision::Pass);
        // a's state had expired: it is a fresh key at the slow rate.
        assert_eq!(statuses(&t, &g, a, now + 62 * S, 7), six);
    }

    #[test]
    fn the_same_interval_or_a_first_record_changes_nothing() {
        let t = Table::new(64 << 10, 1, 0).unwrap();
        let g = gcra(Rate::per_minute(1));
        let k = t.key_hash(b"k");
        t.check(&g, k, 1, 10 * S);
        let before = t.peek(k);
        assert_eq!(t.set_gcra_interval(60 * S, 10 * S), 0);
        assert_eq!(t.set_gcra_interval(60 * S, 10 * S), 0);
        assert_eq!(t.peek(k), before);
    }
}
