//! One Space-Saving summary in shared words: the `k` names seen most often in one minute,
//! each with an over-estimate of its count.
//!
//! An entry is `width` words: `[0]` meta = `minute << 32 | seq << 1 | busy`, `[1]` count,
//! `[2]` tag (the name's hash, never 0), then the name's bytes, zero-padded (truncated to the
//! entry). An entry whose minute is not the summary's current minute counts as empty, so a
//! new minute needs no reset.
//!
//! Recording a name with weight `w` (the rejections it stands for, `sample`): an entry of
//! this minute with its tag gets `fetch_add(w)` on its count; otherwise the entry with the
//! smallest count (an empty one first) is claimed by one compare-exchange of its meta word to
//! busy, rewritten (count = the smallest count + `w`, as weighted Space-Saving does), and released by storing meta not busy with the next `seq`. A writer
//! that loses the claim drops its sample; nobody ever waits. A claim left busy by a killed
//! process is claimable again from the next minute on.
//!
//! Bounds: without concurrency this is Space-Saving: a name whose weights sum to more than
//! `W / k`, of the minute's total weight `W`, is present, and each count over-estimates by at
//! most the smallest count (≤ `W / k`). Under contention a record may be dropped (a lost
//! claim) or, when a name is replaced between a writer's tag match and its add, added to the
//! name that replaced it: an error of one record's weight per such race. Readers use the meta word as a sequence lock and skip
//! entries being rewritten.

use std::sync::atomic::Ordering::*;

use super::atom::Atom;

/// Meta word's busy bit.
const BUSY: u64 = 1;
/// Words before an entry's name.
const NAME_AT: usize = 3;

/// One name read from a summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counted {
    pub tag: u64,
    pub count: u64,
    pub name: String,
}

/// A summary over `words` (`k` entries of `width` words each).
pub struct Summary<'a, A> {
    pub words: &'a [A],
    pub width: usize,
}

impl<A> Clone for Summary<'_, A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for Summary<'_, A> {}

fn minute_of(meta: u64) -> u32 {
    (meta >> 32) as u32
}

impl<A: Atom> Summary<'_, A> {
    fn entries(&self) -> impl Iterator<Item = &[A]> {
        self.words.chunks_exact(self.width)
    }

    /// Counts `weight` occurrences of `name` (hash `tag`, non-zero) in `minute`.
    pub fn record(&self, minute: u32, tag: u64, name: &[u8], weight: u64) {
        let mut victim: Option<(&[A], u64, u64)> = None;
        for e in self.entries() {
            let meta = e[0].load(Acquire);
            let current = minute_of(meta) == minute;
            if current && meta & BUSY == 0 && e[2].load(Relaxed) == tag {
                e[1].fetch_add(weight, Relaxed);
                return;
            }
            let count = if current { e[1].load(Relaxed) } else { 0 };
            let claimable = meta & BUSY == 0 || !current;
            if claimable && victim.is_none_or(|(_, _, c)| count < c) {
                victim = Some((e, meta, count));
            }
        }
        let Some((e, meta, count)) = victim else {
            return;
        };
        let seq = (meta >> 1).wrapping_add(1) & 0x7fff_ffff;
        let busy = u64::from(minute) << 32 | seq << 1 | BUSY;
        if e[0].compare_exchange(meta, busy, Acquire, Relaxed).is_err() {
            return;
        }
        // The meta word says busy before any other word changes (sequence lock).
        A::fence(Release);
        e[1].store(count + weight, Relaxed);
        e[2].store(tag, Relaxed);
        for (i, w) in e[NAME_AT..].iter().enumerate() {
            let mut b = [0u8; 8];
            let from = (i * 8).min(name.len());
            let to = (from + 8).min(name.len());
            b[..to - from].copy_from_slice(&name[from..to]);
            w.store(u64::from_le_bytes(b), Relaxed);
        }
        e[0].store(busy & !BUSY, Release);
    }

    /// The entries of `minute`, unordered (entries being rewritten are left out).
    pub fn read(&self, minute: u32, out: &mut Vec<Counted>) {
        for e in self.entries() {
            let meta = e[0].load(Acquire);
            if meta & BUSY != 0 || minute_of(meta) != minute {
                continue;
            }
            let count = e[1].load(Relaxed);
            let tag = e[2].load(Relaxed);
            let mut bytes: Vec<u8> = e[NAME_AT..]
                .iter()
                .flat_map(|w| w.load(Relaxed).to_le_bytes())
                .collect();
            A::fence(Acquire);
            if e[0].load(Relaxed) != meta || count == 0 || tag == 0 {
                continue;
            }
            let len = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            bytes.truncate(len);
            out.push(Counted {
                tag,
                count,
                name: String::from_utf8_lossy(&bytes).into_owned(),
            });
        }
    }
}

/// Sums `counted` by tag (Space-Saving summaries merge by adding counts) and keeps the `n`
/// largest, largest first, ties by name.
pub fn top(mut counted: Vec<Counted>, n: usize) -> Vec<Counted> {
    counted.sort_by_key(|c| c.tag);
    let mut merged: Vec<Counted> = Vec::with_capacity(counted.len());
    for c in counted {
        match merged.last_mut() {
            Some(m) if m.tag == c.tag => m.count += c.count,
            _ => merged.push(c),
        }
    }
    merged.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    merged.truncate(n);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    fn words(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn a_crawler_stream_puts_the_hot_name_on_top() {
        let w = words(16 * 8);
        let s = Summary {
            words: &w,
            width: 8,
        };
        // 10,000 distinct names once each, and one name every fifth record.
        let mut hot = 0;
        for i in 0..10_000u64 {
            s.record(7, i + 2, format!("crawler-{i}").as_bytes(), 1);
            if i % 5 == 0 {
                s.record(7, 1, b"hot", 1);
                hot += 1;
            }
        }
        let mut got = Vec::new();
        s.read(7, &mut got);
        let t = top(got, 3);
        assert_eq!(t[0].name, "hot");
        assert!(t[0].count >= hot, "{} < {hot}", t[0].count);
        // Over-estimate bounded by n / k.
        assert!(t[0].count <= hot + 12_000 / 16);
        // Another minute: empty.
        let mut none = Vec::new();
        s.read(8, &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn long_names_are_truncated_and_a_new_minute_replaces_old_entries() {
        let w = words(2 * 4);
        let s = Summary {
            words: &w,
            width: 4,
        };
        s.record(1, 9, b"abcdefghijkl", 1);
        s.record(1, 9, b"abcdefghijkl", 1);
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        s.read(1, &mut a);
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].name.as_str(), a[0].count), ("abcdefgh", 2));
        // Entries of another minute are empty: the first is taken over.
        s.record(2, 5, b"x", 1);
        s.read(2, &mut b);
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].name.as_str(), b[0].count), ("x", 1));
        s.read(1, &mut c);
        assert!(c.is_empty());
    }

    #[test]
    fn concurrent_writers_keep_the_hot_name_and_never_over_count_it_much() {
        let w = words(16 * 8);
        let s = Summary {
            words: &w,
            width: 8,
        };
        std::thread::scope(|sc| {
            for t in 0..4u64 {
                sc.spawn(move || {
                    for i in 0..20_000u64 {
                        s.record(3, 100 + t * 1_000_000 + i, b"cold", 1);
                        s.record(3, 1, b"hot", 1);
                    }
                });
            }
        });
        let mut got = Vec::new();
        s.read(3, &mut got);
        let t = top(got, 1);
        assert_eq!(t[0].name, "hot");
        // Each record adds at most one count somewhere (claims set min + 1, which may
        // exceed a dropped one's worth only by the Space-Saving over-estimate).
        assert!(t[0].count <= 80_000 + 160_000 / 16, "{}", t[0].count);
        assert!(t[0].count >= 40_000, "{}", t[0].count);
    }
}
