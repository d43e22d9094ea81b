//! Admission: a key's record found or claimed in its probe window, and the ring of event times
//! checked and appended (docs/ARCHITECTURE.md, "The exact sliding log").

use super::*;

impl LogTable {
    /// The admission protocol (docs/ARCHITECTURE.md, "The exact sliding log").
    pub(super) fn admit(&self, key: u64, now: u64) -> Verdict {
        let t = (now / NS_PER_MS + 1) & TS_MASK;
        let n_seq = self.n % (1 << SEQ_BITS);
        'find: loop {
            let (r, mut w) = self
                .find(key, now, true)
                .expect("insert always yields a record");
            let hdr = self.hdr(r);
            loop {
                let h = head(w);
                let slot = self.ent(r, h);
                let e = slot.load(Acquire);
                let d = dist(h, seq_of(e));
                if d == 0 {
                    // Position h is taken (admitted, head not yet advanced): help.
                    let _ = hdr.compare_exchange(w, pack(key, h + 1), AcqRel, Acquire);
                    w = hdr.load(Acquire);
                    if tag(w) != key {
                        continue 'find;
                    }
                    continue;
                }
                if d >= AHEAD {
                    // The entry is ahead of the head we read: a newer head, or an admission
                    // left beyond a rolled-back head. Re-read; if the head did not move, catch
                    // it up past that entry (the skipped positions are holes).
                    let w2 = hdr.load(Acquire);
                    if tag(w2) != key {
                        continue 'find;
                    }
                    if w2 == w {
                        let k = (1 << SEQ_BITS) - d;
                        let _ = hdr.compare_exchange(w, pack(key, h + k), AcqRel, Acquire);
                        w = hdr.load(Acquire);
                        if tag(w) != key {
                            continue 'find;
                        }
                    } else {
                        w = w2;
                    }
                    continue;
                }
                if d == n_seq && self.live(e, now) {
                    // The oldest of the last N events is inside the window: N events are.
                    return self.rejected(e, now);
                }
                // Position h is free (never written, older than the window, or a hole).
                if slot
                    .compare_exchange(e, entry(h, t), AcqRel, Acquire)
                    .is_ok()
                {
                    // Linearization point: the event is in the log. Advance the head; if that
                    // succeeds the record was still this key's (same incarnation: a re-tag
                    // moves the head by 2N) after the write. If it fails (somebody helped, or
                    // the record was taken), make sure the record still is this key's.
                    if hdr
                        .compare_exchange(w, pack(key, h + 1), AcqRel, Acquire)
                        .is_ok()
                    {
                        return self.passed(Some(r), h + 1, now);
                    }
                    if tag(hdr.load(Acquire)) != key {
                        // Evicted meanwhile: the event went into another key's record, where
                        // it is invisible (its seq is behind that key's bumped head). Undo it
                        // and start again.
                        let _ = slot.compare_exchange(entry(h, t), e, AcqRel, Acquire);
                        continue 'find;
                    }
                    return self.passed(Some(r), h + 1, now);
                }
                w = hdr.load(Acquire);
                if tag(w) != key {
                    continue 'find;
                }
            }
        }
    }

    pub(super) fn rejected(&self, oldest: u64, now: u64) -> Verdict {
        let retry = ((ts_of(oldest) - 1 + self.log.window_ms) * NS_PER_MS).saturating_sub(now);
        Verdict {
            decision: Decision::Reject,
            wait_ns: 0,
            retry_after_ns: retry.max(1),
            limit: self.n,
            remaining: Remaining::units(0),
            reset_ns: self.log.window_ns(),
        }
    }

    /// A pass; `remaining` counts the live events among positions `[h − N, h)` of record `r`
    /// (a binary search: event times never decrease along positions; holes count as gone).
    pub(super) fn passed(&self, r: Option<usize>, h: u64, now: u64) -> Verdict {
        let live = match r {
            None => 0,
            Some(r) => {
                let valid_live = |p: u64| {
                    let e = self.ent(r, p).load(Acquire);
                    seq_of(e) == p & SEQ_MASK && self.live(e, now)
                };
                // Find the first live position in [h − N, h).
                let (mut lo, mut hi) = (0u64, self.n);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if valid_live(h.wrapping_sub(self.n).wrapping_add(mid)) {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                self.n - lo
            }
        };
        Verdict {
            decision: Decision::Pass,
            wait_ns: 0,
            retry_after_ns: 0,
            limit: self.n,
            remaining: Remaining::units(self.n.saturating_sub(live)),
            reset_ns: if live == 0 { 0 } else { self.log.window_ns() },
        }
    }

    /// How recent the newest event of record `r` (word `w`) is: 0 when no event is inside the
    /// window (the record equals an absent key), else its ts (smaller = older).
    pub(super) fn newest(&self, r: usize, w: u128, now: u64) -> u64 {
        let h = head(w);
        for k in 0..=self.n.min(4) {
            let p = h.wrapping_sub(k);
            let e = self.ent(r, p).load(Acquire);
            if seq_of(e) == p & SEQ_MASK && ts_of(e) != 0 {
                return if self.live(e, now) { ts_of(e) } else { 0 };
            }
        }
        // Holes or a fresh record: nothing found near the head.
        if self.n <= 4 {
            0
        } else {
            1
        }
    }

    /// Asks the CPU to start loading the first two cache lines (header and newest entries) of
    /// each record of a probe window at once: the loop in `find` reads them one after the other,
    /// and in a table much larger than the caches each one is a miss (a missing key reads all
    /// of them).
    #[inline]
    pub(super) fn prefetch(&self, home: usize, window: usize) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        for i in 0..window {
            let mut r = home + i;
            if r >= self.capacity {
                r -= self.capacity;
            }
            // SAFETY: r < capacity, so the record's first byte is inside the region; a prefetch
            // reads nothing and cannot fault, so `+ 64` may point past a short record.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                let p = self.records.as_ptr().add(r * self.stride);
                _mm_prefetch::<_MM_HINT_T0>(p.cast());
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64).cast());
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = (home, window);
    }

    /// Finds `key`'s record in its probe window. With `insert`, a missing key is given the first
    /// empty record, else the record whose newest event is oldest (0 = nothing in the window:
    /// a lossless eviction; otherwise counted as active). Claiming a record moves its head 2N
    /// past the old one, so every entry left there reads as empty to the new key.
    pub(super) fn find(&self, key: u64, now: u64, insert: bool) -> Option<(usize, u128)> {
        let home = ((key as u128 * self.capacity as u128) >> 64) as usize;
        let window = LOG_PROBE_WINDOW.min(self.capacity);
        self.prefetch(home, window);
        'scan: loop {
            let mut victim: Option<(usize, u128, u64)> = None;
            for i in 0..window {
                let mut r = home + i;
                if r >= self.capacity {
                    r -= self.capacity;
                }
                let w = self.hdr(r).load(Acquire);
                if tag(w) == key {
                    return Some((r, w));
                }
                if tag(w) == EMPTY {
                    if !insert {
                        return None;
                    }
                    let claimed = pack(key, head(w) + 2 * self.n);
                    if self
                        .hdr(r)
                        .compare_exchange(w, claimed, AcqRel, Acquire)
                        .is_ok()
                    {
                        self.header().add(|s| &s.inserts);
                        self.header().note_probe(i as u64);
                        return Some((r, claimed));
                    }
                    continue 'scan;
                }
                let rank = self.newest(r, w, now);
                if victim.is_none_or(|(_, _, best)| rank < best) {
                    victim = Some((r, w, rank));
                }
            }
            if !insert {
                return None;
            }
            let (r, w, rank) = victim.expect("probe window is never empty");
            let claimed = pack(key, head(w) + 2 * self.n);
            if self
                .hdr(r)
                .compare_exchange(w, claimed, AcqRel, Acquire)
                .is_ok()
            {
                self.header().count_eviction(rank == 0);
                return Some((r, claimed));
            }
        }
    }
}
