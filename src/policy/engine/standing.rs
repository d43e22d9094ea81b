//! A concurrency queue that stands (CoDel's rule) and its order: first come, first served
//! while the queue moves; once it stands, old waiters are refused early and the newest is
//! served first (adaptive LIFO: the oldest waiter's client has often given up already).
//!
//! A queue stands when, over an interval of [`STANDING_INTERVAL_NS`], no waiter that got its
//! slot waited less than [`STANDING_TARGET_NS`], or a waiter was refused for waiting too long.
//! The second rule keeps it standing while the newest are served first (their waits are
//! short; the old ones' are not). The state is one word per queue in the zone's table (shared
//! by every process on the zone), updated when a waiter is served or refused.

use super::*;

const STANDING_SALT: u64 = 0x5354_414e_4449_4e47;

/// A queue is standing when no waiter admitted within an interval waited less than
/// [`STANDING_TARGET_NS`] (CoDel's rule).
pub const STANDING_INTERVAL_NS: u64 = 100_000_000;
pub const STANDING_TARGET_NS: u64 = 5_000_000;
/// While a queue is standing, a waiter is refused once it has waited this long, or the
/// backend's no-load latency when that is longer (and never beyond the limit's `timeout`).
pub const STANDING_DEADLINE_NS: u64 = 10_000_000;

/// A standing state older than this (no waiter served or refused since) decides nothing.
const STALE_NS: u64 = 10 * STANDING_INTERVAL_NS;

/// Interval starts are kept in units of 2²⁰ ns (about 1 ms).
const UNIT_SHIFT: u32 = 20;
const WAIT_MAX_US: u64 = (1 << 20) - 1;

/// The word: `start:42 | shortest:20 | refused:1 | standing:1` — the current interval's start
/// (in [`UNIT_SHIFT`] units), the shortest wait of a waiter served in it (µs, saturated; the
/// maximum when none was), whether a waiter was refused in it for waiting too long, and
/// whether the queue stood at the end of the last interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Word {
    start: u64,
    shortest_us: u64,
    refused: bool,
    standing: bool,
}

impl Word {
    fn read(s: u64) -> Word {
        Word {
            start: s >> 22,
            shortest_us: (s >> 2) & WAIT_MAX_US,
            refused: s & 2 != 0,
            standing: s & 1 != 0,
        }
    }

    fn write(self) -> u64 {
        (self.start & ((1 << 42) - 1)) << 22
            | self.shortest_us << 2
            | u64::from(self.refused) << 1
            | u64::from(self.standing)
    }

    fn unit(now: u64) -> u64 {
        (now >> UNIT_SHIFT) & ((1 << 42) - 1)
    }

    /// Nanoseconds from the interval's start to `now`.
    fn age(self, now: u64) -> u64 {
        (Word::unit(now).wrapping_sub(self.start) & ((1 << 42) - 1)) << UNIT_SHIFT
    }

    /// The word after an event at `now`: a waiter served after `waited_us`, or (`None`) one
    /// refused for waiting too long. An interval that has ended decides `standing` first.
    fn record(state: u64, now: u64, waited_us: Option<u64>) -> u64 {
        let mut w = Word::read(state);
        if state == 0 || w.age(now) >= STANDING_INTERVAL_NS {
            // The interval ended (a stale one says nothing).
            let stood = state != 0
                && w.age(now) < STALE_NS
                && (w.refused || w.shortest_us * 1000 > STANDING_TARGET_NS);
            w = Word {
                start: Word::unit(now),
                shortest_us: WAIT_MAX_US,
                refused: false,
                standing: stood,
            };
        }
        match waited_us {
            Some(us) => w.shortest_us = w.shortest_us.min(us),
            None => w.refused = true,
        }
        w.write()
    }

    /// Whether the queue stands at `now`: it stood at the end of the last interval, and
    /// something happened since [`STALE_NS`] (a waiter refused for waiting too long keeps a
    /// stuck backend's queue standing).
    fn stands(state: u64, now: u64) -> bool {
        let w = Word::read(state);
        w.standing && w.age(now) < STALE_NS
    }
}

impl Engine {
    /// Whether limit `l`'s queue for `key_hash` stands at `now` (engine clock).
    fn stands(&self, l: usize, key_hash: u64, now: u64) -> bool {
        let table = &self.tables[self.policy.limits[l].zone];
        let rel = now.saturating_sub(table.clock_base());
        table
            .peek(key_hash ^ STANDING_SALT)
            .is_some_and(|s| Word::stands(s, rel))
    }

    fn record_wait(&self, l: usize, key_hash: u64, waited_us: Option<u64>, now: u64) {
        let table = &self.tables[self.policy.limits[l].zone];
        table.update(
            key_hash ^ STANDING_SALT,
            now,
            |_, _| 1,
            |s, now| (Word::record(s, now, waited_us), ()),
            true,
        );
    }

    /// Whether a waiter of limit `l` for `key_hash` that has waited `waited_ns` at `now`
    /// should be refused: its queue stands and it waited past the standing deadline. A
    /// refusal is recorded (it keeps the queue standing).
    pub(super) fn drop_waiter(&self, l: usize, key_hash: u64, waited_ns: u64, now: u64) -> bool {
        if !self.stands(l, key_hash, now) {
            return false;
        }
        let limit = &self.policy.limits[l];
        let noload = match (
            &self.samplers[l],
            self.tables[limit.zone].peek(key_hash ^ super::capacity::CONTROL_SALT),
        ) {
            (Some(a), Some(c)) => a.noload_ns(c),
            _ => 0,
        };
        let drop = waited_ns >= STANDING_DEADLINE_NS.max(noload).min(limit.timeout_ns());
        if drop {
            self.record_wait(l, key_hash, None, now);
        }
        drop
    }

    /// A waiter of limit `l` got its slot at `now` after `waited_ns`: its wait feeds the wait
    /// histogram and the standing rule (CoDel's sojourn time, taken when a waiter is served:
    /// one that timed out or left says nothing of how fast the queue moves).
    pub(super) fn served(&self, l: usize, key_hash: u64, waited_ns: u64, now: u64) {
        self.counters.saturation().waited(l, waited_ns);
        self.record_wait(l, key_hash, Some((waited_ns / 1000).min(WAIT_MAX_US)), now);
    }

    /// Whether a slot freed for `queue` ([`QueueTicket::queue`], [`Permits::queues`]) should
    /// go to its newest waiter (the queue stands) rather than its oldest, at `now`. Hosts that
    /// keep their waiters in order ask this when they wake one.
    pub fn queue_lifo(&self, queue: QueueId, now: u64) -> bool {
        let l = usize::from(queue.limit);
        matches!(self.limiters.get(l), Some(Limiter::Concurrency(_)))
            && self.stands(l, queue.key_hash, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_queue_stands_when_every_served_waiter_waited_long() {
        let mut s = 0;
        for i in 0..10 {
            s = Word::record(s, i * 10 * MS, Some(20_000));
        }
        assert!(
            !Word::stands(s, 99 * MS),
            "the first interval decides at its end"
        );
        s = Word::record(s, 101 * MS, Some(20_000));
        assert!(Word::stands(s, 102 * MS));
        // One quick waiter in an interval: the queue moves again.
        s = Word::record(s, 150 * MS, Some(1_000));
        s = Word::record(s, 205 * MS, Some(20_000));
        assert!(!Word::stands(s, 206 * MS));
    }

    #[test]
    fn refusals_keep_it_standing_while_the_newest_are_served_quickly() {
        let mut s = 0;
        s = Word::record(s, 0, Some(20_000));
        s = Word::record(s, 101 * MS, Some(20_000));
        assert!(Word::stands(s, 101 * MS));
        for i in 0..10 {
            // LIFO: the newest waited 1 ms, an old one was refused.
            s = Word::record(s, 110 * MS + i * 20 * MS, Some(1_000));
            s = Word::record(s, 111 * MS + i * 20 * MS, None);
            assert!(Word::stands(s, 112 * MS + i * 20 * MS), "at step {i}");
        }
    }

    #[test]
    fn a_stale_state_decides_nothing() {
        let mut s = Word::record(0, 0, Some(20_000));
        s = Word::record(s, 101 * MS, Some(20_000));
        assert!(Word::stands(s, 900 * MS));
        assert!(!Word::stands(s, 1200 * MS));
        // The next event after a long quiet starts afresh.
        s = Word::record(s, 10_000 * MS, Some(20_000));
        assert!(!Word::stands(s, 10_001 * MS));
    }

    #[test]
    fn words_round_trip() {
        let w = Word {
            start: (1 << 42) - 1,
            shortest_us: WAIT_MAX_US,
            refused: true,
            standing: false,
        };
        assert_eq!(Word::read(w.write()), w);
    }
}
