//! Sliding-window counter: at most `events` per `window`, estimated as
//! `prev·(1 − elapsed/window) + cur` over the fixed windows `now / window` and the one before.
//!
//! Bound: the estimate assumes the previous window's events were spread evenly. Any interval of
//! length `window` therefore admits less than `2·events` cost units, and exactly `events` when
//! traffic is steady. State: [`super::packed`] with window ids `now / window`.

use super::packed::{self, Counts, MAX_COUNT};
use super::{div_u128, Decision, ParamError, RateStep, Remaining, Verdict};

/// A sliding-window limiter's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingWindow {
    events: u64,
    window_ns: u64,
}

/// Shortest window accepted.
pub const MIN_WINDOW_NS: u64 = 1_000_000;

impl SlidingWindow {
    pub fn new(events: u64, window_ns: u64) -> Result<SlidingWindow, ParamError> {
        if events == 0 || events > MAX_COUNT {
            return Err(ParamError(format!(
                "events must be between 1 and {MAX_COUNT} per window, got {events}; for more, use a gcra zone"
            )));
        }
        if window_ns < MIN_WINDOW_NS {
            return Err(ParamError("window must be at least 1ms".into()));
        }
        Ok(SlidingWindow { events, window_ns })
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// `estimate · window` for counts `c` at `elapsed` ns into the current window.
    #[inline]
    fn scaled_estimate(&self, c: Counts, elapsed: u64) -> u128 {
        c.prev as u128 * (self.window_ns - elapsed) as u128 + c.cur as u128 * self.window_ns as u128
    }

    /// Time from `elapsed` until `cost` more fits, assuming nothing else arrives.
    fn retry_after(&self, c: Counts, elapsed: u64, cost: u64) -> u64 {
        let w = self.window_ns as u128;
        let to_next = self.window_ns - elapsed;
        if cost > self.events {
            // Never fits; point past the window after next.
            return to_next + self.window_ns;
        }
        if c.cur + cost <= self.events {
            // Fits in this window once enough of `prev` has slid out:
            // prev·(w − e − x) ≤ (events − cur − cost)·w.
            let room = (self.events - c.cur - cost) as u128 * w;
            let keep = div_u128(room, c.prev); // ns of prev weight we may keep
            return (to_next as u128).saturating_sub(keep) as u64;
        }
        // Next window, where `cur` becomes `prev`: cur·(w − e') ≤ (events − cost)·w.
        let room = (self.events - cost) as u128 * w;
        let keep = div_u128(room, c.cur).min(w);
        to_next + (w - keep) as u64
    }
}

impl RateStep for SlidingWindow {
    #[inline]
    fn step(&self, state: u64, now: u64, cost: u64) -> (u64, Verdict) {
        let at = now / self.window_ns;
        let id = packed::window(state, at);
        // A clock just behind the state's window acts at that window's start.
        let elapsed = if id == at { now % self.window_ns } else { 0 };
        let c = packed::read(state, id);
        let limit_scaled = self.events as u128 * self.window_ns as u128;
        let after = self.scaled_estimate(c, elapsed) + cost as u128 * self.window_ns as u128;
        let reset_ns = self.window_ns - elapsed;
        if after > limit_scaled {
            let before = self.scaled_estimate(c, elapsed);
            let verdict = Verdict {
                decision: Decision::Reject,
                wait_ns: 0,
                retry_after_ns: self.retry_after(c, elapsed, cost),
                limit: self.events,
                remaining: Remaining::scaled_wide(
                    limit_scaled.saturating_sub(before),
                    self.window_ns,
                ),
                reset_ns,
            };
            return (state, verdict);
        }
        let next = packed::write(
            id,
            Counts {
                prev: c.prev,
                cur: c.cur + cost,
            },
        );
        let verdict = Verdict {
            decision: Decision::Pass,
            wait_ns: 0,
            retry_after_ns: 0,
            limit: self.events,
            remaining: Remaining::scaled_wide(limit_scaled - after, self.window_ns),
            reset_ns,
        };
        (next, verdict)
    }

    #[inline]
    fn refund(&self, state: u64, now: u64, cost: u64) -> u64 {
        let id = packed::window(state, now / self.window_ns);
        let mut c = packed::read(state, id);
        let from_cur = cost.min(c.cur);
        c.cur -= from_cur;
        c.prev = c.prev.saturating_sub(cost - from_cur);
        packed::write(id, c)
    }

    /// The estimate in 1/1024 events, rounded up so that only a truly empty state ranks 0.
    #[inline]
    fn residual(&self, state: u64, now: u64) -> u64 {
        let c = packed::read(state, now / self.window_ns);
        // Ranking needs no precision beyond 1/1024 event: ceil(estimate·1024 / window).
        let scaled = self.scaled_estimate(c, now % self.window_ns) * 1024;
        let w = self.window_ns as u128;
        div_u128(scaled + w - 1, self.window_ns).min(u64::MAX as u128) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::NS_PER_SEC;

    const W: u64 = 10 * NS_PER_SEC;

    fn check(s: &mut u64, sw: &SlidingWindow, now: u64, cost: u64) -> Verdict {
        let (n, v) = sw.step(*s, now, cost);
        *s = n;
        v
    }

    #[test]
    fn counts_up_to_events_in_one_window() {
        let sw = SlidingWindow::new(3, W).unwrap();
        let mut s = 0;
        let d: Vec<_> = (0..4).map(|i| check(&mut s, &sw, i, 1).decision).collect();
        assert_eq!(
            d,
            [
                Decision::Pass,
                Decision::Pass,
                Decision::Pass,
                Decision::Reject
            ]
        );
    }

    /// A step whose clock reads just before a window boundary, after another thread already
    /// counted in the next window, counts there too: the next window's counts are not wiped.
    #[test]
    fn a_step_with_a_clock_just_behind_keeps_the_counts() {
        let sw = SlidingWindow::new(3, W).unwrap();
        let mut s = 0;
        for _ in 0..3 {
            assert!(check(&mut s, &sw, 2 * W + 1, 1).admitted());
        }
        let before = s;
        let v = check(&mut s, &sw, 2 * W - 1, 1);
        assert!(!v.admitted(), "the next window's three count");
        assert_eq!(s, before);
        // A refund from the earlier clock takes one back from the later window.
        let s = sw.refund(s, 2 * W - 1, 1);
        assert_eq!(packed::read(s, 2), packed::Counts { prev: 0, cur: 2 });
    }

    #[test]
    fn previous_window_weighs_in_linearly() {
        let sw = SlidingWindow::new(10, W).unwrap();
        let mut s = 0;
        for _ in 0..10 {
            assert!(check(&mut s, &sw, 0, 1).admitted());
        }
        // 30% into the next window the previous ten still count as 7: three more fit.
        let t = W + 3 * NS_PER_SEC;
        for _ in 0..3 {
            assert!(check(&mut s, &sw, t, 1).admitted());
        }
        let v = check(&mut s, &sw, t, 1);
        assert_eq!(v.decision, Decision::Reject);
        // One more fits once another tenth of the old window has slid out.
        assert_eq!(v.retry_after_ns, NS_PER_SEC);
        assert!(check(&mut s, &sw, t + NS_PER_SEC, 1).admitted());
    }

    #[test]
    fn retry_after_reaches_into_the_next_window_when_needed() {
        let sw = SlidingWindow::new(4, W).unwrap();
        let mut s = 0;
        for _ in 0..4 {
            check(&mut s, &sw, W, 1);
        }
        let v = check(&mut s, &sw, W, 1);
        // cur = 4 must decay to 3: a quarter into the next window.
        assert_eq!(v.retry_after_ns, W + W / 4);
        assert!(!check(&mut s, &sw, 2 * W + W / 4 - 1, 1).admitted());
        assert!(check(&mut s, &sw, 2 * W + W / 4, 1).admitted());
    }

    #[test]
    fn old_states_rank_zero_for_eviction() {
        let sw = SlidingWindow::new(4, W).unwrap();
        let (s, _) = sw.step(0, W, 1);
        assert!(sw.residual(s, W) > 0);
        assert!(sw.residual(s, 2 * W + 1) > 0);
        assert_eq!(sw.residual(s, 3 * W), 0);
    }

    #[test]
    fn parameters_are_checked() {
        assert!(SlidingWindow::new(0, W).is_err());
        assert!(SlidingWindow::new(MAX_COUNT + 1, W).is_err());
        assert!(SlidingWindow::new(1, 10).is_err());
    }
}
