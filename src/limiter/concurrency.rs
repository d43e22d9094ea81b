//! Concurrency: at most `max` requests in flight per key, with permits that are leases.
//!
//! Crash recovery by leases: permits are counted in lease buckets (`now / lease`), this one and
//! the one before. A permit acquired in bucket `b` counts until it is released or bucket `b + 1`
//! ends, whichever comes first — so it lives between one and two leases. Permits held by a process
//! that died (SIGKILL, segfault) are therefore recovered within `2·lease` without any owner
//! bookkeeping, and a release after expiry is a no-op, so the count never underflows and never
//! frees someone else's permit. A holder keeps a permit counting for as long as it holds it by
//! renewing it ([`Concurrency::renew`]) at least once per lease: the engine renews every permit
//! its process holds in one sweep (`Engine::renew_held`), which the hosts run on a timer.
//!
//! State: [`super::packed`] with bucket ids; `prev + cur` is the in-flight count.

use super::packed::{self, Counts, MAX_COUNT};
use super::{Decision, ParamError, Remaining, Verdict, NS_PER_SEC};

/// Default lease: permits live between 2 and 4 minutes unless released or renewed.
pub const DEFAULT_LEASE_NS: u64 = 120 * NS_PER_SEC;

/// A concurrency limiter's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Concurrency {
    max: u64,
    lease_ns: u64,
}

/// A held permit: which key and which lease bucket it was counted in. Release it exactly once
/// (it is not `Copy`; releasing consumes it).
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a permit must be released"]
pub struct Permit {
    pub(crate) key_hash: u64,
    pub(crate) bucket: u64,
}

impl Permit {
    /// The raw parts, for hosts that carry permits across an FFI boundary.
    pub fn into_raw(self) -> (u64, u64) {
        (self.key_hash, self.bucket)
    }

    /// Rebuilds a permit from [`Permit::into_raw`]'s parts. Releasing a permit twice is the
    /// caller's bug: it may free another holder's slot early (never below zero).
    pub fn from_raw(key_hash: u64, bucket: u64) -> Permit {
        Permit { key_hash, bucket }
    }
}

impl Concurrency {
    pub fn new(max: u64, lease_ns: u64) -> Result<Concurrency, ParamError> {
        if max == 0 || max > MAX_COUNT {
            return Err(ParamError(format!(
                "max in flight must be between 1 and {MAX_COUNT}, got {max}"
            )));
        }
        if lease_ns < NS_PER_SEC {
            return Err(ParamError("lease must be at least 1s".into()));
        }
        Ok(Concurrency { max, lease_ns })
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn lease_ns(&self) -> u64 {
        self.lease_ns
    }

    #[inline]
    pub fn bucket(&self, now: u64) -> u64 {
        now / self.lease_ns
    }

    /// The bucket a step on `state` at `now` acts in (`now`'s, or the state's when this clock
    /// read trails it: [`packed::window`]).
    #[inline]
    pub fn bucket_of(&self, state: u64, now: u64) -> u64 {
        packed::window(state, self.bucket(now))
    }

    /// In flight at `now`.
    #[inline]
    pub fn in_flight(&self, state: u64, now: u64) -> u64 {
        let c = packed::read(state, self.bucket_of(state, now));
        c.prev + c.cur
    }

    /// Takes one permit if fewer than `max` are in flight; a refusal leaves the state as is.
    #[inline]
    pub fn acquire(&self, state: u64, now: u64) -> (u64, Verdict) {
        self.acquire_units(state, now, 1)
    }

    /// Takes a permit worth `units` slots (a limit's `cost`) if they all fit under `max`; a
    /// refusal leaves the state as is.
    #[inline]
    pub fn acquire_units(&self, state: u64, now: u64, units: u64) -> (u64, Verdict) {
        self.acquire_capped(state, now, units, self.max)
    }

    /// [`Concurrency::acquire_units`] under `max` instead of this limiter's own.
    #[inline]
    pub fn acquire_capped(&self, state: u64, now: u64, units: u64, max: u64) -> (u64, Verdict) {
        let units = units.max(1);
        let bucket = self.bucket_of(state, now);
        let c = packed::read(state, bucket);
        let held = c.prev + c.cur;
        let mut verdict = Verdict {
            decision: Decision::Pass,
            wait_ns: 0,
            retry_after_ns: 0,
            limit: max,
            remaining: Remaining::units(max.saturating_sub(held + units)),
            reset_ns: 0,
        };
        if held + units > max {
            verdict.decision = Decision::Reject;
            verdict.remaining = Remaining::units(0);
            return (state, verdict);
        }
        (
            packed::write(
                bucket,
                Counts {
                    prev: c.prev,
                    cur: c.cur + units,
                },
            ),
            verdict,
        )
    }

    /// Gives back a permit counted in `bucket`; a permit whose lease has run out is already
    /// gone, and releasing it changes nothing.
    #[inline]
    pub fn release(&self, state: u64, now: u64, bucket: u64) -> u64 {
        self.release_units(state, now, bucket, 1)
    }

    /// Gives back a permit taken with [`Concurrency::acquire_units`] (the same `units`).
    #[inline]
    pub fn release_units(&self, state: u64, now: u64, bucket: u64, units: u64) -> u64 {
        let units = units.max(1);
        let id = self.bucket_of(state, now);
        let mut c = packed::read(state, id);
        match id.wrapping_sub(bucket) {
            0 => c.cur = c.cur.saturating_sub(units),
            1 => c.prev = c.prev.saturating_sub(units),
            _ => return state,
        }
        packed::write(id, c)
    }

    /// Moves a permit counted in `bucket` into the current bucket (a fresh lease), without
    /// checking the limit: the request already holds it. Returns the new state and bucket.
    pub fn renew(&self, state: u64, now: u64, bucket: u64) -> (u64, u64) {
        self.renew_units(state, now, bucket, 1)
    }

    /// [`Concurrency::renew`] for a permit taken with [`Concurrency::acquire_units`] (the
    /// same `units`). A permit in the current bucket, or expired, stays where it is.
    pub fn renew_units(&self, state: u64, now: u64, bucket: u64, units: u64) -> (u64, u64) {
        let id = self.bucket_of(state, now);
        if id.wrapping_sub(bucket) != 1 {
            // Current: nothing to move. Expired: the permit is gone; re-adding it could
            // exceed `max`.
            return (state, bucket);
        }
        let released = self.release_units(state, now, bucket, units);
        let mut c = packed::read(released, id);
        c.cur = (c.cur + units.max(1)).min(MAX_COUNT);
        (packed::write(id, c), id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: u64 = 10 * NS_PER_SEC;

    #[test]
    fn admits_up_to_max_and_releases() {
        let c = Concurrency::new(2, L).unwrap();
        let (s, v1) = c.acquire(0, 1);
        let (s, v2) = c.acquire(s, 2);
        let (s2, v3) = c.acquire(s, 3);
        assert!(v1.admitted() && v2.admitted() && !v3.admitted());
        assert_eq!(s2, s);
        let s = c.release(s, 4, c.bucket(1));
        assert_eq!(c.in_flight(s, 5), 1);
        let s = c.release(s, 5, c.bucket(2));
        assert_eq!(s, 0);
        // A second release of the same permit never goes below zero.
        assert_eq!(c.release(s, 6, c.bucket(2)), 0);
    }

    /// Two threads (or processes) read the clock on either side of a lease boundary; the
    /// later one writes first. The earlier one's steps act in the later bucket: nothing is
    /// wiped, and a permit renewed into the later bucket is released from it.
    #[test]
    fn a_step_with_a_clock_just_behind_keeps_the_counts() {
        let c = Concurrency::new(3, L).unwrap();
        let (s, _) = c.acquire(0, L - 1);
        let (s, late) = c.acquire(s, L + 1); // the next bucket
        assert!(late.admitted());
        let (s, early) = c.acquire(s, L - 2); // read just before the boundary
        assert!(early.admitted());
        assert_eq!(c.in_flight(s, L - 2), 3);
        assert_eq!(c.in_flight(s, L + 2), 3);
        let (full, v) = c.acquire(s, L - 2);
        assert!(!v.admitted());
        assert_eq!(full, s);
        // A permit renewed into bucket 1 and released with a clock still in bucket 0.
        let (s, b) = c.renew(s, L + 3, 0);
        assert_eq!(b, 1);
        let s = c.release(s, L - 1, b);
        assert_eq!(c.in_flight(s, L + 4), 2);
    }

    #[test]
    fn units_take_several_slots() {
        let c = Concurrency::new(4, L).unwrap();
        let (s, v) = c.acquire_units(0, 1, 2);
        assert_eq!((v.admitted(), v.remaining.get()), (true, 2));
        let (s, v) = c.acquire_units(s, 2, 3);
        assert!(!v.admitted());
        let (s, v) = c.acquire_units(s, 3, 2);
        assert!(v.admitted());
        assert_eq!(c.in_flight(s, 4), 4);
        let s = c.release_units(s, 5, c.bucket(1), 2);
        assert_eq!(c.in_flight(s, 6), 2);
    }

    #[test]
    fn leases_expire_after_one_to_two_lease_periods() {
        let c = Concurrency::new(1, L).unwrap();
        let (s, _) = c.acquire(0, L - 1);
        assert_eq!(c.in_flight(s, 2 * L - 1), 1);
        assert_eq!(c.in_flight(s, 2 * L), 0);
        // A release after expiry leaves the new holder's permit alone.
        let (s, v) = c.acquire(s, 2 * L);
        assert!(v.admitted());
        let s = c.release(s, 2 * L + 1, c.bucket(L - 1));
        assert_eq!(c.in_flight(s, 2 * L + 1), 1);
    }

    #[test]
    fn renew_moves_the_permit_forward() {
        let c = Concurrency::new(1, L).unwrap();
        let (s, _) = c.acquire(0, 0);
        let (s, b) = c.renew(s, L + 1, 0);
        assert_eq!(b, 1);
        assert_eq!(c.in_flight(s, 2 * L + 1), 1);
        assert_eq!(c.release(s, 2 * L + 1, b), 0);
    }

    #[test]
    fn renewing_units_keeps_the_count_and_leaves_expired_permits_gone() {
        let c = Concurrency::new(4, L).unwrap();
        let (s, _) = c.acquire_units(0, 0, 3);
        assert_eq!(c.renew_units(s, 1, 0, 3), (s, 0), "current: unchanged");
        let (s, b) = c.renew_units(s, L, 0, 3);
        assert_eq!((b, c.in_flight(s, 2 * L + 1)), (1, 3));
        assert_eq!(c.renew_units(s, 3 * L, b, 3), (s, b), "expired: stays gone");
        assert_eq!(c.in_flight(c.release_units(s, L + 1, b, 3), L + 1), 0);
    }
}
