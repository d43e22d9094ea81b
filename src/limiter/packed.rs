//! The `window id : 24 | previous : 20 | current : 20` packing shared by the sliding window
//! and the concurrency lease buckets.
//!
//! Window ids are stored modulo 2^24; a state untouched for exactly a multiple of 2^24 windows
//! would be misread as current (at 1 s windows that is 194 days; the table normally evicts such
//! states long before).

/// Largest count one field holds.
pub const MAX_COUNT: u64 = (1 << 20) - 1;
const ID_MASK: u64 = (1 << 24) - 1;

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
