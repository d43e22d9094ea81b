//! Which rejections name their key and client, and with what weight: naming costs about
//! 2,200 instructions, so under a flood only a sample is named, each with the weight of the
//! rejections it stands for.
//!
//! Rule, per limit and second (its rejection count in the per-second history, which every
//! process sharing the counters adds to, so the `n`th rejection of the second gets count `n`):
//! the first [`FULL`] rejections are each named with weight 1; beyond, the counts are cut in
//! runs of [`EVERY`] (`FULL + 1 ..= FULL + EVERY`, …) and the one rejection of each run at an
//! offset drawn by a hash of the second, the limit and the run is named with weight `EVERY`.
//!
//! Accuracy: a key's summed weight is its exact count for named-in-full rejections, and for
//! sampled ones an unbiased estimate: each run adds `EVERY` with probability `p` (the key's
//! share of the run) and 0 otherwise, runs independently (a periodic stream cannot stay in
//! step with the offsets), so the error has a standard deviation of at most `√(EVERY · r)`
//! for `r` sampled rejections of the key (4% at r = 10,000). A limit's summed weight is its
//! rejections to within `EVERY − 1` per second (the last, partial run). The summary's own
//! Space-Saving bound then applies to the summed weights (`summary`).

/// Rejections of a limit per second that are all named.
pub const FULL: u64 = 512;
/// Beyond [`FULL`], one rejection in this many is named (a power of two).
pub const EVERY: u64 = 16;

/// The weight with which rejection `count` (1-based) of limit `limit` in `second` is named;
/// 0 when it is not named.
pub fn weight(count: u64, second: u32, limit: usize) -> u64 {
    if count <= FULL {
        return 1;
    }
    let beyond = count - FULL - 1;
    let run = beyond / EVERY;
    let draw = mix(u64::from(second) << 32 ^ (limit as u64) << 24 ^ run);
    if beyond % EVERY == draw % EVERY {
        EVERY
    } else {
        0
    }
}

/// A 64-bit finalizer (SplitMix64's): every input bit moves every output bit.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_rejections_are_named_then_one_per_run_with_its_weight() {
        assert!((1..=FULL).all(|c| weight(c, 7, 0) == 1));
        for run in 0..1_000 {
            let at = FULL + 1 + run * EVERY;
            let named: Vec<u64> = (at..at + EVERY)
                .map(|c| weight(c, 7, 0))
                .filter(|&w| w > 0)
                .collect();
            assert_eq!(named, [EVERY], "run {run}");
        }
    }

    #[test]
    fn offsets_vary_with_the_run_the_second_and_the_limit() {
        let offsets = |second: u32, limit: usize| -> Vec<u64> {
            (0..256)
                .map(|run| {
                    let at = FULL + 1 + run * EVERY;
                    (0..EVERY)
                        .find(|o| weight(at + o, second, limit) > 0)
                        .unwrap()
                })
                .collect()
        };
        let a = offsets(7, 0);
        // Every offset drawn within 256 runs, and other seconds and limits draw others.
        assert!((0..EVERY).all(|o| a.contains(&o)), "{a:?}");
        assert_ne!(a, offsets(8, 0));
        assert_ne!(a, offsets(7, 1));
    }
}
