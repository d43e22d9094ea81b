//! The replay's input side: a buffer that puts log lines back in time order within a window,
//! bounded in lines and bytes, and a pool of parsed entries kept for their buffers.

use std::collections::VecDeque;

use crate::logfmt::Entry;
use crate::timefmt::NS;

/// The reordering buffer: entries sorted by (time, arrival).
pub(crate) struct Reorder {
    q: VecDeque<Entry>,
    window: i64,
    spread: bool,
    max: usize,
    /// Memory the entries in `q` hold, and its bound.
    bytes: usize,
    max_bytes: usize,
    max_seen: i64,
    /// Lines older than this were already replayed.
    watermark: i64,
    /// The group (one second, when spreading) being released.
    group_ts: i64,
    group_n: u64,
    group_i: u64,
    /// Lines that came after later ones (and were put in order).
    pub(crate) reordered: u64,
    /// Lines older than what was already replayed (handed back, not replayed).
    pub(crate) late: u64,
}

impl Reorder {
    /// Holds lines until they are `window` ns older than the newest seen, more than `max`
    /// lines or `max_bytes` of them are held, or the input ends; with `spread`, lines logged
    /// with whole-second times are spread over their second.
    pub(crate) fn new(window: i64, spread: bool, max: usize, max_bytes: usize) -> Reorder {
        Reorder {
            q: VecDeque::new(),
            window,
            spread,
            max,
            bytes: 0,
            max_bytes,
            max_seen: i64::MIN,
            watermark: i64::MIN,
            group_ts: 0,
            group_n: 0,
            group_i: 0,
            reordered: 0,
            late: 0,
        }
    }

    /// Inserts `e`; returns it back if it is late (older than what was already replayed).
    pub(crate) fn push(&mut self, e: Entry) -> Option<Entry> {
        if e.ts_ns < self.watermark {
            self.late += 1;
            return Some(e);
        }
        self.max_seen = self.max_seen.max(e.ts_ns);
        self.bytes += e.mem_bytes();
        match self.q.back() {
            Some(b) if b.ts_ns > e.ts_ns => {
                self.reordered += 1;
                let at = self.q.partition_point(|x| x.ts_ns <= e.ts_ns);
                self.q.insert(at, e);
            }
            _ => self.q.push_back(e),
        }
        None
    }

    /// The next entry due for replay and its replay time.
    pub(crate) fn pop(&mut self, flush: bool) -> Option<(Entry, i64)> {
        if self.group_i < self.group_n {
            return self.take();
        }
        let front = self.q.front()?;
        let span = if self.spread && front.whole_second {
            NS
        } else {
            0
        };
        let ready = flush
            || self.q.len() > self.max
            || self.bytes > self.max_bytes
            || front.ts_ns + span <= self.max_seen - self.window;
        if !ready {
            return None;
        }
        self.group_ts = front.ts_ns;
        self.group_n = if span > 0 {
            self.q.iter().take_while(|x| x.ts_ns == front.ts_ns).count() as u64
        } else {
            1
        };
        self.group_i = 0;
        self.watermark = front.ts_ns + span;
        self.take()
    }

    fn take(&mut self) -> Option<(Entry, i64)> {
        let e = self.q.pop_front()?;
        self.bytes -= e.mem_bytes();
        let t = if self.group_n > 1 {
            self.group_ts + (self.group_i as i64 * NS) / self.group_n as i64
        } else {
            e.ts_ns
        };
        self.group_i += 1;
        Some((e, t))
    }
}

/// Parsed entries kept for their buffers' reuse, at most [`Pool::MAX_BYTES`] in all.
#[derive(Default)]
pub(crate) struct Pool {
    free: Vec<Entry>,
    bytes: usize,
}

impl Pool {
    const MAX_BYTES: usize = 16 << 20;
    /// Buffers an entry keeps when pooled (a long line's are shrunk to this).
    const KEEP_BYTES: usize = 4 << 10;

    pub(crate) fn get(&mut self) -> Entry {
        match self.free.pop() {
            Some(e) => {
                self.bytes -= e.mem_bytes();
                e
            }
            None => Entry::default(),
        }
    }

    pub(crate) fn put(&mut self, mut e: Entry) {
        e.shrink(Self::KEEP_BYTES);
        if self.bytes + e.mem_bytes() <= Self::MAX_BYTES {
            self.bytes += e.mem_bytes();
            self.free.push(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reorder(max_bytes: usize) -> Reorder {
        Reorder::new(10 * NS, true, 1_000_000, max_bytes)
    }

    /// An entry at `ts` (sub-second resolution) holding `bytes` of line.
    fn entry(ts: i64, seq: u64, bytes: usize) -> Entry {
        let mut e = Entry::default();
        e.buf.resize(bytes, b'x');
        (e.ts_ns, e.seq) = (ts, seq);
        e
    }

    #[test]
    fn reorder_buffer_is_bounded_in_bytes() {
        let mut ro = reorder(1 << 20);
        let mut out = vec![];
        // 300 lines of 100 KiB within 3 s: the window alone would hold them all.
        for i in 0..300 {
            let ts = NS + i as i64 * NS / 100;
            assert!(ro.push(entry(ts, i, 100 << 10)).is_none());
            while let Some((e, t)) = ro.pop(false) {
                out.push((e.seq, t));
            }
            assert!(ro.bytes <= 1 << 20, "{} bytes held", ro.bytes);
            assert_eq!(ro.bytes, ro.q.iter().map(Entry::mem_bytes).sum::<usize>());
        }
        assert!(out.len() > 250, "{} replayed early", out.len());
        while let Some((e, t)) = ro.pop(true) {
            out.push((e.seq, t));
        }
        assert_eq!(ro.bytes, 0);
        // Log order is kept.
        assert!(out.iter().map(|o| o.0).eq(0..300));
        // Small lines within the window stay buffered.
        let mut ro = reorder(1 << 20);
        for i in 0..300 {
            ro.push(entry(NS + i as i64 * NS / 100, i, 100));
            assert!(ro.pop(false).is_none());
        }
    }

    #[test]
    fn pool_is_bounded_in_bytes() {
        let mut pool = Pool::default();
        for i in 0..5000 {
            pool.put(entry(0, i, if i % 2 == 0 { 64 << 10 } else { 8 << 10 }));
            assert!(pool.bytes <= Pool::MAX_BYTES);
        }
        // Shrunk to KEEP_BYTES, the first few thousand fit; the rest were dropped.
        assert!(
            (1000..5000).contains(&pool.free.len()),
            "{}",
            pool.free.len()
        );
        let e = pool.get();
        assert!(e.buf.capacity() <= Pool::KEEP_BYTES && e.buf.is_empty());
        assert_eq!(
            pool.bytes,
            pool.free.iter().map(Entry::mem_bytes).sum::<usize>()
        );
    }
}
