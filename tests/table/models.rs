//! Each algorithm against a plain reference model over random request sequences.
//!
//! GCRA and concurrency must agree exactly; the sliding window must agree exactly with an
//! unpacked model of the same estimator and stay within its documented bound (< 2·events in any
//! window-long interval) against the true sliding log.

use proptest::prelude::*;
use std::collections::HashMap;
use weir::limiter::{Concurrency, Decision, Delay, Gcra, Rate, RateStep, SlidingWindow};
use weir::table::Table;

const MS: u64 = 1_000_000;

/// A leaky bucket holding `level` ns of debt, drained by elapsed time: nginx's `excess`.
struct LeakyBucket {
    t: u64,
    b: u64,
    d: Option<u64>,
    level: u64,
    last: u64,
}

impl LeakyBucket {
    /// (admitted, wait, retry_after)
    fn offer(&mut self, now: u64, cost: u64) -> (bool, u64, u64) {
        let level = self.level.saturating_sub(now - self.last);
        let after = level + cost * self.t;
        let cap = (self.b + 1) * self.t;
        if after > cap {
            return (false, 0, after - cap);
        }
        self.level = after;
        self.last = now;
        let free = match self.d {
            None => u64::MAX,
            Some(d) => (d + 1) * self.t,
        };
        (true, after.saturating_sub(free), 0)
    }
}

fn delay_mode() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![Just(None), (0u64..4).prop_map(Some)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn gcra_matches_the_leaky_bucket(
        per_sec in 1u64..50,
        burst in 0u64..8,
        delay in delay_mode(),
        reqs in prop::collection::vec((0u64..400, 1u64..4), 1..200),
    ) {
        let mode = match delay {
            None => Delay::NoDelay,
            Some(d) => Delay::After(d.min(burst)),
        };
        let g = Gcra::new(Rate::per_second(per_sec), burst, mode).unwrap();
        let t = g.interval_ns();
        let mut model = LeakyBucket { t, b: burst, d: delay.map(|d| d.min(burst)), level: 0, last: 0 };
        let table = Table::new(1 << 16, 1, 0).unwrap();
        let key = table.key_hash(b"k");
        let (mut state, mut now) = (0u64, 1_000 * MS);
        for (gap_ms, cost) in reqs {
            now += gap_ms * MS;
            let (admitted, wait, retry) = model.offer(now, cost);
            let (next, v) = g.step(state, now, cost);
            prop_assert_eq!(v.admitted(), admitted);
            prop_assert_eq!(v.wait_ns, wait);
            prop_assert_eq!(v.retry_after_ns, retry);
            prop_assert_eq!(v.decision == Decision::Delay, wait > 0);
            if !admitted {
                prop_assert_eq!(next, state);
                // retry_after is exact: one ns earlier still fails, at retry_after it passes.
                prop_assert!(g.step(state, now + retry, cost).1.admitted() || cost > burst + 1);
                prop_assert!(!g.step(state, now + retry - 1, cost).1.admitted());
            }
            state = next;
            // The table runs the same transition.
            prop_assert_eq!(table.check(&g, key, cost, now), v);
        }
    }

    #[test]
    fn sliding_window_matches_its_model_and_bound(
        events in 1u64..20,
        window_ms in 10u64..1000,
        reqs in prop::collection::vec((0u64..300, 1u64..3), 1..300),
    ) {
        let w = window_ms * MS;
        let sw = SlidingWindow::new(events, w).unwrap();
        let mut counts: HashMap<u64, u64> = HashMap::new();
        let mut admitted_log: Vec<(u64, u64)> = vec![];
        let (mut state, mut now) = (0u64, 5 * w);
        for (gap_ms, cost) in reqs {
            now += gap_ms * MS;
            let (id, e) = (now / w, now % w);
            let prev = counts.get(&(id - 1)).copied().unwrap_or(0) as u128;
            let cur = counts.get(&id).copied().unwrap_or(0) as u128;
            let fits = prev * (w - e) as u128 + (cur + cost as u128) * w as u128
                <= events as u128 * w as u128;
            let (next, v) = sw.step(state, now, cost);
            prop_assert_eq!(v.admitted(), fits);
            if fits {
                *counts.entry(id).or_default() += cost;
                admitted_log.push((now, cost));
                let in_window: u64 = admitted_log
                    .iter()
                    .filter(|(t, _)| *t + w > now)
                    .map(|(_, c)| c)
                    .sum();
                prop_assert!(in_window < 2 * events, "{in_window} in one window, events {events}");
            } else {
                prop_assert_eq!(next, state);
                let r = v.retry_after_ns;
                if cost <= events {
                    prop_assert!(sw.step(state, now + r, cost).1.admitted());
                    if r > 0 {
                        prop_assert!(!sw.step(state, now + r - 1, cost).1.admitted());
                    }
                }
            }
            state = next;
        }
    }

    #[test]
    fn concurrency_matches_a_list_of_leases(
        max in 1u64..6,
        lease_s in 1u64..5,
        ops in prop::collection::vec((0u64..1500, any::<bool>(), any::<prop::sample::Index>()), 1..300),
    ) {
        let lease = lease_s * 1000 * MS;
        let c = Concurrency::new(max, lease).unwrap();
        // Model: the buckets of held permits; a permit counts while its bucket ≥ current − 1.
        let mut held: Vec<u64> = vec![];
        let (mut state, mut now) = (0u64, 10 * lease);
        for (gap_ms, acquire, pick) in ops {
            now += gap_ms * MS;
            let cur = now / lease;
            held.retain(|&b| b + 1 >= cur);
            prop_assert_eq!(c.in_flight(state, now), held.len() as u64);
            if acquire || held.is_empty() {
                let (next, v) = c.acquire(state, now);
                prop_assert_eq!(v.admitted(), (held.len() as u64) < max);
                if v.admitted() {
                    held.push(cur);
                } else {
                    prop_assert_eq!(next, state);
                }
                state = next;
            } else {
                let b = held.swap_remove(pick.index(held.len()));
                state = c.release(state, now, b);
            }
            prop_assert!(c.in_flight(state, now) <= max);
        }
    }
}
