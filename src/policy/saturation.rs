//! Saturation of concurrency limits: per limit, the last learned limit and latencies, the
//! requests each lane had refused, and how long admitted requests waited in the queue. In the
//! engine's counter block (after the bans), so that every nginx worker adds to, and
//! `weir_status` reads, the same numbers.
//!
//! Written off the pass path: gauges when a latency window closes (a few times a second),
//! sheds when a request is refused, the wait histogram when a queued request is admitted.
//! Each is one relaxed atomic; readers may see a group half-updated.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::config::Lane;

/// Upper bounds of the queue-wait histogram's buckets, ms (then +Inf).
pub const WAIT_BUCKETS_MS: [u64; 11] = [1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000];

const LIMIT: usize = 0;
const NOLOAD: usize = 1;
const LATENCY: usize = 2;
const IN_FLIGHT: usize = 3;
const QUEUED: usize = 4;
const SHED: usize = 5; // one per lane, lowest first
const WAIT_SUM: usize = SHED + 3;
const WAIT_COUNT: usize = WAIT_SUM + 1;
const WAIT: usize = WAIT_COUNT + 1; // one per bucket, then +Inf
/// Words per limit.
pub(crate) const WORDS: usize = 24;
const _: () = assert!(WAIT + WAIT_BUCKETS_MS.len() < WORDS);

/// A limit's saturation figures (a read without a lock).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Saturation {
    /// The limit enforced (the learned limit, or the fixed `max`).
    pub limit: u64,
    /// Whether the limit is learned (`max = "auto"`).
    pub auto: bool,
    /// Requests holding a permit.
    pub in_flight: u64,
    /// Requests waiting in the queue.
    pub queued: u64,
    /// The backend's learned no-load latency, ns (0: no sample yet).
    pub noload_ns: u64,
    /// The backend's recent mean latency, ns (0: no sample yet).
    pub latency_ns: u64,
    /// Requests the limit refused, per lane, lowest first ([`Lane::ALL`]).
    pub shed: [u64; 3],
    /// Queue waits of admitted requests: count, sum (ns), and per bucket of
    /// [`WAIT_BUCKETS_MS`] then +Inf, cumulative.
    pub wait_count: u64,
    pub wait_sum_ns: u64,
    pub wait_buckets: [u64; 12],
}

/// The saturation words of every limit.
pub(crate) struct SaturationArea<'a> {
    pub(crate) words: &'a [AtomicU64],
}

impl SaturationArea<'_> {
    fn at(&self, limit: usize, w: usize) -> &AtomicU64 {
        &self.words[limit * WORDS + w]
    }

    /// A latency window closed for limit `limit`.
    pub(crate) fn closed(&self, limit: usize, learned: u64, noload_ns: u64, latency_ns: u64) {
        self.at(limit, LIMIT).store(learned, Relaxed);
        self.at(limit, NOLOAD).store(noload_ns, Relaxed);
        self.at(limit, LATENCY).store(latency_ns, Relaxed);
    }

    /// The live figures of the key last seen (for limits whose key the snapshot cannot read).
    pub(crate) fn seen(&self, limit: usize, in_flight: u64, queued: u64) {
        self.at(limit, IN_FLIGHT).store(in_flight, Relaxed);
        self.at(limit, QUEUED).store(queued, Relaxed);
    }

    /// Limit `limit` refused a request of `lane`.
    pub(crate) fn shed(&self, limit: usize, lane: Lane) {
        self.at(limit, SHED + lane as usize).fetch_add(1, Relaxed);
    }

    /// A request of limit `limit` was admitted after waiting `wait_ns` in its queue.
    pub(crate) fn waited(&self, limit: usize, wait_ns: u64) {
        self.at(limit, WAIT_SUM).fetch_add(wait_ns, Relaxed);
        self.at(limit, WAIT_COUNT).fetch_add(1, Relaxed);
        let ms = wait_ns / 1_000_000;
        let b = WAIT_BUCKETS_MS
            .iter()
            .position(|&le| ms < le)
            .unwrap_or(WAIT_BUCKETS_MS.len());
        self.at(limit, WAIT + b).fetch_add(1, Relaxed);
    }

    /// Limit `limit`'s figures as last written.
    pub(crate) fn read(&self, limit: usize) -> Saturation {
        let get = |w| self.at(limit, w).load(Relaxed);
        let mut s = Saturation {
            limit: get(LIMIT),
            in_flight: get(IN_FLIGHT),
            queued: get(QUEUED),
            noload_ns: get(NOLOAD),
            latency_ns: get(LATENCY),
            shed: [get(SHED), get(SHED + 1), get(SHED + 2)],
            wait_sum_ns: get(WAIT_SUM),
            wait_count: get(WAIT_COUNT),
            ..Saturation::default()
        };
        let mut total = 0;
        for (b, slot) in s.wait_buckets.iter_mut().enumerate() {
            total += get(WAIT + b);
            *slot = total;
        }
        s
    }
}
