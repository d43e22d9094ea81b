//! Ban periods as a pure function on a packed 64-bit state, kept in a limit's own table under
//! a derived key (see `policy::engine`'s bans).
//!
//! State: `0` nothing recorded; bit 63 clear: counting, `window start (ms) : 43 | strikes : 20`
//! (a fixed window of `within` opened by the first strike); bit 63 set: banned until the
//! remaining 63 bits (ns). A strike is one rejection of the key by its limit; the strike that
//! makes the `after`-th of a window turns the state to banned, and only that transition
//! reports the ban (so a ban is announced once, whichever thread or process makes it).

use super::{ParamError, MAX_COUNT};

const BANNED: u64 = 1 << 63;
const NS_PER_MS: u64 = 1_000_000;

/// A ban's parameters: `after` strikes within `within_ns` ban the key for `duration_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ban {
    after: u64,
    within_ns: u64,
    duration_ns: u64,
}

impl Ban {
    /// `after` in 1..=[`MAX_COUNT`]; `within_ns` at least 1 ms; `duration_ns` at least 1 ms
    /// and below 2^62 ns.
    pub fn new(after: u64, within_ns: u64, duration_ns: u64) -> Result<Ban, ParamError> {
        if !(1..=MAX_COUNT).contains(&after) {
            return Err(ParamError(format!(
                "ban after must be between 1 and {MAX_COUNT}, not {after}"
            )));
        }
        if within_ns < NS_PER_MS || !(NS_PER_MS..1 << 62).contains(&duration_ns) {
            return Err(ParamError(
                "ban within and duration must be at least 1ms (and duration below 140 years)"
                    .into(),
            ));
        }
        Ok(Ban {
            after,
            within_ns,
            duration_ns,
        })
    }

    pub fn after(&self) -> u64 {
        self.after
    }

    pub fn duration_ns(&self) -> u64 {
        self.duration_ns
    }

    /// How long the key is still banned at `now`, if it is.
    #[inline]
    pub fn left(&self, state: u64, now: u64) -> Option<u64> {
        let until = state & !BANNED;
        (state & BANNED != 0 && now < until).then(|| until - now)
    }

    /// One strike at `now`: the new state, and the ban's end when this strike starts a ban.
    /// A strike on a banned key changes nothing.
    #[inline]
    pub fn strike(&self, state: u64, now: u64) -> (u64, Option<u64>) {
        if self.left(state, now).is_some() {
            return (state, None);
        }
        let now_ms = now / NS_PER_MS;
        let (start_ms, strikes) = match state {
            s if s & BANNED == 0 && s != 0 => (s >> 20, s & MAX_COUNT),
            _ => (now_ms, 0),
        };
        let (start_ms, strikes) = if now_ms.saturating_sub(start_ms) * NS_PER_MS >= self.within_ns {
            (now_ms, 1)
        } else {
            (start_ms, strikes + 1)
        };
        if strikes >= self.after {
            let until = now.saturating_add(self.duration_ns).min(!BANNED);
            (BANNED | until, Some(until))
        } else {
            ((start_ms << 20) | strikes, None)
        }
    }

    /// How much the state still matters at `now` (0: as good as absent; the table evicts by it).
    #[inline]
    pub fn residual(&self, state: u64, now: u64) -> u64 {
        if state & BANNED != 0 {
            return (state & !BANNED).saturating_sub(now);
        }
        if state == 0 {
            return 0;
        }
        ((state >> 20) * NS_PER_MS)
            .saturating_add(self.within_ns)
            .saturating_sub(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn ban() -> Ban {
        Ban::new(3, 60 * S, 600 * S).unwrap()
    }

    #[test]
    fn the_after_th_strike_within_the_window_bans_once() {
        let b = ban();
        let (s, e) = b.strike(0, 10 * S);
        assert_eq!(e, None);
        let (s, e) = b.strike(s, 20 * S);
        assert_eq!(e, None);
        let (s, e) = b.strike(s, 30 * S);
        assert_eq!(e, Some(630 * S));
        assert_eq!(b.left(s, 30 * S), Some(600 * S));
        // Further strikes change nothing and announce nothing.
        assert_eq!(b.strike(s, 40 * S), (s, None));
        assert_eq!(b.left(s, 630 * S), None);
        assert_eq!(b.residual(s, 630 * S), 0);
    }

    #[test]
    fn strikes_outside_the_window_start_a_new_one() {
        let b = ban();
        let (s, _) = b.strike(0, 0);
        let (s, _) = b.strike(s, 59 * S);
        // The window opened at 0 has closed: this is the first strike of a new one.
        let (s, e) = b.strike(s, 60 * S);
        assert_eq!(e, None);
        let (s, e) = b.strike(s, 61 * S);
        assert_eq!(e, None);
        assert_eq!(b.strike(s, 62 * S).1, Some(662 * S));
    }

    #[test]
    fn an_expired_ban_counts_from_scratch() {
        let b = Ban::new(2, 60 * S, S).unwrap();
        let (s, _) = b.strike(0, 0);
        let (s, e) = b.strike(s, 1);
        assert!(e.is_some());
        let (s, e) = b.strike(s, 2 * S);
        assert_eq!(e, None);
        assert_eq!(b.left(s, 2 * S), None);
        assert_eq!(b.strike(s, 3 * S).1, Some(4 * S));
    }

    #[test]
    fn after_one_bans_on_the_first_strike() {
        let b = Ban::new(1, S, S).unwrap();
        assert_eq!(b.strike(0, 5).1, Some(S + 5));
        assert!(Ban::new(0, S, S).is_err());
        assert!(Ban::new(1, 0, S).is_err());
    }
}
