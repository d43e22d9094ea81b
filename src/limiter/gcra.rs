//! GCRA with nginx `limit_req` semantics.
//!
//! State: the theoretical arrival time (TAT) in ns, 0 when nothing is recorded. With emission
//! interval `T` and `burst = b`, a request of cost `c` at `now` would move the TAT to
//! `max(TAT, now) + c·T`; it conforms when that is at most `(b + 1)·T` ahead of `now`. This is
//! nginx's `excess` bookkeeping with exact nanoseconds instead of milli-requests: `b = 0` admits
//! one request per `T`, `burst = b` admits `1 + b` back to back, a rejected request is not
//! charged, a new key is admitted (any cost ≤ `b + 1`).
//!
//! Delay (nginx `delay=`/`nodelay`): of a conforming request, the part of the excess beyond
//! `1 + delay` requests is waited out: `wait = TAT' − now − (1 + delay)·T`. The default,
//! `delay = 0`, spaces requests exactly `T` apart; `nodelay` never waits.

use super::{Decision, ParamError, Rate, RateStep, Remaining, Verdict};

/// How conforming excess requests are treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delay {
    /// nginx's default: every excess request waits for its slot (`delay = 0`).
    Delay,
    /// `delay=N`: the first `N` excess requests pass at once, later ones wait.
    After(u64),
    /// `nodelay`: all requests within the burst pass at once.
    NoDelay,
}

/// A GCRA limiter's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gcra {
    interval_ns: u64,
    burst: u64,
    /// `(b + 1)·T`: how far ahead of now the TAT may run.
    tolerance_ns: u64,
    /// `(1 + delay)·T`: the part of the excess that never waits.
    free_ns: u64,
}

impl Gcra {
    pub fn new(rate: Rate, burst: u64, delay: Delay) -> Result<Gcra, ParamError> {
        let interval_ns = rate.interval_ns()?;
        let tolerance_ns = (burst + 1)
            .checked_mul(interval_ns)
            .ok_or_else(|| ParamError(format!("burst {burst} is too large for this rate")))?;
        let free_ns = match delay {
            Delay::Delay => interval_ns,
            Delay::After(n) if n > burst => {
                return Err(ParamError(format!(
                "delay={n} exceeds burst={burst}; use a delay between 0 and the burst, or nodelay"
            )))
            }
            Delay::After(n) => (n + 1) * interval_ns,
            Delay::NoDelay => u64::MAX,
        };
        Ok(Gcra {
            interval_ns,
            burst,
            tolerance_ns,
            free_ns,
        })
    }

    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Requests still admitted back to back when the TAT is `ahead_ns` ahead of now:
    /// `⌊(tolerance − ahead) / T⌋`, divided only when read.
    #[inline]
    fn remaining(&self, ahead_ns: u64) -> Remaining {
        Remaining::scaled(self.tolerance_ns.saturating_sub(ahead_ns), self.interval_ns)
    }
}

impl RateStep for Gcra {
    #[inline]
    fn step(&self, tat: u64, now: u64, cost: u64) -> (u64, Verdict) {
        let base = tat.max(now);
        let new_tat = base.saturating_add(cost.saturating_mul(self.interval_ns));
        let ahead = new_tat - now;
        let limit = self.burst + 1;
        if ahead > self.tolerance_ns {
            let verdict = Verdict {
                decision: Decision::Reject,
                wait_ns: 0,
                retry_after_ns: ahead - self.tolerance_ns,
                limit,
                remaining: self.remaining(base - now),
                reset_ns: base - now,
            };
            return (tat, verdict);
        }
        let wait_ns = ahead.saturating_sub(self.free_ns);
        let verdict = Verdict {
            decision: if wait_ns > 0 {
                Decision::Delay
            } else {
                Decision::Pass
            },
            wait_ns,
            retry_after_ns: 0,
            limit,
            remaining: self.remaining(ahead),
            reset_ns: ahead,
        };
        (new_tat, verdict)
    }

    #[inline]
    fn residual(&self, tat: u64, now: u64) -> u64 {
        tat.saturating_sub(now)
    }

    /// Exact: the charge moved the TAT from `max(TAT, now)` by `cost·T`, and a TAT at or before
    /// `now` means the same as `now`.
    #[inline]
    fn refund(&self, tat: u64, _now: u64, cost: u64) -> u64 {
        tat.saturating_sub(cost.saturating_mul(self.interval_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::NS_PER_SEC;

    fn run(g: &Gcra, times_ms: &[u64]) -> Vec<Decision> {
        let mut s = 0;
        times_ms
            .iter()
            .map(|&t| {
                let (n, v) = g.step(s, t * 1_000_000, 1);
                s = n;
                v.decision
            })
            .collect()
    }

    #[test]
    fn burst_admits_one_plus_burst_back_to_back() {
        let g = Gcra::new(Rate::per_second(1), 2, Delay::NoDelay).unwrap();
        use Decision::{Pass, Reject};
        assert_eq!(
            run(&g, &[1000, 1000, 1000, 1000]),
            [Pass, Pass, Pass, Reject]
        );
        // One interval later exactly one more fits.
        assert_eq!(
            run(&g, &[1000, 1000, 1000, 2000, 2000]),
            [Pass, Pass, Pass, Pass, Reject]
        );
    }

    #[test]
    fn default_delay_spaces_requests_one_interval_apart() {
        let g = Gcra::new(Rate::per_second(2), 5, Delay::Delay).unwrap();
        let mut s = 0;
        let mut waits = vec![];
        for _ in 0..4 {
            let (n, v) = g.step(s, NS_PER_SEC, 1);
            s = n;
            waits.push(v.wait_ns);
        }
        assert_eq!(waits, [0, 500_000_000, 1_000_000_000, 1_500_000_000]);
    }

    #[test]
    fn delay_n_lets_the_first_n_excess_through() {
        let g = Gcra::new(Rate::per_second(1), 4, Delay::After(2)).unwrap();
        let mut s = 0;
        let mut out = vec![];
        for _ in 0..6 {
            let (n, v) = g.step(s, NS_PER_SEC, 1);
            s = n;
            out.push((v.decision, v.wait_ns / NS_PER_SEC));
        }
        use Decision::{Pass, Reject};
        let wait = Decision::Delay;
        assert_eq!(
            out,
            [
                (Pass, 0),
                (Pass, 0),
                (Pass, 0),
                (wait, 1),
                (wait, 2),
                (Reject, 0)
            ]
        );
    }

    #[test]
    fn rejected_requests_are_not_charged_and_report_retry_after() {
        let g = Gcra::new(Rate::per_second(1), 0, Delay::NoDelay).unwrap();
        let (s, _) = g.step(0, 10 * NS_PER_SEC, 1);
        let (s2, v) = g.step(s, 10 * NS_PER_SEC + 250_000_000, 1);
        assert_eq!(s2, s);
        assert_eq!(v.decision, Decision::Reject);
        assert_eq!(v.retry_after_ns, 750_000_000);
    }

    #[test]
    fn cost_counts_as_several_requests() {
        let g = Gcra::new(Rate::per_second(10), 9, Delay::NoDelay).unwrap();
        let (s, v) = g.step(0, NS_PER_SEC, 7);
        assert_eq!((v.decision, v.remaining.get()), (Decision::Pass, 3));
        let (_, v) = g.step(s, NS_PER_SEC, 4);
        assert_eq!(v.decision, Decision::Reject);
        assert_eq!(v.retry_after_ns, 100_000_000);
    }

    #[test]
    fn delay_beyond_burst_is_refused() {
        assert!(Gcra::new(Rate::per_second(1), 2, Delay::After(3)).is_err());
    }
}
