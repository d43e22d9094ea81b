//! Learned concurrency limits (`max = "auto"`): the limit follows the latency of completed
//! requests, as pure functions on two packed words per key.
//!
//! The idea: a backend with N slots answers in its no-load latency `b` while at most N
//! requests are in it; beyond N the extra requests queue inside it and every answer takes
//! longer. So while the recent mean latency stays within `TOLERANCE · b` the limit may grow,
//! and when it rises above it the limit shrinks by the ratio. Samples are gathered in windows
//! (at least [`WINDOW_MIN_NS`] and twice the no-load latency, and [`MIN_SAMPLES`] samples); the
//! process whose sample closes a window applies the update, exactly once per window.
//!
//! The no-load latency `b` is measured all the time, never by pinning the limit down:
//! - a window in which fewer than half the slots were in use is unloaded: `b` moves a quarter
//!   of the way to its mean (up or down);
//! - a busy window can only lower `b` (a mean below it);
//! - when the limit, holding requests back, has been cut [`RELEARN_STREAK`] windows in a row
//!   and no cut brought latency down by at least half its size (a queue inside the backend
//!   drains when the limit falls; a slower backend, or one whose `b` was learned too low from
//!   lucky answers, does not), the latency is the backend's normal: `b` becomes the mean.
//!
//! And the limit is never left above the backend's slots by a `b` learned in a queue (more
//! clients than slots from the first window, or a backend that got faster): a cut that did
//! bring latency down is followed by another, each twice the last (1/16 to 1/8), until
//! latency stops falling; the busy windows on the way lower `b` to the backend's own.
//!
//! So `b` cannot creep up under long overload (busy windows only lower it, and a re-learned
//! one is lowered again by the cuts that follow), a slower backend is re-learned within a few
//! windows, and no worker or node ever re-measures on a timer (nothing to synchronize). The
//! limit grows only in windows where every slot was in use (at 1 request per second it stays
//! where it is, and it never runs ahead of demand) and stays within the zone's bounds; a
//! window with a handful of samples changes only `b`. In the model of the tests (a backend of
//! N slots whose answers vary by ±10 to ±25%), the limit stays within 15% of N; with answers
//! varying by ±50% and few slots it can stay well below N.
//!
//! Words (state 0 = nothing recorded, as for every limiter):
//! - sample: `start:10 | count:9 | busy:1 | full:1 | min:8 | sum:35` — the window's start
//!   in 16.777 ms units (mod 2¹⁰), its samples' count, whether it saw half and whether it saw
//!   all of the slots in use, its shortest sample (8-bit float) and its samples' sum in
//!   [`TICK_NS`] units;
//! - control: `limit·16:20 | cut:4 | b:21 | streak:2 | seen:5 | last:12` — the limit in
//!   sixteenths, the last window's cut (64ths), the no-load latency in ticks, the streak of
//!   cuts that did not bring latency down, when a window last closed (537 ms units, mod 2⁵)
//!   and the last window's mean (a float of 4 exponent and 8 mantissa bits).

use super::NS_PER_SEC;

/// Latencies are kept in units of 16.384 µs (2¹⁴ ns), at most 2²¹ − 1 of them (34 s).
pub const TICK_NS: u64 = 1 << 14;
const TICK_MAX: u64 = (1 << 21) - 1;
/// Window starts are kept in units of 16.777 ms (2²⁴ ns).
const COARSE_SHIFT: u32 = 24;
/// Window closes are kept in units of 537 ms (2²⁹ ns), mod 32 (17 s).
const SEEN_SHIFT: u32 = 29;
const SEEN_MASK: u64 = 0x1F;
/// A window lasts at least this long.
pub const WINDOW_MIN_NS: u64 = 100_000_000;
/// A window closes with at least this many samples (or after [`WINDOW_MAX_NS`]).
pub const MIN_SAMPLES: u64 = 8;
/// A window with fewer samples closes after this long and changes only the no-load latency.
pub const WINDOW_MAX_NS: u64 = 10 * NS_PER_SEC;
/// Mean latency up to `TOLERANCE_PCT`% of the no-load latency counts as no queue.
pub const TOLERANCE_PCT: u64 = 115;
/// A window with its mean within this of the no-load latency lets the limit grow fast.
const CLEAR_PCT: u64 = 105;
/// The limit falls by at most a quarter per window.
const MIN_GRADIENT_PCT: u64 = 75;
/// Cuts in a row that did not bring latency down after which the latency is taken as the
/// new no-load latency.
pub const RELEARN_STREAK: u64 = 3;
/// A limit nothing has updated for this long while requests are refused grows back a step.
pub const STALE_NS: u64 = 10 * NS_PER_SEC;
/// The limit a key starts with (within the bounds).
pub const INITIAL_LIMIT: u64 = 20;

const FP: u64 = 16;

/// A learned limit's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adaptive {
    min: u64,
    max: u64,
}

/// What a closed window reports (for metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed {
    /// The limit after the update.
    pub limit: u64,
    /// The no-load latency after the update, ns.
    pub noload_ns: u64,
    /// The window's mean latency, ns.
    pub mean_ns: u64,
}

/// A control word read out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Control {
    limit_fp: u64,
    /// How much the last window cut the limit, in 64ths (0: it did not cut).
    cut: u64,
    base: u64,
    streak: u64,
    seen: u64,
    /// The last window's mean, [`pack`]ed.
    last: u64,
}

impl Control {
    fn read(s: u64) -> Control {
        Control {
            limit_fp: s & 0xF_FFFF,
            cut: (s >> 20) & 0xF,
            base: (s >> 24) & TICK_MAX,
            streak: (s >> 45) & 0x3,
            seen: (s >> 47) & SEEN_MASK,
            last: s >> 52,
        }
    }
    fn write(self) -> u64 {
        self.limit_fp.min(0xF_FFFF)
            | self.cut.min(0xF) << 20
            | self.base.min(TICK_MAX) << 24
            | self.streak.min(0x3) << 45
            | (self.seen & SEEN_MASK) << 47
            | self.last.min(0xFFF) << 52
    }
}

/// Mantissa bits of [`pack`].
const PACK_BITS: u32 = 8;

/// A tick count as 12 bits: exponent and 8 mantissa bits (within 0.4% below).
fn pack(t: u64) -> u64 {
    let t = t.min(TICK_MAX);
    if t < 1 << (PACK_BITS + 1) {
        return t;
    }
    let e = 63 - u64::from(t.leading_zeros()); // ≥ PACK_BITS + 1
    let mask = (1 << PACK_BITS) - 1;
    (e - u64::from(PACK_BITS) + 1) << PACK_BITS | (t >> (e - u64::from(PACK_BITS))) & mask
}

/// The lower end of [`pack`]'s range for `s`.
fn unpack(s: u64) -> u64 {
    if s < 1 << (PACK_BITS + 1) {
        return s;
    }
    let e = (s >> PACK_BITS) + u64::from(PACK_BITS) - 1;
    let mask = (1 << PACK_BITS) - 1;
    ((1 << PACK_BITS) | (s & mask)) << (e - u64::from(PACK_BITS))
}

/// A tick count as 8 bits: exponent and 3 mantissa bits (within 12.5% below).
fn squeeze(t: u64) -> u64 {
    if t < 16 {
        return t;
    }
    let e = 63 - u64::from(t.leading_zeros()); // ≥ 4
    let m = (t >> (e - 3)) & 0x7;
    ((e - 2) << 3 | m).min(0xFF)
}

/// The lower end of [`squeeze`]'s range for `s`.
fn unsqueeze(s: u64) -> u64 {
    if s < 16 {
        return s;
    }
    let (e, m) = ((s >> 3) + 2, s & 0x7);
    (8 | m) << (e - 3)
}

/// A sample word read out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    start: u64,
    busy: bool,
    /// Every slot was in use at some release: the limit was what held requests back.
    full: bool,
    count: u64,
    /// The shortest sample, [`squeeze`]d.
    min: u64,
    sum: u64,
}

const SUM_MAX: u64 = (1 << 35) - 1;
const COUNT_MAX: u64 = (1 << 9) - 1;
const START_MASK: u64 = (1 << 10) - 1;

impl Window {
    fn read(s: u64) -> Window {
        Window {
            sum: s & SUM_MAX,
            min: (s >> 35) & 0xFF,
            full: (s >> 43) & 1 == 1,
            busy: (s >> 44) & 1 == 1,
            count: (s >> 45) & COUNT_MAX,
            start: s >> 54,
        }
    }
    fn write(self) -> u64 {
        self.sum.min(SUM_MAX)
            | self.min.min(0xFF) << 35
            | u64::from(self.full) << 43
            | u64::from(self.busy) << 44
            | self.count.min(COUNT_MAX) << 45
            | (self.start & START_MASK) << 54
    }
}

fn coarse(now: u64) -> u64 {
    now >> COARSE_SHIFT
}

fn ticks(ns: u64) -> u64 {
    ns.div_ceil(TICK_NS).clamp(1, TICK_MAX)
}

impl Adaptive {
    /// Bounds `min ..= max` (1 ≤ min ≤ max ≤ 65,535).
    pub fn new(min: u64, max: u64) -> Result<Adaptive, super::ParamError> {
        if min == 0 || min > max || max > 0xFFFF {
            return Err(super::ParamError(format!(
                "bounds must be 1 ≤ min ≤ max ≤ 65535, got [{min}, {max}]"
            )));
        }
        Ok(Adaptive { min, max })
    }

    pub fn min(&self) -> u64 {
        self.min
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    /// The limit a control word holds (the initial limit for state 0).
    #[inline]
    pub fn limit(&self, control: u64) -> u64 {
        let fp = Control::read(control).limit_fp;
        let l = if fp == 0 { INITIAL_LIMIT } else { fp / FP };
        l.clamp(self.min, self.max)
    }

    /// The no-load latency a control word holds, ns (0: not learned yet).
    pub fn noload_ns(&self, control: u64) -> u64 {
        Control::read(control).base * TICK_NS
    }

    /// How long a window lasts at least under a control word: [`WINDOW_MIN_NS`], and twice the
    /// no-load latency or the last window's mean, whichever is longer (so that a window's
    /// answers were mostly admitted under the limit it judges, even while they queue).
    pub fn span_ns(&self, control: u64) -> u64 {
        let c = Control::read(control);
        let longest = c.base.max(unpack(c.last)) * TICK_NS;
        WINDOW_MIN_NS.max(longest.saturating_mul(2))
    }

    /// Adds a sample of `latency_ns` at `now`, seen with `in_flight` requests holding permits
    /// (before this one gave its own back) under limit `limit`, in windows of at least
    /// `span_ns` ([`Adaptive::span_ns`]). Returns the new sample word and,
    /// when this sample closes the window, the closed window's state to pass to
    /// [`Adaptive::close`] (the caller's compare-exchange decides which sample closed it).
    #[inline]
    pub fn sample(
        &self,
        state: u64,
        now: u64,
        latency_ns: u64,
        in_flight: u64,
        limit: u64,
        span_ns: u64,
    ) -> (u64, Option<u64>) {
        let t = ticks(latency_ns);
        let busy = in_flight.saturating_mul(2) >= limit;
        let full = in_flight >= limit;
        let c = coarse(now);
        let mut w = Window::read(state);
        if w.count == 0 {
            w = Window {
                start: c,
                busy,
                full,
                count: 1,
                min: squeeze(t),
                sum: t,
            };
            return (w.write(), None);
        }
        w.busy |= busy;
        w.full |= full;
        w.min = w.min.min(squeeze(t));
        w.count += 1;
        w.sum += t;
        let age = ((c.wrapping_sub(w.start)) & START_MASK) << COARSE_SHIFT;
        let ripe = w.count >= MIN_SAMPLES && age >= span_ns;
        if ripe || age >= WINDOW_MAX_NS || w.count >= COUNT_MAX {
            return (0, Some(w.write()));
        }
        (w.write(), None)
    }

    /// Applies a closed window to the control word at `now`. Returns the new control word and
    /// what it now holds.
    pub fn close(&self, control: u64, window: u64, now: u64) -> (u64, Closed) {
        let w = Window::read(window);
        let mut c = Control::read(control);
        let mean = (w.sum / w.count.max(1)).max(1);
        if c.limit_fp == 0 {
            c.limit_fp = INITIAL_LIMIT.clamp(self.min, self.max) * FP;
        }
        c.seen = (now >> SEEN_SHIFT) & SEEN_MASK;
        let last = unpack(c.last);
        c.last = pack(mean);
        let cut = std::mem::take(&mut c.cut);
        if c.base == 0 {
            // The first window: its shortest answer, the one least likely to have queued (a
            // queue already standing at the start would make its mean a queued latency; the
            // cuts that then bring latency down correct it), but no less than its mean within
            // tolerance (the shortest of answers that vary, kept 12.5% low, would judge the
            // backend's usual answers too slow).
            c.base = unsqueeze(w.min).max(mean * 100 / TOLERANCE_PCT).max(1);
        } else if !w.busy {
            // Unloaded: the mean is the no-load latency; follow it a quarter of the way.
            c.base = if mean > c.base {
                c.base + (mean - c.base).div_ceil(4)
            } else {
                c.base - (c.base - mean) / 4
            };
        } else if mean < c.base {
            c.base = mean;
        }
        let enough = w.count >= MIN_SAMPLES;
        if enough && w.busy {
            // Did the last cut bring latency down, by at least half as much? While requests
            // queue inside the backend latency falls with the limit; at or below its slots it
            // does not.
            let fell = cut > 0 && mean * 128 < last * (128 - cut);
            if mean * 100 > c.base * TOLERANCE_PCT {
                if fell {
                    c.streak = 0;
                } else if cut > 0 && w.full {
                    c.streak += 1;
                }
                if c.streak >= RELEARN_STREAK {
                    // Cut for a while and latency stayed: a slower backend (or a no-load
                    // latency learned too low). Taken wrongly in a queue, the cuts that follow
                    // bring latency down and lower it again.
                    c.base = mean;
                    c.streak = 0;
                } else {
                    let pct = (c.base * TOLERANCE_PCT / mean).max(MIN_GRADIENT_PCT);
                    c.cut = self.cut(&mut c.limit_fp, pct * 64 / 100);
                }
            } else if fell && w.full {
                // Within tolerance, but the last cut brought latency down: requests still
                // queue inside the backend (the no-load latency was learned in a queue). Go on
                // down, by twice the step each time (1/16 to 1/8), until latency stops falling.
                c.streak = 0;
                c.cut = self.cut(&mut c.limit_fp, 64 - (cut * 2).clamp(4, 8));
            } else {
                c.streak = 0;
                // Grow only a limit that held requests back: room nobody asked for is no
                // evidence the backend has it, and would let the next burst straight in.
                if w.full {
                    let step = if mean * 100 <= c.base * CLEAR_PCT {
                        (c.limit_fp / 8).max(FP)
                    } else {
                        FP
                    };
                    c.limit_fp += step;
                }
            }
        }
        c.limit_fp = c.limit_fp.clamp(self.min * FP, self.max * FP);
        let closed = Closed {
            limit: c.limit_fp / FP,
            noload_ns: c.base * TICK_NS,
            mean_ns: mean * TICK_NS,
        };
        (c.write(), closed)
    }

    /// Cuts `limit_fp` to `keep`/64 of itself (not below the lower bound); the cut made, in
    /// 64ths (0: none).
    fn cut(&self, limit_fp: &mut u64, keep: u64) -> u64 {
        let next = (*limit_fp * keep / 64).max(self.min * FP);
        let cut = (*limit_fp).saturating_sub(next) * 64 / (*limit_fp).max(1);
        *limit_fp = next;
        cut.min(0xF)
    }

    /// A control word nothing has updated for [`STALE_NS`] (no request completed, say a
    /// backend that stopped answering and a host whose waits time out) grows back one step
    /// when a request is refused at `now`; `None` when it is fresh.
    pub fn refused(&self, control: u64, now: u64) -> Option<u64> {
        let mut c = Control::read(control);
        if c.limit_fp == 0 {
            return None;
        }
        let age = (((now >> SEEN_SHIFT).wrapping_sub(c.seen)) & SEEN_MASK) << SEEN_SHIFT;
        if age < STALE_NS {
            return None;
        }
        c.seen = (now >> SEEN_SHIFT) & SEEN_MASK;
        c.limit_fp = (c.limit_fp + (c.limit_fp / 8).max(FP)).clamp(self.min * FP, self.max * FP);
        Some(c.write())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A backend of `slots` slots answering in `service` each: the latency of a request
    /// admitted with `in_flight` others (a queue inside it beyond its slots).
    fn latency(slots: u64, service: u64, in_flight: u64) -> u64 {
        service * in_flight.max(slots) / slots
    }

    /// Runs `secs` seconds of a saturated limiter in front of the backend.
    fn run(a: &Adaptive, control: &mut u64, now: &mut u64, secs: u64, slots: u64, service: u64) {
        run_clients(a, control, now, secs, slots, service, u64::MAX, 0);
    }

    /// Runs `secs` seconds of at most `clients` requests at once (each sending its next as
    /// soon as its answer comes) through the limiter to the backend, whose answers vary by up
    /// to ±`spread`% (uniformly); the mean limit over the run.
    #[allow(clippy::too_many_arguments)]
    fn run_clients(
        a: &Adaptive,
        control: &mut u64,
        now: &mut u64,
        secs: u64,
        slots: u64,
        service: u64,
        clients: u64,
        spread: u64,
    ) -> f64 {
        let (mut sample, mut rng, mut sum, mut rounds) = (0, 0x9E37_79B9_7F4A_7C15u64, 0, 0);
        let end = *now + secs * NS_PER_SEC;
        while *now < end {
            let l = a.limit(*control);
            // Every slot the limiter allows (and the clients fill) is used; each completes
            // once per latency, completions spread evenly.
            let n = l.min(clients);
            let lat = latency(slots, service, n);
            for _ in 0..n {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let x = lat * (100 - spread + rng % (2 * spread + 1)) / 100;
                let span = a.span_ns(*control);
                let (s, closed) = a.sample(sample, *now, x, n, l, span);
                sample = s;
                if let Some(w) = closed {
                    *control = a.close(*control, w, *now).0;
                }
                *now += lat / n;
            }
            sum += l;
            rounds += 1;
        }
        sum as f64 / rounds.max(1) as f64
    }

    #[test]
    fn the_limit_does_not_run_ahead_of_demand() {
        // 12 clients on a backend of 30 slots: the limit of 20 never holds them back, so it
        // has no reason to grow (a burst later would otherwise walk into the backend).
        let a = Adaptive::new(1, 1000).unwrap();
        let (mut c, mut now) = (0, 1);
        run_clients(&a, &mut c, &mut now, 60, 30, 50 * MS, 12, 0);
        assert_eq!(a.limit(c), INITIAL_LIMIT);
    }

    #[test]
    fn fewer_clients_than_the_limit_do_not_teach_a_queued_latency() {
        // 12 clients on 4 slots, the limit starting at 20: cutting it to 12 changes nothing
        // at first, and the queued latency must not be taken for the backend's.
        let a = Adaptive::new(1, 1000).unwrap();
        let (mut c, mut now) = (0, 1);
        // The first answers: 12 requests at once, 4 served per 50 ms (the queue forms).
        let mut w = 0;
        for k in 0..12u64 {
            let lat = 50 * MS * (1 + k / 4);
            let (next, closed) = a.sample(w, 1 + lat, lat, 12 - k, 20, a.span_ns(c));
            w = next;
            if let Some(done) = closed {
                c = a.close(c, done, 1 + lat).0;
            }
        }
        now += 150 * MS;
        run_clients(&a, &mut c, &mut now, 30, 4, 50 * MS, 12, 0);
        assert!(
            a.noload_ns(c).abs_diff(50 * MS) < 5 * MS,
            "{}",
            a.noload_ns(c)
        );
        assert!((3..=6).contains(&a.limit(c)), "{}", a.limit(c));
    }

    #[test]
    fn jittery_answers_neither_collapse_the_limit_nor_inflate_it() {
        // A no-load latency learned low (the first window's shortest answer) used to cut the
        // limit a little every window, down to its minimum: cuts that do not bring latency
        // down now re-learn it. One learned in a queue (more clients than slots from the
        // start) used to keep the limit above the slots: cuts that do bring latency down
        // now go on until it stops falling.
        for (slots, service, spread) in [(30, 50, 10), (30, 75, 25), (100, 20, 10), (5, 300, 10)] {
            let a = Adaptive::new(1, 1000).unwrap();
            let (mut c, mut now) = (0, 1);
            run_clients(
                &a,
                &mut c,
                &mut now,
                60,
                slots,
                service * MS,
                u64::MAX,
                spread,
            );
            let mean = run_clients(
                &a,
                &mut c,
                &mut now,
                600,
                slots,
                service * MS,
                u64::MAX,
                spread,
            );
            let ratio = mean / slots as f64;
            assert!(
                (0.85..=1.15).contains(&ratio),
                "{slots} slots of {service} ms ±{spread}%: the limit averaged {mean:.1} over 10 minutes"
            );
        }
    }

    #[test]
    fn learns_the_slot_count_and_stays() {
        let a = Adaptive::new(1, 1000).unwrap();
        let (mut c, mut now) = (0, 1);
        run(&a, &mut c, &mut now, 30, 20, 50 * MS);
        let first = a.limit(c);
        assert!((17..=23).contains(&first), "learned {first}");
        run(&a, &mut c, &mut now, 600, 20, 50 * MS);
        let later = a.limit(c);
        assert!(
            later.abs_diff(first) * 10 <= first,
            "drifted {first} → {later}"
        );
        assert!(
            a.noload_ns(c).abs_diff(50 * MS) < 7 * MS,
            "{}",
            a.noload_ns(c)
        );
    }

    #[test]
    fn follows_capacity_down_and_up() {
        let a = Adaptive::new(1, 1000).unwrap();
        let (mut c, mut now) = (0, 1);
        run(&a, &mut c, &mut now, 20, 40, 50 * MS);
        run(&a, &mut c, &mut now, 2, 20, 50 * MS);
        let l = a.limit(c);
        assert!((16..=26).contains(&l), "after halving: {l}");
        run(&a, &mut c, &mut now, 10, 40, 50 * MS);
        let l = a.limit(c);
        assert!((32..=52).contains(&l), "after recovery: {l}");
    }

    #[test]
    fn a_slower_backend_is_relearned_not_starved() {
        let a = Adaptive::new(1, 1000).unwrap();
        let (mut c, mut now) = (0, 1);
        run(&a, &mut c, &mut now, 20, 20, 50 * MS);
        run(&a, &mut c, &mut now, 20, 20, 100 * MS);
        let l = a.limit(c);
        assert!(
            (18..=26).contains(&l),
            "after the service time doubled: {l}"
        );
        assert!(a.noload_ns(c).abs_diff(100 * MS) < 2 * MS);
    }

    #[test]
    fn idle_traffic_changes_nothing_but_the_baseline() {
        let a = Adaptive::new(1, 1000).unwrap();
        let (mut c, mut s) = (0, 0);
        // One request a second, in flight alone, for ten minutes.
        for i in 0..600u64 {
            let now = 1 + i * NS_PER_SEC;
            let (s2, closed) = a.sample(s, now, 50 * MS, 0, a.limit(c), a.span_ns(c));
            s = s2;
            if let Some(w) = closed {
                c = a.close(c, w, now).0;
            }
        }
        assert_eq!(a.limit(c), INITIAL_LIMIT);
        assert!(a.noload_ns(c).abs_diff(50 * MS) < MS);
    }

    #[test]
    fn stays_within_bounds_and_recovers_when_stale() {
        let a = Adaptive::new(4, 30).unwrap();
        let (mut c, mut now) = (0, 1);
        run(&a, &mut c, &mut now, 20, 100, 10 * MS);
        assert_eq!(a.limit(c), 30);
        // A backend that stops answering in time (every answer a 30 s timeout): the limit
        // falls, then takes the timeouts as the backend's latency rather than staying pinned.
        let mut low = u64::MAX;
        for _ in 0..40 {
            run(&a, &mut c, &mut now, 30, 30, 30_000 * MS);
            low = low.min(a.limit(c));
        }
        assert!(low < 30 && a.limit(c) > 4, "{low} {}", a.limit(c));
        // Answers at the usual latency again: the no-load latency and the limit come back.
        run(&a, &mut c, &mut now, 10, 100, 10 * MS);
        assert_eq!(a.limit(c), 30);
        assert!(a.noload_ns(c) < 11 * MS);
    }

    #[test]
    fn a_stale_limit_grows_back_when_requests_are_refused() {
        let a = Adaptive::new(2, 100).unwrap();
        let c = Control {
            limit_fp: 2 * FP,
            cut: 0,
            base: 100,
            streak: 0,
            seen: 5,
            last: 0,
        }
        .write();
        let at = 5 << SEEN_SHIFT;
        assert_eq!(a.refused(c, at + NS_PER_SEC), None);
        let grown = a.refused(c, at + 11 * NS_PER_SEC).unwrap();
        assert_eq!(a.limit(grown), 3);
        assert_eq!(a.refused(grown, at + 12 * NS_PER_SEC), None);
    }

    #[test]
    fn words_round_trip() {
        let c = Control {
            limit_fp: 0xF_FFFF,
            cut: 0xF,
            base: 777,
            streak: 3,
            seen: 0x1B,
            last: 0xFA1,
        };
        assert_eq!(Control::read(c.write()), c);
        let w = Window {
            start: 0x2BC,
            busy: true,
            full: true,
            count: 500,
            min: 0xA7,
            sum: SUM_MAX,
        };
        assert_eq!(Window::read(w.write()), w);
        assert!(Adaptive::new(0, 5).is_err() && Adaptive::new(6, 5).is_err());
        assert!(Adaptive::new(1, 65536).is_err());
        for t in [1, 15, 16, 17, 100, 777, 1 << 20, TICK_MAX] {
            let back = unsqueeze(squeeze(t));
            assert!(back <= t && back * 8 >= t * 7, "{t} → {back}");
        }
    }
}
