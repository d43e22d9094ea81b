//! Limiting algorithms as pure functions on packed 64-bit states.
//!
//! Every algorithm maps `(state, now, cost) → (new state, verdict)`. Time is monotonic
//! nanoseconds, passed in, so every transition is deterministic and testable. The state `0`
//! always means "nothing recorded": an absent key and a zero state behave the same, which is
//! what lets the table evict expired states without losing anything.

pub mod adaptive;
pub mod ban;
pub mod concurrency;
pub mod gcra;
pub(crate) mod packed;
pub mod rate;
pub mod sliding;

pub use adaptive::Adaptive;
pub use ban::Ban;
pub use concurrency::{Concurrency, Permit};
pub use gcra::{Delay, Gcra};
pub use packed::MAX_COUNT;
pub use rate::{Rate, RateError};
pub use sliding::SlidingWindow;

/// Nanoseconds per second.
pub const NS_PER_SEC: u64 = 1_000_000_000;

/// Salt that turns a concurrency key into the key of its wait queue (same table; a cluster
/// pool's syncer reads it to report the queue).
pub const QUEUE_SALT: u64 = 0x5157_4555_4520_5131;

/// What a check decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Decision {
    /// Admit now.
    Pass,
    /// Admit after holding the request for [`Verdict::wait_ns`].
    Delay,
    /// Refuse; the same request would conform after [`Verdict::retry_after_ns`].
    Reject,
}

/// The outcome of one check, with the numbers hosts need for headers and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub decision: Decision,
    /// For [`Decision::Delay`]: how long to hold the request. Otherwise 0.
    pub wait_ns: u64,
    /// For [`Decision::Reject`]: time until the same request would conform, if nothing else
    /// arrives (0 when the algorithm cannot tell, e.g. concurrency).
    pub retry_after_ns: u64,
    /// Quota in requests (cost units): GCRA `burst + 1`, sliding `events`, concurrency `max`.
    pub limit: u64,
    /// Quota units left after this request ([`Remaining::get`]).
    pub remaining: Remaining,
    /// Time until the full quota is available again.
    pub reset_ns: u64,
}

impl Verdict {
    /// A refusal with nothing more to tell (quota `limit`, none left).
    pub fn refused(limit: u64) -> Verdict {
        Verdict {
            decision: Decision::Reject,
            wait_ns: 0,
            retry_after_ns: 0,
            limit,
            remaining: Remaining::units(0),
            reset_ns: 0,
        }
    }

    /// True when the request goes ahead (now or after a delay).
    pub fn admitted(&self) -> bool {
        self.decision != Decision::Reject
    }
}

/// Quota units left, kept as `headroom / unit` and divided only when asked: most checks never
/// need the number (it feeds `RateLimit` headers), and a division on every check is a
/// measurable share of its cost. Compares by value.
#[derive(Clone, Copy)]
pub struct Remaining {
    headroom: u64,
    /// Never 0.
    unit: u64,
}

impl Remaining {
    /// Exactly `n` units.
    #[inline]
    pub const fn units(n: u64) -> Remaining {
        Remaining {
            headroom: n,
            unit: 1,
        }
    }

    /// `⌊headroom / unit⌋` units (`unit` 0 counts as 1).
    #[inline]
    pub const fn scaled(headroom: u64, unit: u64) -> Remaining {
        Remaining {
            headroom,
            unit: if unit == 0 { 1 } else { unit },
        }
    }

    /// `⌊headroom / unit⌋` for a headroom beyond 64 bits (divided now, when it is that large).
    #[inline]
    pub(crate) fn scaled_wide(headroom: u128, unit: u64) -> Remaining {
        match u64::try_from(headroom) {
            Ok(h) => Remaining::scaled(h, unit),
            Err(_) => {
                Remaining::units(div_u128(headroom, unit.max(1)).min(u64::MAX as u128) as u64)
            }
        }
    }

    /// The number of units.
    #[inline]
    pub fn get(self) -> u64 {
        self.headroom / self.unit
    }

    /// `self.get() < n`, without dividing: `⌊h / u⌋ < n` iff `h < n·u` (`n` is whole).
    #[inline]
    pub fn below(self, n: u64) -> bool {
        (self.headroom as u128) < n as u128 * self.unit as u128
    }
}

impl PartialEq for Remaining {
    fn eq(&self, other: &Remaining) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Remaining {}

impl std::fmt::Debug for Remaining {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// One step of a rate algorithm, as the table runs it: a pure transition plus an eviction rank
/// (the policy names a zone's algorithm with [`crate::policy::config::Algorithm`]).
pub trait RateStep {
    /// The transition for a request of `cost` units at `now`. A rejected request returns the
    /// state unchanged (it is not charged).
    fn step(&self, state: u64, now: u64, cost: u64) -> (u64, Verdict);
    /// How much the state still matters at `now`: 0 means it equals an absent key (evicting it
    /// loses nothing); otherwise smaller means closer to forgotten.
    fn residual(&self, state: u64, now: u64) -> u64;
    /// Takes back a charge of `cost` made at `now` (when a later limit refused the request).
    fn refund(&self, state: u64, now: u64, cost: u64) -> u64;
}

/// `floor(num / d)` with a 64-bit division whenever `num` fits in 64 bits (the common case;
/// a 128-bit division is a slow library call).
#[inline]
pub(crate) fn div_u128(num: u128, d: u64) -> u128 {
    match u64::try_from(num) {
        Ok(n) => (n / d) as u128,
        Err(_) => num / d as u128,
    }
}

/// Parameters rejected at construction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamError(pub String);

impl std::fmt::Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParamError {}

#[cfg(test)]
mod tests {
    use super::Remaining;

    #[test]
    fn below_is_get_less_than() {
        let edges = [
            0,
            1,
            2,
            3,
            7,
            10,
            999,
            1_000,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ];
        for &h in &edges {
            for &u in &edges {
                for &n in &edges {
                    let r = Remaining::scaled(h, u);
                    assert_eq!(r.below(n), r.get() < n, "{h} / {u} < {n}");
                }
            }
        }
    }
}
