//! Core table throughput: ns per check, weir vs governor vs a one-CAS floor.
//!
//! `cargo bench --bench table` (about 2–3 minutes). Results and their reading are in
//! docs/PERFORMANCE.md.
//!
//! Every scenario feeds the same key sequence and the same synthetic clock to each contender:
//! `now` advances by `STEP_NS` per check (per thread: `threads · STEP_NS`, so the arrival rate
//! per key is the same with 1 and 2 threads), and each key's rate is set so a key arrives at
//! 1.25× its rate with no burst — about half the checks pass (and write), half are rejected
//! (read only); the run prints weir's pass rate per group.
//! governor gets the same `now` through a thread-local [`Clock`]; rows marked "own clock" use
//! its default `QuantaClock` instead, as an application would.
//!
//! Keys are 8-byte little-endian `u64`s (random values, shuffled order); every contender hashes
//! the key on every check (weir and the floor with the table's ahash, governor with its
//! `DashMap`'s default SipHash).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use governor::clock::{Clock, QuantaClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use std::cell::Cell;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};
use weir::limiter::{Concurrency, Delay, Gcra, Rate, SlidingWindow, NS_PER_SEC};
use weir::table::Table;

/// Synthetic clock advance per check, per key sequence position.
const STEP_NS: u64 = 8;
/// GCRA burst for weir (governor's `allow_burst` is `BURST + 1`: the same tolerance).
const BURST: u64 = 0;
/// Some large start so `now` is never near 0.
const T0: u64 = 1_000 * NS_PER_SEC;

// ---------------------------------------------------------------------------------------------
// Workload: a key sequence and a cursor (position, clock) that persists across criterion calls.

struct Workload {
    keys: Vec<u64>,
    pos: AtomicUsize,
    clock: AtomicU64,
}

impl Workload {
    /// `count` distinct random keys in a shuffled order.
    fn new(count: usize) -> Workload {
        let mut rng = SplitMix(0x5eed ^ count as u64);
        let mut keys: Vec<u64> = (0..count).map(|_| rng.next()).collect();
        for i in (1..keys.len()).rev() {
            let j = (rng.next() % (i as u64 + 1)) as usize;
            keys.swap(i, j);
        }
        Workload {
            keys,
            pos: AtomicUsize::new(0),
            clock: AtomicU64::new(T0),
        }
    }

    /// Per-key emission interval such that each key arrives at 1.25× its rate.
    fn interval_ns(&self) -> u64 {
        self.keys.len() as u64 * STEP_NS * 5 / 4
    }

    /// Runs `n` checks split over `threads` threads; returns the wall time of the slowest.
    fn run<F: Fn(u64, u64) + Sync>(&self, threads: usize, n: u64, check: F) -> Duration {
        let len = self.keys.len();
        let start_pos = self.pos.load(Relaxed);
        let start_clock = self.clock.load(Relaxed);
        let per = n / threads as u64;
        let step = STEP_NS * threads as u64;
        let worker = |t: usize| {
            let mut i = (start_pos + t * len / threads) % len;
            let mut now = start_clock + t as u64 * STEP_NS;
            for _ in 0..per {
                check(black_box(self.keys[i]), now);
                i += 1;
                if i == len {
                    i = 0;
                }
                now += step;
            }
        };
        let elapsed = if threads == 1 {
            let t = Instant::now();
            worker(0);
            t.elapsed()
        } else {
            let barrier = Barrier::new(threads);
            let slowest = Mutex::new(Duration::ZERO);
            std::thread::scope(|s| {
                for t in 0..threads {
                    let (barrier, slowest, worker) = (&barrier, &slowest, &worker);
                    s.spawn(move || {
                        barrier.wait();
                        let start = Instant::now();
                        worker(t);
                        let e = start.elapsed();
                        let mut m = slowest.lock().unwrap();
                        *m = (*m).max(e);
                    });
                }
            });
            slowest.into_inner().unwrap()
        };
        self.pos.store((start_pos + per as usize) % len, Relaxed);
        self.clock.store(start_clock + per * step, Relaxed);
        elapsed
    }
}

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

// ---------------------------------------------------------------------------------------------
// Contenders.

fn weir_table(keys: usize) -> Table {
    Table::new(Table::bytes_for((keys * 2).max(64)), 1, 0).expect("table")
}

fn weir_gcra(w: &Workload) -> Gcra {
    Gcra::new(
        Rate {
            count: 1,
            period_ns: w.interval_ns(),
        },
        BURST,
        Delay::NoDelay,
    )
    .expect("gcra")
}

thread_local! {
    static NOW: Cell<u64> = const { Cell::new(0) };
}

/// governor's clock reading the benchmark's synthetic `now` (set before each check).
#[derive(Clone, Copy, Default, Debug)]
struct BenchClock;

impl Clock for BenchClock {
    type Instant = Duration;
    #[inline]
    fn now(&self) -> Duration {
        Duration::from_nanos(NOW.with(Cell::get))
    }
}

fn quota(w: &Workload) -> Quota {
    Quota::with_period(Duration::from_nanos(w.interval_ns()))
        .expect("quota")
        .allow_burst(NonZeroU32::new(BURST as u32 + 1).unwrap())
}

type GovKeyed<C> =
    RateLimiter<u64, DashMapStateStore<u64>, C, NoOpMiddleware<<C as Clock>::Instant>>;
type GovDirect<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

fn gov_keyed<C: Clock>(w: &Workload, clock: C) -> GovKeyed<C> {
    RateLimiter::new(quota(w), DashMapStateStore::default(), clock)
}

fn gov_direct<C: Clock>(w: &Workload, clock: C) -> GovDirect<C> {
    RateLimiter::direct_with_clock(quota(w), clock)
}

/// Zeroed `AtomicU64`s, optionally on transparent huge pages.
struct Slots {
    ptr: *mut AtomicU64,
    len: usize,
    layout: std::alloc::Layout,
}

// SAFETY: the slots are atomics; the allocation is owned.
unsafe impl Sync for Slots {}

impl Slots {
    fn new(len: usize, huge: bool) -> Slots {
        let bytes = len * 8;
        let align = if huge { 2 << 20 } else { 64 };
        let layout = std::alloc::Layout::from_size_align(bytes, align).unwrap();
        // SAFETY: non-zero size; zeroed below before use.
        let ptr = unsafe { std::alloc::alloc(layout) };
        assert!(!ptr.is_null());
        if huge {
            // SAFETY: advice on this allocation only.
            unsafe { libc::madvise(ptr.cast(), bytes, libc::MADV_HUGEPAGE) };
        }
        // SAFETY: `bytes` writable bytes; all-zero is a valid AtomicU64.
        unsafe { std::ptr::write_bytes(ptr, 0, bytes) };
        Slots {
            ptr: ptr.cast(),
            len,
            layout,
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl std::ops::Index<usize> for Slots {
    type Output = AtomicU64;
    fn index(&self, i: usize) -> &AtomicU64 {
        assert!(i < self.len);
        // SAFETY: in bounds, initialised above.
        unsafe { &*self.ptr.add(i) }
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr.cast(), self.layout) };
    }
}

/// The floors' GCRA step: the TAT after admitting one request at `now`, or `None` to reject.
#[inline(always)]
fn next_tat(tat: u64, now: u64, interval_ns: u64, tolerance_ns: u64) -> Option<u64> {
    let new = tat.max(now) + interval_ns;
    (new - now <= tolerance_ns).then_some(new)
}

/// The floor: one `AtomicU64` per slot, hash → index → load + compare-exchange of a GCRA TAT.
/// No tags, no probing, no counters: colliding keys simply share a state.
struct Floor {
    slots: Slots,
    hasher: ahash::RandomState,
    interval_ns: u64,
    tolerance_ns: u64,
}

impl Floor {
    /// `slots_per_key` 2 gives 16 B/key; 4 gives weir's footprint (2 slots of 16 B per key).
    /// `huge`: allocated like a weir table of 2 MiB or more (aligned, advised to use huge
    /// pages), to separate TLB reach from per-check work.
    fn new(w: &Workload, slots_per_key: usize, huge: bool) -> Floor {
        let n = (w.keys.len() * slots_per_key).max(64);
        Floor {
            slots: Slots::new(n, huge),
            hasher: ahash::RandomState::new(),
            interval_ns: w.interval_ns(),
            tolerance_ns: (BURST + 1) * w.interval_ns(),
        }
    }

    #[inline]
    fn check(&self, key: u64, now: u64) -> bool {
        self.check_padded::<0>(key, now)
    }

    /// [`Floor::check`] plus `PAD` one-cycle instructions that depend on the loaded state, in
    /// eight independent chains (so they add almost no latency, only instructions waiting for
    /// the cache miss): a model of a check that does more work with the state it loads.
    #[inline]
    fn check_padded<const PAD: usize>(&self, key: u64, now: u64) -> bool {
        let h = self.hasher.hash_one(key.to_le_bytes());
        let slot = &self.slots[((h as u128 * self.slots.len() as u128) >> 64) as usize];
        let mut tat = slot.load(Acquire);
        if PAD > 0 {
            let mut chains: [u64; 8] = std::array::from_fn(|i| tat ^ i as u64);
            for _ in 0..PAD / 8 {
                for c in chains.iter_mut() {
                    *c = opaque_inc(*c);
                }
            }
            black_box(chains.iter().fold(0, |a, b| a ^ b));
        }
        loop {
            let Some(new) = next_tat(tat, now, self.interval_ns, self.tolerance_ns) else {
                return false;
            };
            match slot.compare_exchange(tat, new, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(t) => tat = t,
            }
        }
    }
}

/// The tagged floor: the floor with weir's 16-byte slot, `hash (high 64) | TAT (low 64)`: hash
/// → index → one 16-byte load → one 16-byte compare-exchange that also writes the hash. Like
/// the floor, it has no probing and no counters, and colliding keys share a state (the tag is
/// written, not checked), so it sees the floor's pass rate: the cost of the slot width alone.
/// The load goes through portable-atomic (with AVX, an indirect call to one `vmovdqa`); an
/// inlined `vmovdqa`, as weir's table has, made no measurable difference in a plain loop.
struct TaggedFloor {
    /// Pairs of `AtomicU64`, 16-byte aligned (`Slots` aligns to 64): slot `i` is words `2i, 2i+1`.
    words: Slots,
    hasher: ahash::RandomState,
    interval_ns: u64,
    tolerance_ns: u64,
}

impl TaggedFloor {
    /// 2 slots of 16 B per key: weir's footprint (32 B/key), on huge pages like weir's table.
    fn new(w: &Workload) -> TaggedFloor {
        TaggedFloor {
            words: Slots::new((w.keys.len() * 4).max(64), true),
            hasher: ahash::RandomState::new(),
            interval_ns: w.interval_ns(),
            tolerance_ns: (BURST + 1) * w.interval_ns(),
        }
    }

    #[inline]
    fn check(&self, key: u64, now: u64) -> bool {
        let h = self.hasher.hash_one(key.to_le_bytes());
        let i = ((h as u128 * (self.words.len() / 2) as u128) >> 64) as usize;
        let first = &self.words[2 * i];
        // SAFETY: words 2i and 2i+1 are in bounds (checked by the index above plus the even
        // length) and 16-byte aligned; `portable_atomic::AtomicU128` has the layout of u128.
        let slot = unsafe { &*(first as *const AtomicU64).cast::<portable_atomic::AtomicU128>() };
        let mut word = slot.load(Acquire);
        loop {
            let Some(new) = next_tat(word as u64, now, self.interval_ns, self.tolerance_ns) else {
                return false;
            };
            match slot.compare_exchange(word, ((h as u128) << 64) | new as u128, AcqRel, Acquire) {
                Ok(_) => return true,
                Err(now_word) => word = now_word,
            }
        }
    }
}

/// `x + 1` as one instruction the compiler cannot fold, merge or vectorize.
#[inline(always)]
fn opaque_inc(x: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        let y;
        // SAFETY: a register add; touches no memory or stack.
        unsafe {
            std::arch::asm!("lea {y}, [{x} + 1]", x = in(reg) x, y = lateout(reg) y, options(pure, nomem, nostack, preserves_flags))
        };
        y
    }
    #[cfg(not(target_arch = "x86_64"))]
    black_box(x + 1)
}

// ---------------------------------------------------------------------------------------------
// Benchmarks.

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

/// Primes every contender with one pass over the keys, so no scenario measures first inserts.
fn prime(w: &Workload, check: impl Fn(u64, u64) + Sync) {
    w.run(1, w.keys.len() as u64, check);
}

/// Share of checks that `check` admits over four passes of the keys, as a percentage, after
/// one unmeasured pass (a key arrives every 0.8 emission intervals, so it alternates between
/// passing and being rejected, in a phase set by when `check` last ran).
fn pass_percent(w: &Workload, check: impl Fn(u64, u64) -> bool + Sync) -> f64 {
    let n = w.keys.len() as u64;
    w.run(1, n, |k, now| {
        check(k, now);
    });
    let passed = AtomicU64::new(0);
    w.run(1, 4 * n, |k, now| {
        if check(k, now) {
            passed.fetch_add(1, Relaxed);
        }
    });
    100.0 * passed.into_inner() as f64 / (4 * n) as f64
}

fn gcra_group(c: &mut Criterion, name: &str, keys: usize) {
    let mut g = c.benchmark_group(name);
    let w = Workload::new(keys);

    let table = weir_table(keys);
    let alg = weir_gcra(&w);
    let weir = |k: u64, now: u64| {
        black_box(table.check(&alg, table.key_hash(&k.to_le_bytes()), 1, now));
    };
    let gk = gov_keyed(&w, BenchClock);
    let gov = |k: u64, now: u64| {
        NOW.with(|c| c.set(now));
        black_box(gk.check_key(&k).is_ok());
    };
    let floor = Floor::new(&w, 2, false);
    let fl = |k: u64, now: u64| {
        black_box(floor.check(k, now));
    };
    prime(&w, weir);
    prime(&w, gov);
    prime(&w, fl);

    for threads in [1, 2] {
        g.bench_function(BenchmarkId::new("weir", threads), |b| {
            b.iter_custom(|n| w.run(threads, n, weir))
        });
        g.bench_function(BenchmarkId::new("governor_keyed", threads), |b| {
            b.iter_custom(|n| w.run(threads, n, gov))
        });
        g.bench_function(BenchmarkId::new("floor", threads), |b| {
            b.iter_custom(|n| w.run(threads, n, fl))
        });
    }

    if keys == 1_000_000 {
        // The floor with weir's memory footprint (32 B/key) and, like weir's table, on huge
        // pages, at 16 and 32 B/key: separates cache and TLB reach from per-check work.
        for (name, per_key, huge) in [
            ("floor_same_bytes", 4, false),
            ("floor_huge_pages", 2, true),
            ("floor_same_bytes_huge_pages", 4, true),
        ] {
            let f = Floor::new(&w, per_key, huge);
            let check = |k: u64, now: u64| {
                black_box(f.check(k, now));
            };
            prime(&w, check);
            for threads in [1, 2] {
                g.bench_function(BenchmarkId::new(name, threads), |b| {
                    b.iter_custom(|n| w.run(threads, n, check))
                });
            }
        }
        let tagged = TaggedFloor::new(&w);
        let tf = |k: u64, now: u64| {
            black_box(tagged.check(k, now));
        };
        prime(&w, tf);
        for threads in [1, 2] {
            g.bench_function(BenchmarkId::new("floor_tagged", threads), |b| {
                b.iter_custom(|n| w.run(threads, n, tf))
            });
        }
        eprintln!(
            "{name}: tagged floor passed {:.0} %",
            pass_percent(&w, |k, now| tagged.check(k, now))
        );
        // The floor at weir's footprint with 32 and 64 more instructions that wait for each
        // check's cache miss (weir's check does ~100 such): how much per-check work after the
        // load, not memory, costs at this size (1 thread).
        let f = Floor::new(&w, 4, false);
        let pad32 = |k: u64, now: u64| {
            black_box(f.check_padded::<32>(k, now));
        };
        let pad64 = |k: u64, now: u64| {
            black_box(f.check_padded::<64>(k, now));
        };
        prime(&w, pad32);
        g.bench_function(
            BenchmarkId::new("floor_same_bytes_plus_32_dependent", 1),
            |b| b.iter_custom(|n| w.run(1, n, pad32)),
        );
        g.bench_function(
            BenchmarkId::new("floor_same_bytes_plus_64_dependent", 1),
            |b| b.iter_custom(|n| w.run(1, n, pad64)),
        );
    }

    if keys == 1 {
        let gd = gov_direct(&w, BenchClock);
        let direct = |_: u64, now: u64| {
            NOW.with(|c| c.set(now));
            black_box(gd.check().is_ok());
        };
        for threads in [1, 2] {
            g.bench_function(BenchmarkId::new("governor_direct", threads), |b| {
                b.iter_custom(|n| w.run(threads, n, direct))
            });
        }
        // As applications run them: governor reads its own clock, weir is given
        // `clock::monotonic_ns()` (the `now` argument is ignored by governor here, and the
        // pass/reject mix depends on real speed).
        let gk_own = gov_keyed(&w, QuantaClock::default());
        let gd_own = gov_direct(&w, QuantaClock::default());
        g.bench_function(BenchmarkId::new("weir_with_clock", 1), |b| {
            b.iter_custom(|n| {
                w.run(1, n, |k, _| {
                    let now = weir::clock::monotonic_ns();
                    black_box(table.check(&alg, table.key_hash(&k.to_le_bytes()), 1, now));
                })
            })
        });
        g.bench_function(BenchmarkId::new("governor_keyed_own_clock", 1), |b| {
            b.iter_custom(|n| {
                w.run(1, n, |k, _| {
                    black_box(gk_own.check_key(&k).is_ok());
                })
            })
        });
        g.bench_function(BenchmarkId::new("governor_direct_own_clock", 1), |b| {
            b.iter_custom(|n| {
                w.run(1, n, |_, _| {
                    black_box(gd_own.check().is_ok());
                })
            })
        });
    }
    g.finish();
    let s = table.stats();
    eprintln!(
        "{name}: weir passed {:.0} %, longest probe {}, evictions {}; floor passed {:.0} %",
        100.0 * s.passed as f64 / (s.passed + s.rejected) as f64,
        s.longest_probe,
        s.evicted_active + s.evicted_expired,
        pass_percent(&w, |k, now| floor.check(k, now)),
    );
}

fn hot_key(c: &mut Criterion) {
    gcra_group(c, "gcra_hot_key", 1);
}

fn distinct_keys(c: &mut Criterion) {
    gcra_group(c, "gcra_1k_keys", 1_000);
    gcra_group(c, "gcra_100k_keys", 100_000);
    gcra_group(c, "gcra_1m_keys", 1_000_000);
}

/// Sliding window and concurrency (acquire + release = one iteration), 1 thread.
fn other_algorithms(c: &mut Criterion) {
    let mut g = c.benchmark_group("other_algorithms");
    for keys in [1, 100_000] {
        let w = Workload::new(keys);
        let table = weir_table(keys);
        // ~80 % pass: a window sees `window / (keys · STEP_NS)` arrivals per key.
        let window_ns = (keys as u64 * STEP_NS * 1_000).max(NS_PER_SEC / 1_000);
        let events = window_ns / (keys as u64 * STEP_NS) * 4 / 5;
        let sw = SlidingWindow::new(events, window_ns).expect("sliding");
        let sliding = |k: u64, now: u64| {
            black_box(table.check(&sw, table.key_hash(&k.to_le_bytes()), 1, now));
        };
        prime(&w, sliding);
        g.bench_function(BenchmarkId::new("sliding", keys), |b| {
            b.iter_custom(|n| w.run(1, n, sliding))
        });
        let s = table.stats();
        eprintln!(
            "sliding {keys} keys: passed {:.0} %",
            100.0 * s.passed as f64 / (s.passed + s.rejected) as f64
        );

        let ctable = weir_table(keys);
        let conc = Concurrency::new(16, 120 * NS_PER_SEC).expect("concurrency");
        let acq_rel = |k: u64, now: u64| {
            let h = ctable.key_hash(&k.to_le_bytes());
            let (v, permit) = ctable.acquire(&conc, h, now);
            black_box(v);
            if let Some(p) = permit {
                ctable.release(&conc, p, now);
            }
        };
        prime(&w, acq_rel);
        g.bench_function(BenchmarkId::new("concurrency_acquire_release", keys), |b| {
            b.iter_custom(|n| w.run(1, n, acq_rel))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = hot_key, distinct_keys, other_algorithms
}
criterion_main!(benches);
