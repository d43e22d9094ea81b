//! Header lookups planned once per engine: the names a policy reads, found in one pass over the request.

use super::*;

/// Most header names a [`HeaderPlan`] reads in its one pass (further names are looked up
/// through the host's view each time).
pub const MAX_PLANNED_HEADERS: usize = 8;

/// The header names (lowercase) a policy reads, fixed when the engine is built, so that one
/// pass over the request's headers finds all of them.
#[derive(Clone, Debug)]
pub struct HeaderPlan {
    pub(super) names: Vec<Box<[u8]>>,
    /// Per name, the matcher that finds it among the host's header names.
    pub(super) quick: Vec<NameMatcher>,
    /// Per name length (the last entry: that length or more), the planned names of that
    /// length as bits: a header line is compared only with names of its own length.
    pub(super) by_len: [u8; BY_LEN],
}

/// Name lengths [`HeaderPlan::by_len`] tells apart.
pub(super) const BY_LEN: usize = 64;

/// A lowercase header name prepared for case-insensitive comparison 8 bytes at a time: a byte
/// `x` of the candidate matches the name's byte `w` iff `x | m == w`, where `m` is `0x20` for
/// a letter (either case matches) and `0` otherwise (exact).
#[derive(Clone, Debug)]
pub(super) struct NameMatcher {
    pub(super) len: usize,
    /// The first two (name word, mask word) pairs, inline: names of up to 16 bytes (nearly
    /// all) are compared without a loop.
    pub(super) head: [(u64, u64); 2],
    /// (name word, mask word) per 8 bytes, zero-padded.
    pub(super) words: Box<[(u64, u64)]>,
}

impl NameMatcher {
    pub(super) fn new(lowercase: &[u8]) -> NameMatcher {
        let mask: Vec<u8> = lowercase
            .iter()
            .map(|b| if b.is_ascii_lowercase() { 0x20 } else { 0 })
            .collect();
        let words: Box<[(u64, u64)]> = (0..word_count(lowercase.len()))
            .map(|k| (word_at(lowercase, k), word_at(&mask, k)))
            .collect();
        let second = words.get(1).copied().unwrap_or((0, 0));
        NameMatcher {
            len: lowercase.len(),
            head: [words[0], second],
            words,
        }
    }

    #[inline]
    pub(super) fn matches(&self, name: &[u8]) -> bool {
        if name.len() != self.len {
            return false;
        }
        if name.len() <= 16 {
            // One or two words (for 9–16 bytes the second overlaps the first).
            let [(w0, m0), (w1, m1)] = self.head;
            return word_at(name, 0) | m0 == w0 && (name.len() <= 8 || word_at(name, 1) | m1 == w1);
        }
        self.words
            .iter()
            .enumerate()
            .all(|(k, &(w, m))| word_at(name, k) | m == w)
    }
}

/// How many words [`word_at`] cuts a string of `len` bytes into.
pub(super) fn word_count(len: usize) -> usize {
    len.div_ceil(8).max(1)
}

/// Word `k` of `s`: for 8 bytes or more, the 8 bytes at `min(8k, len - 8)` (the last word
/// overlaps the one before); for 4–7 bytes, the first 4 and the last 4; shorter strings byte
/// by byte. Two strings of the same length are equal iff all their words are.
#[inline]
pub(super) fn word_at(s: &[u8], k: usize) -> u64 {
    let n = s.len();
    if n >= 8 {
        let off = (8 * k).min(n - 8);
        u64::from_le_bytes(s[off..off + 8].try_into().unwrap_or([0; 8]))
    } else if n >= 4 {
        let lo = u32::from_le_bytes(s[..4].try_into().unwrap_or([0; 4]));
        let hi = u32::from_le_bytes(s[n - 4..].try_into().unwrap_or([0; 4]));
        lo as u64 | (hi as u64) << 32
    } else {
        s.iter().rev().fold(0u64, |acc, &b| (acc << 8) | b as u64)
    }
}

impl Default for HeaderPlan {
    /// A plan that reads no header.
    fn default() -> HeaderPlan {
        HeaderPlan::new(std::iter::empty())
    }
}

impl HeaderPlan {
    /// A plan for these names (lowercased, duplicates dropped, the first
    /// [`MAX_PLANNED_HEADERS`] kept).
    pub fn new<'n>(names: impl IntoIterator<Item = &'n [u8]>) -> HeaderPlan {
        let mut plan = HeaderPlan {
            names: Vec::new(),
            quick: Vec::new(),
            by_len: [0; BY_LEN],
        };
        for n in names {
            let n = n.to_ascii_lowercase();
            if plan.names.len() < MAX_PLANNED_HEADERS && !plan.names.iter().any(|p| **p == *n) {
                plan.by_len[n.len().min(BY_LEN - 1)] |= 1 << plan.names.len();
                plan.quick.push(NameMatcher::new(&n));
                plan.names.push(n.into_boxed_slice());
            }
        }
        plan
    }

    /// The planned names.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.names.iter().map(|n| &n[..])
    }
}

/// The planned headers of one request, read in one pass over the host's headers: the first
/// value of each and whether it occurs more than once (then every lookup of it goes to the
/// host's view, which has all occurrences).
#[derive(Clone, Copy)]
pub struct HeaderCache<'a> {
    /// The plan's names; empty when the host cannot enumerate its headers.
    pub(super) names: &'a [Box<[u8]>],
    pub(super) first: [Option<&'a [u8]>; MAX_PLANNED_HEADERS],
    pub(super) multi: u8,
}

impl<'a> HeaderCache<'a> {
    /// No cache: every lookup goes to the host's view.
    pub const NONE: HeaderCache<'static> = HeaderCache {
        names: &[],
        first: [None; MAX_PLANNED_HEADERS],
        multi: 0,
    };

    /// An empty cache to [`HeaderCache::fill_in`]: built field by field where it stands (a
    /// copy of [`HeaderCache::NONE`] is a `memcpy` call).
    #[inline(always)]
    pub(crate) fn empty() -> HeaderCache<'a> {
        HeaderCache {
            names: &[],
            first: [None; MAX_PLANNED_HEADERS],
            multi: 0,
        }
    }

    /// Reads the planned headers of `view` in one pass (if the host can enumerate them).
    pub fn fill(plan: &'a HeaderPlan, view: &'a dyn RequestView) -> HeaderCache<'a> {
        let mut cache = HeaderCache::empty();
        cache.fill_in(plan, view);
        cache
    }

    /// [`HeaderCache::fill`] into an empty cache where it stands: returning the cache instead
    /// makes the compiler copy it right after the pass, and those loads wait for the pass's
    /// stores (failed store forwards, a few ns per request).
    #[inline]
    pub(crate) fn fill_in(&mut self, plan: &'a HeaderPlan, view: &'a dyn RequestView) {
        let (names, quick, by_len) = (&plan.names[..], &plan.quick[..], &plan.by_len);
        let (first, multi) = (&mut self.first, &mut self.multi);
        // An empty plan reads nothing (the pass is skipped).
        let enumerated = !names.is_empty()
            && view.for_each_header(&mut |n, v| {
                // Only names of this length can match; usually none or one.
                let mut cands = by_len[n.len().min(BY_LEN - 1)];
                while cands != 0 {
                    let i = cands.trailing_zeros() as usize;
                    cands &= cands - 1;
                    if quick[i].matches(n) {
                        if first[i].is_none() {
                            first[i] = Some(v);
                        } else {
                            *multi |= 1 << i;
                        }
                        break;
                    }
                }
            });
        // Without enumeration, no names: every lookup goes to the host's view.
        if enumerated {
            self.names = names;
        }
    }

    /// `Some(first value)` when `name` is cached with at most one occurrence.
    #[inline]
    pub(super) fn single(&self, lowercase_name: &[u8]) -> Option<Option<&'a [u8]>> {
        let i = self
            .names
            .iter()
            .position(|n| bytes::eq(n, lowercase_name))?;
        if self.multi & (1 << i) != 0 {
            return None;
        }
        Some(self.first[i])
    }
}

/// The occurrences of one header: from the [`HeaderCache`] when it has them, else from the
/// host's view.
pub struct Values<'a> {
    pub(super) one: Option<&'a [u8]>,
    pub(super) more: Option<HeaderValues<'a>>,
}

impl<'a> Iterator for Values<'a> {
    type Item = &'a [u8];
    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        match &mut self.more {
            Some(m) => m.next(),
            None => self.one.take(),
        }
    }
}
