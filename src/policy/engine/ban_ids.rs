//! Ban ids (see `bans`): a limit's bans are stored under an id made of its name and of a
//! generation that its zone keeps for the name, in the zone's own table, so that the id lasts
//! exactly as long as the bans stored under it.
//!
//! A zone's table holds, under fixed hashes: `gen(name)`, the name's generation; `dir(i)` for
//! `i < count`, the names that have one; `count`. Every state has bit 63 set (never 0, and
//! ranked high by the algorithms' eviction). They are written only when an engine is built
//! over the zone (nginx: in the master, during a reload), never on the request path: names
//! that enforce `ban` on the zone keep their generation or draw one, the generations of the
//! other names are dropped. A name that comes back gets a new one, so the bans stored under
//! its old id are never seen again (the zone evicts them as they end).

use super::*;
use crate::table::Table;

/// Set in every state written here.
const LIVE: u64 = 1 << 63;
const GEN_SALT: u64 = 0x4745_4e5f_4241_4e53;
const DIR_SALT: u64 = 0x4449_525f_4241_4e53;
/// Most names a zone's directory is read for (policies have fewer limits).
const MAX_NAMES: u64 = 1 << 20;

/// A 64-bit mix (splitmix64's finalizer), never 0.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (x ^ (x >> 31)).max(1)
}

fn gen_at(name: u64) -> u64 {
    mix(name ^ GEN_SALT)
}

fn dir_at(i: u64) -> u64 {
    mix(DIR_SALT.wrapping_add(i + 1))
}

fn count_at() -> u64 {
    mix(DIR_SALT)
}

/// A limit name's id (FNV-1a of its bytes, 63 bits).
fn name_id(name: &str) -> u64 {
    let h = (name.bytes()).fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    });
    h & !LIVE
}

impl Engine {
    /// Per limit: its ban id, 0 for a limit that enforces no ban (no `ban`, or dry run).
    /// Updates the zones' generations (see the module's description).
    pub(super) fn ban_ids(&self, now: u64) -> Vec<u64> {
        let limits = &self.policy.limits;
        let mut ids = vec![0; limits.len()];
        for (z, table) in self.tables.iter().enumerate() {
            if self.logs[z].is_some() {
                continue; // no ban on sliding_log zones, whose slots are no table's
            }
            let banning: Vec<usize> = (0..limits.len())
                .filter(|&i| limits[i].zone == z && limits[i].ban.is_some() && !limits[i].dry_run)
                .collect();
            let names: Vec<u64> = banning.iter().map(|&i| name_id(&limits[i].name)).collect();
            for ((i, name), generation) in banning
                .iter()
                .zip(&names)
                .zip(generations(table, &names, now))
            {
                ids[*i] = mix(name ^ generation.rotate_left(17));
            }
        }
        ids
    }
}

/// The generations of `names` in `table` (kept, or drawn for names without one), after
/// dropping those of every other name.
fn generations(table: &Table, names: &[u64], now: u64) -> Vec<u64> {
    let get = |h: u64| table.peek(h).filter(|s| s & LIVE != 0).map(|s| s & !LIVE);
    let put = |h: u64, value: Option<u64>| {
        let state = value.map_or(0, |v| v | LIVE);
        // Inserting into a full window evicts an expired state, else any but these.
        let rank = |s: u64, _| if s & LIVE != 0 { u64::MAX } else { s.min(1) };
        table.update(h, now, rank, |_, _| (state, ()), true);
    };
    let count = get(count_at()).unwrap_or(0).min(MAX_NAMES);
    for i in 0..count {
        if let Some(name) = get(dir_at(i)).filter(|n| !names.contains(n)) {
            put(gen_at(name), None);
        }
    }
    let generations = (names.iter())
        .map(|&name| {
            get(gen_at(name)).unwrap_or_else(|| {
                let g = (crate::policy::counters::random_seed() & !LIVE).max(1);
                put(gen_at(name), Some(g));
                g
            })
        })
        .collect();
    for (i, &name) in names.iter().enumerate() {
        put(dir_at(i as u64), Some(name));
    }
    for i in names.len() as u64..count {
        put(dir_at(i), None);
    }
    if count > 0 || !names.is_empty() {
        put(count_at(), Some(names.len() as u64));
    }
    generations
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_lasts_while_its_name_is_listed_and_is_drawn_anew_after() {
        let table = Table::new(64 * 1024, 0, 0).unwrap();
        let (a, b, c) = (name_id("a"), name_id("b"), name_id("c"));
        let first = generations(&table, &[a, b], 0);
        // Reordered, with a name added: the same generations.
        let again = generations(&table, &[c, b, a], 0);
        assert_eq!((again[1], again[2]), (first[1], first[0]));
        // `a` left for one build: it comes back with another generation; `b` kept its own.
        generations(&table, &[b, c], 0);
        let back = generations(&table, &[a, b], 0);
        assert_ne!(back[0], first[0]);
        assert_eq!(back[1], first[1]);
        // None left: nothing is kept.
        generations(&table, &[], 0);
        assert_ne!(generations(&table, &[b], 0)[0], first[1]);
    }
}
