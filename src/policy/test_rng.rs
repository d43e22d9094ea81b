//! A seeded xorshift64 generator for the randomized tests of this module's parsers: the same
//! sequence on every run, no dependency.

/// The generator's next-value function, starting from `seed` (not 0).
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
