//! The `window id : 24 | previous : 20 | current : 20` packing shared by the sliding window
//! and the concurrency lease buckets.
//!
//! Window ids are stored modulo 2^24; a state untouched for exactly a multiple of 2^24 windows
//! would be misread as current (at 1 s windows that is 194 days; the table normally evicts such
//! states long before).

/// Largest count one field holds.
pub const MAX_COUNT: u64 = (1 << 20) - 1;
const ID_MASK: u64 = (1 << 24) - 1;

/// How many windows a caller's clock may trail a state's and still have the state's window
/// taken as its own (see [`window`]).
pub const MAX_BEHIND: u64 = 2;

/// The window a step on `state` at window `id` acts in: `id`, or the state's window when that
/// is up to [`MAX_BEHIND`] windows later. Another thread or process that read the clock a
/// moment later may already have written the next window; stepping from an earlier one would
/// read its counts as gone and wipe them (admitting too many), or miss a permit renewed into
/// it (counting one too many until its lease ends).
#[inline]
pub fn window(state: u64, id: u64) -> u64 {
    let ahead = (state >> 40).wrapping_sub(id) & ID_MASK;
    if state != 0 && (1..=MAX_BEHIND).contains(&ahead) {
        id + ahead
    } else {
        id
    }
}

/// Counts of the current window and the one before it, as seen from window `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub prev: u64,
    pub cur: u64,
}

/// Reads `state` as seen from window `id` (already rolled forward: a state from the previous
/// window has its current count moved to `prev`; older states read as empty).
#[inline]
pub fn read(state: u64, id: u64) -> Counts {
    if state == 0 {
        return Counts { prev: 0, cur: 0 };
    }
    let prev = (state >> 20) & MAX_COUNT;
    let cur = state & MAX_COUNT;
    match id.wrapping_sub(state >> 40) & ID_MASK {
        0 => Counts { prev, cur },
        1 => Counts { prev: cur, cur: 0 },
        _ => Counts { prev: 0, cur: 0 },
    }
}

/// Packs counts for window `id`; both counts must be ≤ [`MAX_COUNT`]. All-zero counts pack
/// to 0, the absent state.
#[inline]
pub fn write(id: u64, c: Counts) -> u64 {
    debug_assert!(c.prev <= MAX_COUNT && c.cur <= MAX_COUNT);
    if c.prev == 0 && c.cur == 0 {
        return 0;
    }
    ((id & ID_MASK) << 40) | (c.prev << 20) | c.cur
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_slightly_behind_takes_the_states_window() {
        let s = write(7, Counts { prev: 3, cur: 5 });
        assert_eq!(window(s, 7), 7, "same window");
        assert_eq!(window(s, 6), 7, "one behind");
        assert_eq!(window(s, 5), 7, "two behind");
        assert_eq!(window(s, 4), 4, "further behind: as read");
        assert_eq!(window(s, 8), 8, "ahead of the state");
        assert_eq!(window(0, 4), 4, "no state");
    }

    #[test]
    fn rolls_forward() {
        let s = write(7, Counts { prev: 3, cur: 5 });
        assert_eq!(read(s, 7), Counts { prev: 3, cur: 5 });
        assert_eq!(read(s, 8), Counts { prev: 5, cur: 0 });
        assert_eq!(read(s, 9), Counts { prev: 0, cur: 0 });
        assert_eq!(write(9, Counts { prev: 0, cur: 0 }), 0);
    }

    #[test]
    fn ids_wrap_at_24_bits() {
        let s = write(ID_MASK, Counts { prev: 0, cur: 4 });
        assert_eq!(read(s, ID_MASK + 1), Counts { prev: 4, cur: 0 });
    }
}
