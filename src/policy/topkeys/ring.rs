//! A limit's per-second history: `SECONDS` slots of 4 words, slot `s % SECONDS` for second
//! `s` (CLOCK_MONOTONIC seconds, kept modulo 2³²):
//!
//! `[0]` the second whose passed total `[1]` holds: the limit's passed count when that second
//! was first sampled (by a delay, a rejection or a status read in it); `[2]` delayed and `[3]`
//! rejected, each `second << 32 | count`.
//!
//! Delays and rejections add to their word: `fetch_add` when it is stamped with this second,
//! else one compare-exchange to `second << 32 | 1` (retried on a race: the loser then finds
//! the new second and adds). Passes cost the pass path nothing: second `s` passed
//! `total(s + 1) − total(s)` when both seconds were sampled, and is unknown otherwise.

use std::sync::atomic::Ordering::*;

use super::atom::Atom;

/// Seconds of history.
pub const SECONDS: usize = 900;
pub(super) const SLOT_WORDS: usize = 4;

/// One limit's ring.
pub struct Ring<'a, A> {
    pub words: &'a [A],
}

/// Adds one to a `second << 32 | count` word for `second`; the count after it (each caller
/// of a second gets its own).
fn bump(w: &impl Atom, second: u32) -> u64 {
    let mut cur = w.load(Relaxed);
    loop {
        if (cur >> 32) as u32 == second {
            return (w.fetch_add(1, Relaxed) & 0xffff_ffff) + 1;
        }
        match w.compare_exchange(cur, u64::from(second) << 32 | 1, Relaxed, Relaxed) {
            Ok(_) => return 1,
            Err(now) => cur = now,
        }
    }
}

fn count_in(w: &impl Atom, second: u32) -> u64 {
    let v = w.load(Relaxed);
    if (v >> 32) as u32 == second {
        v & 0xffff_ffff
    } else {
        0
    }
}

/// A limit's last [`SECONDS`] seconds, oldest first; the last is second `end`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerSecond {
    pub end: u64,
    /// `None` where the second's passes are unknown (see the module documentation).
    pub passed: Vec<Option<u64>>,
    pub delayed: Vec<u64>,
    pub rejected: Vec<u64>,
}

impl<A: Atom> Ring<'_, A> {
    fn slot(&self, second: u32) -> &[A] {
        // SECONDS slots in a region; fewer in the loom models.
        let i = second as usize % (self.words.len() / SLOT_WORDS) * SLOT_WORDS;
        &self.words[i..i + SLOT_WORDS]
    }

    /// Records the limit's passed `total` as of `second` unless that second has one.
    pub fn sample(&self, second: u32, total: impl FnOnce() -> u64) {
        let s = self.slot(second);
        if s[0].load(Acquire) != u64::from(second) {
            s[1].store(total(), Relaxed);
            s[0].store(u64::from(second), Release);
        }
    }

    pub fn delayed(&self, second: u32) {
        bump(&self.slot(second)[2], second);
    }

    /// Counts a rejection in `second`; its number in that second (1 for the first).
    pub fn rejected(&self, second: u32) -> u64 {
        bump(&self.slot(second)[3], second)
    }

    /// Rejections counted in `second` (0 once its slot holds another second).
    pub fn rejected_in(&self, second: u32) -> u64 {
        count_in(&self.slot(second)[3], second)
    }

    /// The passed total sampled in `second`, if any.
    fn total_at(&self, second: u32) -> Option<u64> {
        let s = self.slot(second);
        let stamp = s[0].load(Acquire);
        let t = s[1].load(Relaxed);
        A::fence(Acquire);
        (stamp == u64::from(second) && s[0].load(Relaxed) == stamp).then_some(t)
    }

    /// The history up to second `end`, whose passed total is `live` now.
    pub fn read(&self, end: u64, live: u64) -> PerSecond {
        let mut p = PerSecond {
            end,
            ..PerSecond::default()
        };
        for back in (0..SECONDS as u64).rev() {
            let Some(sec) = end.checked_sub(back) else {
                // Before the clock's start (a machine up for less than the history).
                p.passed.push(None);
                p.delayed.push(0);
                p.rejected.push(0);
                continue;
            };
            let s = sec as u32;
            let next = if sec == end {
                Some(live)
            } else {
                self.total_at(s.wrapping_add(1))
            };
            let passed = match (self.total_at(s), next) {
                (Some(a), Some(b)) => Some(b.saturating_sub(a)),
                _ => None,
            };
            p.passed.push(passed);
            p.delayed.push(count_in(&self.slot(s)[2], s));
            p.rejected.push(self.rejected_in(s));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn seconds_are_counted_in_their_slot_and_old_seconds_read_as_zero() {
        let w: Vec<AtomicU64> = (0..SECONDS * SLOT_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        let r = Ring { words: &w };
        let mut passed = 10;
        for sec in 1000..1003u32 {
            r.sample(sec, || passed);
            for _ in 0..sec - 998 {
                r.rejected(sec);
            }
            r.delayed(sec);
            passed += 5;
        }
        r.sample(1003, || passed);
        let p = r.read(1003, passed);
        assert_eq!(p.rejected.len(), SECONDS);
        let tail = |v: &[u64]| v[SECONDS - 4..].to_vec();
        assert_eq!(tail(&p.rejected), [2, 3, 4, 0]);
        assert_eq!(tail(&p.delayed), [1, 1, 1, 0]);
        let pt = p.passed[SECONDS - 4..].to_vec();
        assert_eq!(pt, [Some(5), Some(5), Some(5), Some(0)]);
        assert_eq!(p.passed[SECONDS - 5], None);
        // The same slot, 900 s later: the old second's counts are gone.
        r.rejected(1000 + SECONDS as u32);
        let later = r.read(1000 + SECONDS as u64, passed);
        assert_eq!(later.rejected[SECONDS - 1], 1);
        assert_eq!(later.rejected[0], 3, "second 1001 is still in the window");
    }
}
