//! Probing: a key's home bucket, the bucket loads and tag compares, and `modify`, the
//! compare-exchange loop every table operation goes through.

use super::*;

impl Table {
    /// Home bucket: the hash mapped onto `[0, buckets)` by multiply-shift.
    #[inline]
    pub(super) fn home(&self, key_hash: u64) -> usize {
        ((key_hash as u128 * self.buckets as u128) >> 64) as usize
    }

    #[inline]
    pub(super) fn wrap(&self, bucket: usize) -> usize {
        if bucket >= self.buckets {
            bucket - self.buckets
        } else {
            bucket
        }
    }

    /// The four words of `bucket`, each loaded atomically (one cache line; the words need not
    /// be one snapshot: every decision below is confirmed by a compare-exchange).
    #[inline]
    pub(super) fn load_bucket(&self, bucket: usize) -> [u128; BUCKET_SLOTS] {
        self.load_bucket_hits(bucket, EMPTY).0
    }

    /// [`Table::load_bucket`] and the mask of its slots tagged `key_hash` (bit j = slot j).
    /// With AVX, the tags are compared in the vector registers the words arrive in: fewer
    /// instructions wait for the bucket's cache line.
    #[inline(always)]
    pub(super) fn load_bucket_hits(
        &self,
        bucket: usize,
        key_hash: u64,
    ) -> ([u128; BUCKET_SLOTS], u32) {
        let first = bucket * BUCKET_SLOTS;
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if self.avx {
            // SAFETY: `bucket < buckets`, so the four slots are inside the region and valid
            // for reads; they are 16-byte aligned (the region is 64-byte aligned and the slots
            // start at a multiple of 64). With AVX present, `self.avx`, each load is atomic.
            return unsafe { atomic_load_x4(self.slots.as_ptr().add(first).cast(), key_hash) };
        }
        let words = std::array::from_fn(|j| self.slot(first + j).load(Acquire));
        (words, matches(&words, key_hash).0)
    }

    /// The one update protocol. Finds `key_hash` in its probe window and replaces its state by
    /// `step(state).0` with one compare-exchange, retrying from a fresh read when the word
    /// changed underneath. An absent key has state 0; it is stored only when `step` yields a
    /// non-zero state and `insert` is set: into the first empty slot of the window, else over
    /// the slot whose state ranks lowest by `residual` (0 = expired, a lossless eviction).
    ///
    /// The window is scanned a bucket (cache line) at a time: its four tags are compared
    /// without branches, a match wins over an empty slot, and only a bucket with neither is
    /// ranked for eviction.
    ///
    /// Invariant: a slot, once filled, is never emptied, and a key is only ever stored in the
    /// first empty slot of its window or over another key. So a key never sits after an empty
    /// slot of its window, and a scan can stop at the first empty slot.
    #[inline(always)]
    pub(super) fn modify<R>(
        &self,
        key_hash: u64,
        residual: impl Fn(u64) -> u64,
        step: impl Fn(u64) -> (u64, R),
        insert: bool,
    ) -> R {
        // Fast path, the common case: the key is in its home bucket and nobody changes its
        // word between the load and the compare-exchange. Everything else takes the full scan.
        let home = self.home(key_hash);
        let (words, hit) = self.load_bucket_hits(home, key_hash);
        if hit != 0 {
            let j = hit.trailing_zeros() as usize;
            // The slot's tag is `key_hash`, so its word is known from its state alone.
            let state = state_at(&words, j);
            let word = pack(key_hash, state);
            let (next, out) = step(state);
            if next == state {
                return out;
            }
            let slot = self.slot(home * BUCKET_SLOTS + j);
            if slot
                .compare_exchange(word, pack(key_hash, next), AcqRel, Acquire)
                .is_ok()
            {
                self.header().note_probe(j as u64);
                return out;
            }
        }
        self.modify_scan(key_hash, residual, step, insert)
    }

    /// [`Table::modify`]'s full protocol, described there.
    #[inline(never)]
    pub(super) fn modify_scan<R>(
        &self,
        key_hash: u64,
        residual: impl Fn(u64) -> u64,
        step: impl Fn(u64) -> (u64, R),
        insert: bool,
    ) -> R {
        let home = self.home(key_hash);
        let window = self.window;
        'scan: loop {
            // (index, word, residual) of the best eviction candidate so far.
            let mut victim: Option<(usize, u128, u64)> = None;
            for b in 0..window {
                let bucket = self.wrap(home + b);
                let first = bucket * BUCKET_SLOTS;
                let words = self.load_bucket(bucket);
                let (hit, empty) = matches(&words, key_hash);
                if hit != 0 {
                    let j = hit.trailing_zeros() as usize;
                    let slot = self.slot(first + j);
                    let mut word = words[j];
                    loop {
                        let (next, out) = step(slot::state(word));
                        if next == slot::state(word) {
                            return out;
                        }
                        match slot.compare_exchange(word, pack(key_hash, next), AcqRel, Acquire) {
                            Ok(_) => {
                                self.header().note_probe((b * BUCKET_SLOTS + j) as u64);
                                return out;
                            }
                            Err(now_word) if slot::tag(now_word) == key_hash => word = now_word,
                            // Evicted meanwhile: look again.
                            Err(_) => continue 'scan,
                        }
                    }
                }
                if empty != 0 {
                    let j = empty.trailing_zeros() as usize;
                    let (next, out) = step(0);
                    if next == 0 || !insert {
                        return out;
                    }
                    if self
                        .slot(first + j)
                        .compare_exchange(words[j], pack(key_hash, next), AcqRel, Acquire)
                        .is_ok()
                    {
                        self.header().add(|s| &s.inserts);
                        self.header().note_probe((b * BUCKET_SLOTS + j) as u64);
                        return out;
                    }
                    // Someone filled it (maybe with this key): look again.
                    continue 'scan;
                }
                for (j, &word) in words.iter().enumerate() {
                    let r = residual(slot::state(word));
                    if victim.is_none_or(|(_, _, best)| r < best) {
                        victim = Some((first + j, word, r));
                    }
                }
            }
            let (next, out) = step(0);
            if next == 0 || !insert {
                return out;
            }
            let (index, word, r) = victim.expect("probe window is never empty");
            if self
                .slot(index)
                .compare_exchange(word, pack(key_hash, next), AcqRel, Acquire)
                .is_ok()
            {
                self.header().count_eviction(r == 0);
                return out;
            }
        }
    }
}

/// Four atomic 16-byte loads of consecutive slots, inlined (portable-atomic makes each
/// `AtomicU128::load` an indirect call that picks the instruction at run time), and the mask
/// of the slots whose tag (high half) is `key_hash` (bit j = slot j), compared in the vector
/// registers the words arrive in.
///
/// # Safety
/// `p` must be 16-byte aligned and valid for reads of 64 bytes, and the CPU must have AVX:
/// Intel and AMD document that an aligned 16-byte SSE/AVX load is a single atomic access on
/// processors with AVX (Intel SDM vol. 3A §9.1.1, AMD APM vol. 1 §3.9.1.3), which is also
/// how portable-atomic implements `AtomicU128::load` on them. The asm block is a compiler
/// barrier (it may read and write memory), and x86 loads are not reordered with later loads,
/// so each load has Acquire ordering.
#[cfg(all(target_arch = "x86_64", not(loom)))]
#[inline]
unsafe fn atomic_load_x4(p: *const u8, key_hash: u64) -> ([u128; BUCKET_SLOTS], u32) {
    use std::arch::x86_64::__m128i;
    let (a, b, c, d): (__m128i, __m128i, __m128i, __m128i);
    let hit: u64;
    // SAFETY: the caller's contract above; the rest is register arithmetic.
    unsafe {
        std::arch::asm!(
            "vmovq {k}, {key}",
            "vpunpcklqdq {k}, {k}, {k}",
            "vmovdqa {a}, xmmword ptr [{p}]",
            "vmovdqa {b}, xmmword ptr [{p} + 16]",
            "vmovdqa {c}, xmmword ptr [{p} + 32]",
            "vmovdqa {d}, xmmword ptr [{p} + 48]",
            // [tag0, tag1] and [tag2, tag3], each compared with [key, key].
            "vpunpckhqdq {t0}, {a}, {b}",
            "vpunpckhqdq {t1}, {c}, {d}",
            "vpcmpeqq {t0}, {t0}, {k}",
            "vpcmpeqq {t1}, {t1}, {k}",
            "vmovmskpd {hit:e}, {t0}",
            "vmovmskpd {m1:e}, {t1}",
            "lea {hit:e}, [{hit:r} + 4 * {m1:r}]",
            p = in(reg) p,
            key = in(reg) key_hash,
            k = out(xmm_reg) _,
            t0 = out(xmm_reg) _,
            t1 = out(xmm_reg) _,
            a = out(xmm_reg) a,
            b = out(xmm_reg) b,
            c = out(xmm_reg) c,
            d = out(xmm_reg) d,
            hit = out(reg) hit,
            m1 = out(reg) _,
            options(nostack, preserves_flags),
        );
    }
    // SAFETY: __m128i and u128 are both 16 plain bytes.
    let words = [a, b, c, d].map(|x| unsafe { std::mem::transmute::<__m128i, u128>(x) });
    (words, hit as u32)
}

/// The state of slot `j` (< 4) of a bucket, picked without branches or a memory round trip.
#[inline(always)]
pub(super) fn state_at(words: &[u128; BUCKET_SLOTS], j: usize) -> u64 {
    let s = words.map(slot::state);
    let (low, high) = if j & 1 == 0 {
        (s[0], s[2])
    } else {
        (s[1], s[3])
    };
    if j & 2 == 0 {
        low
    } else {
        high
    }
}

/// Bit masks of the bucket's slots whose tag is `key_hash` and of its empty slots (bit j =
/// slot j), computed without branches.
#[inline]
pub(super) fn matches(words: &[u128; BUCKET_SLOTS], key_hash: u64) -> (u32, u32) {
    let (mut hit, mut empty) = (0, 0);
    for (j, &w) in words.iter().enumerate() {
        hit |= u32::from(slot::tag(w) == key_hash) << j;
        empty |= u32::from(slot::tag(w) == EMPTY) << j;
    }
    (hit, empty)
}

#[cfg(all(test, target_arch = "x86_64", not(loom)))]
mod tests {
    use super::*;
    use crate::limiter::{Delay, Gcra, Rate};

    /// The inline bucket load reads exactly what portable-atomic's per-slot loads read.
    #[test]
    fn inline_bucket_load_matches_portable_atomic() {
        if !std::arch::is_x86_feature_detected!("avx") {
            return;
        }
        let t = Table::new(Table::bytes_for(256), 1, 0).unwrap();
        let g = Gcra::new(Rate::per_second(10), 3, Delay::NoDelay).unwrap();
        for k in 0u64..200 {
            t.check(&g, t.key_hash(&k.to_le_bytes()), 1, 1_000_000_000 + k);
        }
        let mut filled = 0;
        for b in 0..t.buckets {
            let first = b * BUCKET_SLOTS;
            let portable: [u128; BUCKET_SLOTS] =
                std::array::from_fn(|j| t.slot(first + j).load(Acquire));
            // SAFETY: bucket `b` is inside the table; the region is 64-byte aligned.
            let inline = unsafe { atomic_load_x4(t.slots.as_ptr().add(first).cast(), EMPTY).0 };
            assert_eq!(inline, portable, "bucket {b}");
            filled += portable.iter().filter(|&&w| slot::tag(w) != EMPTY).count();
        }
        assert!(filled > 150, "{filled} slots filled");
    }

    /// `peek`, which stops at the first empty slot, finds what a scan of the whole probe
    /// window finds, in a table full enough that keys sit beyond their home bucket.
    #[test]
    fn peek_agrees_with_a_full_window_scan() {
        let t = Table::new(Table::bytes_for(256), 1, 0).unwrap();
        let g = Gcra::new(Rate::per_second(10), 3, Delay::NoDelay).unwrap();
        let hash = |k: u64| t.key_hash(&k.to_le_bytes());
        for k in 0u64..230 {
            t.check(&g, hash(k), 1, 1_000_000_000 + k);
        }
        let full_scan = |h: u64| {
            let home = t.home(h);
            (0..t.window).find_map(|b| {
                let words = t.load_bucket(t.wrap(home + b));
                let (hit, _) = matches(&words, h);
                (hit != 0).then(|| slot::state(words[hit.trailing_zeros() as usize]))
            })
        };
        let (mut found, mut beyond_home) = (0, 0);
        for k in 0u64..1000 {
            let h = hash(k);
            assert_eq!(t.peek(h), full_scan(h), "key {k}");
            found += usize::from(t.peek(h).is_some());
            let home = t.load_bucket(t.home(h));
            beyond_home += usize::from(t.peek(h).is_some() && matches(&home, h).0 == 0);
        }
        assert!(found > 150, "{found} keys found");
        assert!(beyond_home > 0, "no key beyond its home bucket");
    }

    /// The fused load-and-compare finds exactly the slots `matches` finds: tags equal to the
    /// key in any subset of slots, states equal to the key (which must not count), empties.
    #[test]
    fn vector_tag_match_agrees_with_matches() {
        if !std::arch::is_x86_feature_detected!("avx") {
            return;
        }
        #[repr(C, align(64))]
        struct Bucket([u128; BUCKET_SLOTS]);
        let keys = [1u64, u64::MAX, 0x8000_0000_0000_0000, 0x0123_4567_89ab_cdef];
        for &key in &keys {
            for pattern in 0u32..(1 << 8) {
                // Per slot, two bits: tag is the key / state is the key.
                let words: [u128; BUCKET_SLOTS] = std::array::from_fn(|j| {
                    let tag = if pattern >> (2 * j) & 1 != 0 {
                        key
                    } else {
                        key ^ (1 << j)
                    };
                    let state = if pattern >> (2 * j + 1) & 1 != 0 {
                        key
                    } else {
                        j as u64
                    };
                    pack(tag, state)
                });
                let b = Bucket(words);
                // SAFETY: `b` is 64-byte aligned and 64 bytes long; AVX is present.
                let (loaded, hit) = unsafe { atomic_load_x4(b.0.as_ptr().cast(), key) };
                assert_eq!(loaded, words);
                assert_eq!(
                    hit,
                    matches(&words, key).0,
                    "key {key:#x} pattern {pattern:#b}"
                );
            }
        }
    }
}
