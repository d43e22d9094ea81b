//! Bounded-memory counting: heavy hitters (Space-Saving) and distinct counts (exact up to a cap,
//! then HyperLogLog). Memory depends on the configured capacities, never on the log size.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasher, Hash};

/// Space-Saving (Metwally et al.): tracks at most `cap` items; any item whose true count exceeds
/// total/cap is guaranteed to be present. Counts are exact while fewer than `cap` distinct items
/// were seen; afterwards an item's count may be over-estimated by at most its `error`.
pub struct SpaceSaving<K> {
    cap: usize,
    index: HashMap<K, usize>,
    items: Vec<(K, u64, u64)>,
    /// (count, index) of every item: the minimum in O(log cap).
    order: BTreeSet<(u64, usize)>,
    evicted: bool,
}

impl<K: Hash + Eq + Clone + Ord> SpaceSaving<K> {
    pub fn new(cap: usize) -> Self {
        SpaceSaving {
            cap: cap.max(1),
            index: HashMap::new(),
            items: Vec::new(),
            order: BTreeSet::new(),
            evicted: false,
        }
    }

    pub fn add_with(&mut self, key: &K) {
        if let Some(&i) = self.index.get(key) {
            let c = self.items[i].1;
            self.order.remove(&(c, i));
            self.order.insert((c + 1, i));
            self.items[i].1 = c + 1;
            return;
        }
        if self.items.len() < self.cap {
            let i = self.items.len();
            self.index.insert(key.clone(), i);
            self.items.push((key.clone(), 1, 0));
            self.order.insert((1, i));
            return;
        }
        self.evicted = true;
        let (min, i) = self.order.pop_first().expect("cap >= 1");
        self.index.remove(&self.items[i].0);
        self.index.insert(key.clone(), i);
        self.items[i] = (key.clone(), min + 1, min);
        self.order.insert((min + 1, i));
    }

    /// True when every count reported is exact.
    pub fn exact(&self) -> bool {
        !self.evicted
    }

    /// The `n` largest as (key, count, over-count bound), by count (descending) then key.
    pub fn top(&self, n: usize) -> Vec<(K, u64, u64)> {
        let mut v: Vec<_> = self.items.to_vec();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }
}

/// Distinct count: exact with a set up to `cap` items, then a HyperLogLog (2^14 registers,
/// ~0.8 % standard error) over everything.
pub struct Distinct<K> {
    cap: usize,
    exact: Option<HashSet<K>>,
    hll: Box<[u8; 1 << 14]>,
    hasher: std::hash::RandomState,
}

impl<K: Hash + Eq + Clone> Distinct<K> {
    pub fn new(cap: usize) -> Self {
        Distinct {
            cap,
            exact: Some(HashSet::new()),
            hll: Box::new([0; 1 << 14]),
            hasher: std::hash::RandomState::new(),
        }
    }

    pub fn add(&mut self, k: &K) {
        let h = self.hasher.hash_one(k);
        let idx = (h >> 50) as usize;
        let rank = ((h << 14) | (1 << 13)).leading_zeros() as u8 + 1;
        if self.hll[idx] < rank {
            self.hll[idx] = rank;
        }
        if let Some(set) = &mut self.exact {
            if !set.contains(k) {
                if set.len() >= self.cap {
                    self.exact = None;
                } else {
                    set.insert(k.clone());
                }
            }
        }
    }

    /// (count, exact)
    pub fn count(&self) -> (u64, bool) {
        if let Some(s) = &self.exact {
            return (s.len() as u64, true);
        }
        let m = self.hll.len() as f64;
        let sum: f64 = self.hll.iter().map(|&r| 2f64.powi(-(r as i32))).sum();
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let mut e = alpha * m * m / sum;
        let zeros = self.hll.iter().filter(|&&r| r == 0).count();
        if e <= 2.5 * m && zeros > 0 {
            e = m * (m / zeros as f64).ln();
        }
        (e.round() as u64, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_saving_finds_heavy_hitters() {
        let mut s = SpaceSaving::new(8);
        for i in 0..10_000u32 {
            s.add_with(&(i % 100)); // 100 items of 100 each
            if i % 2 == 0 {
                s.add_with(&1000); // 5000 of one
            }
        }
        assert_eq!(s.top(1)[0].0, 1000);
        assert!(!s.exact());
        let mut e = SpaceSaving::new(8);
        for k in ["a", "b", "a"] {
            e.add_with(&k);
        }
        assert_eq!(e.top(5), vec![("a", 2, 0), ("b", 1, 0)]);
        assert!(e.exact());
    }

    #[test]
    fn distinct_switches_to_hll() {
        let mut d = Distinct::new(1000);
        for i in 0..500u32 {
            d.add(&i);
            d.add(&i);
        }
        assert_eq!(d.count(), (500, true));
        for i in 0..50_000u32 {
            d.add(&i);
        }
        let (n, exact) = d.count();
        assert!(!exact);
        assert!((48_000..52_000).contains(&n), "{n}");
    }
}
