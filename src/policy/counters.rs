//! The engine's counters, in process memory or in a region shared by processes (so that every
//! nginx worker adds to, and `weir_status` reads, the same numbers).
//!
//! Every request adds to them, so they are striped like the tables' counters: a thread adds
//! to the stripe it owns, without a locked instruction, or else to the shared stripe (see
//! `region::stripes`), and readers sum the stripes. One shared cache line written by every core
//! on every request costs each request the line's transfer between cores (measured with two
//! threads in docs/PERFORMANCE.md).
//!
//! Layout (all little-endian u64, offsets in words): `[0]` magic, `[1]` number of limits,
//! `[2]` fingerprint of the limit names, `[3]` a random seed (for hashed client addresses),
//! `[4..8]` reserved, then [`STRIPES`] stripes, each of its owner word, [`EngineCounters`],
//! and [`LimitCounters`] (7 words) per limit in policy order, padded to whole 64-byte lines;
//! then the live top keys and per-second history of every limit (`policy::topkeys`), then the
//! list of active bans (`policy::topkeys::bans`), then each limit's saturation figures
//! (`policy::saturation`).

use std::net::IpAddr;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::region::attach::{create_or_attach, Fresh, Mismatch};
use crate::region::header::{magic, Ident};
use crate::region::owner::Backing;
use crate::region::stripes::{add as add_to_stripe, STRIPES};
use crate::region::{atomic_words, Region, WordSpan};

use super::key::KeySpec;
use super::key_text::Hide;
use super::request::PreparedRequest;
use super::topkeys::{ActiveBan, Exposure, LimitTop, TopArea, BAN_SLOTS, BAN_WORDS};

const MAGIC: u64 = magic(b"WEIRCNT", b'7');
const SEED_WORD: usize = 3;
const HEADER_WORDS: usize = 8;
/// A stripe's first word: its owner.
const OWNER_WORDS: usize = 1;
const TOTAL_WORDS: usize = 4;
const LIMIT_WORDS: usize = 7;
const LINE_WORDS: usize = 8;
const NOT_ALIGNED: &str = "counters region must be non-NULL and 8-byte aligned";

atomic_words! {
    /// One stripe's counters of one limit.
    pub(crate) struct LimitCounters {
        pub passed,
        pub delayed,
        pub rejected,
        pub queued,
        pub dry_run_delayed,
        pub dry_run_rejected,
        pub banned,
    }
}

atomic_words! {
    /// One stripe's engine-wide counters.
    pub(crate) struct EngineCounters {
        pub requests,
        pub exempt,
        pub unmatched,
        pub bad_target,
    }
}

const _: () = assert!(std::mem::size_of::<LimitCounters>() == LIMIT_WORDS * 8);
const _: () = assert!(std::mem::size_of::<EngineCounters>() == TOTAL_WORDS * 8);

/// A limit's request counts by verdict (a sum over the stripes, read without a lock: counts
/// added meanwhile may or may not show).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LimitCounts {
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
    /// Requests that waited in a concurrency limit's queue.
    pub queued: u64,
    pub dry_run_delayed: u64,
    pub dry_run_rejected: u64,
    /// Requests refused outright because their key was banned (`ban`).
    pub banned: u64,
}

/// Engine-wide request counts (a sum over the stripes, as [`LimitCounts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineCounts {
    pub requests: u64,
    pub exempt: u64,
    pub unmatched: u64,
    pub bad_target: u64,
}

/// The counter block of one engine.
pub struct Counters {
    /// The block: [`Counters::bytes_for`]`(limits)` bytes, as words.
    words: WordSpan,
    limits: usize,
    /// Words per stripe: `stripe_words(limits)`.
    stride: usize,
    /// How the top-keys area shows client addresses (the policy's `[status] clients`).
    pub(crate) exposure: Exposure,
    /// Key parts whose values key text hides (the policy's `[key_text] hide`).
    pub(crate) hide: Hide,
    /// Whether rejections record their key and client (the policy's `[status] top_keys`).
    pub(crate) record_keys: bool,
    /// Per limit: the id its listed bans carry (the engine's ban ids; 0: none).
    pub(crate) ban_ids: Vec<u64>,
    _backing: Backing<()>,
}

/// Words per stripe for `limits` limits: whole cache lines.
fn stripe_words(limits: usize) -> usize {
    (OWNER_WORDS + TOTAL_WORDS + LIMIT_WORDS * limits).div_ceil(LINE_WORDS) * LINE_WORDS
}

impl Counters {
    /// Bytes a block for `limits` limits takes.
    pub fn bytes_for(limits: usize) -> usize {
        (Self::saturation_at(limits) + limits * super::saturation::WORDS) * 8
    }

    /// Word index of the saturation area.
    fn saturation_at(limits: usize) -> usize {
        Self::top_at(limits) + TopArea::words_for(limits) + BAN_WORDS
    }

    /// Every limit's saturation figures.
    pub(crate) fn saturation(&self) -> super::saturation::SaturationArea<'_> {
        super::saturation::SaturationArea {
            words: self.words.slice(
                Self::saturation_at(self.limits),
                self.limits * super::saturation::WORDS,
            ),
        }
    }

    /// Word index of the top-keys area.
    fn top_at(limits: usize) -> usize {
        HEADER_WORDS + STRIPES * stripe_words(limits)
    }

    /// A block in this process's memory (its stripes on their own cache lines): a fresh
    /// anonymous mapping, of which only the header is written, so its pages cost memory only
    /// once limits count in them (a policy of many limits costs little up front).
    pub fn new(limits: usize) -> Counters {
        let bytes = Self::bytes_for(limits);
        let map = crate::region::alloc::Mapping::new(bytes).expect("memory for counters");
        let map = std::sync::Arc::new(map);
        let mut c =
            Counters::attach_in(map.region(), limits, 0, Fresh::Zeroed).expect("a mapping fits");
        c._backing = Backing::Mapped(map);
        c
    }

    /// Attaches to a block in a caller's region (8-byte aligned), keeping its counts when it
    /// was made for the same limits (same count and `fingerprint`) and this layout, and
    /// starting from zero otherwise (`fresh`: whether a region holding no block is known to be
    /// all zero, so that only the header is written). When the block is (re)initialised, no
    /// other process may be using it (nginx: the master's zone init, before workers start).
    pub fn attach_in(
        region: Region,
        limits: usize,
        fingerprint: u64,
        fresh: Fresh,
    ) -> Result<Counters, String> {
        let need = Self::bytes_for(limits);
        if region.as_ptr() as usize % 8 != 0 {
            return Err(NOT_ALIGNED.into());
        }
        if region.len() < need {
            return Err(format!(
                "counters region of {} bytes, needs {need}",
                region.len()
            ));
        }
        let region = region.part(0, need);
        let words = region.words(HEADER_WORDS);
        let ident = Ident {
            magic: MAGIC,
            version: None,
            size: &[(1, limits as u64)],
            schema: &[(2, fingerprint)],
        };
        let mismatch = Mismatch::Reformat;
        let seed = || words[SEED_WORD].store(random_seed(), Relaxed);
        let kept = create_or_attach(&region, |i| &words[i], &ident, mismatch, fresh, seed);
        kept.map_err(|e| e.to_string())?;
        Ok(Counters {
            words: region.word_span(),
            limits,
            stride: stripe_words(limits),
            exposure: Exposure::default(),
            hide: Hide::default(),
            record_keys: true,
            ban_ids: Vec::new(),
            _backing: Backing::Borrowed,
        })
    }

    /// Index of stripe `s`'s word `w`.
    #[inline]
    fn at(&self, s: usize, w: usize) -> usize {
        debug_assert!(s < STRIPES);
        HEADER_WORDS + s * self.stride + w
    }

    /// Stripe `s`'s engine-wide counters.
    #[inline]
    fn totals_in(&self, s: usize) -> &EngineCounters {
        self.words.view(self.at(s, OWNER_WORDS))
    }

    /// Stripe `s`'s counters of limit `i` (panics when `i` is out of range).
    #[inline]
    fn limit_in(&self, s: usize, i: usize) -> &LimitCounters {
        assert!(i < self.limits, "limit {i} of {}", self.limits);
        self.words
            .view(self.at(s, OWNER_WORDS + TOTAL_WORDS + LIMIT_WORDS * i))
    }

    /// Stripe `s`'s owner word (see `region::stripes`).
    #[inline]
    fn owner_in(&self, s: usize) -> &AtomicU64 {
        self.words.view(self.at(s, 0))
    }

    /// Adds one to an engine-wide counter, in this thread's stripe.
    #[inline]
    pub(crate) fn add_total(&self, field: impl Fn(&EngineCounters) -> &AtomicU64) {
        add_to_stripe(|s| self.owner_in(s), |s| field(self.totals_in(s)));
    }

    /// Adds one to a counter of limit `i`, in this thread's stripe.
    #[inline]
    pub(crate) fn add_limit(&self, i: usize, field: impl Fn(&LimitCounters) -> &AtomicU64) {
        add_to_stripe(|s| self.owner_in(s), |s| field(self.limit_in(s, i)));
    }

    /// The top-keys area.
    fn top(&self) -> TopArea<'_> {
        let at = Self::top_at(self.limits);
        let top = TopArea::words_for(self.limits);
        TopArea {
            words: self.words.slice(at, top),
            bans: self.words.slice(at + top, BAN_WORDS),
            seed: self.seed(),
            exposure: self.exposure,
            hide: &self.hide,
        }
    }

    /// The block's random seed: it keys the hashes of hidden key values and addresses.
    pub(crate) fn seed(&self) -> u64 {
        self.words.view::<AtomicU64>(SEED_WORD).load(Relaxed)
    }

    /// Counts a rejection by limit `i` and records its key (`spec` for `req`, whose reference
    /// is `reference`) and client.
    #[cold]
    #[inline(never)]
    pub(crate) fn rejected(
        &self,
        i: usize,
        spec: &KeySpec,
        req: &PreparedRequest<'_>,
        reference: u64,
        now: u64,
    ) {
        self.add_limit(i, |c| &c.rejected);
        let top = self.top();
        if self.record_keys {
            top.rejected(i, spec, req, reference, now, || self.limit(i).passed);
        } else {
            top.rejected_unnamed(i, now, || self.limit(i).passed);
        }
    }

    /// Counts a delay by limit `i` and records it in its per-second history.
    #[cold]
    #[inline(never)]
    pub(crate) fn delayed(&self, i: usize, now: u64) {
        self.add_limit(i, |c| &c.delayed);
        self.top().delayed(i, now, || self.limit(i).passed);
    }

    /// Lists a ban by limit `i` of `spec`'s key for `req` (its table entry `hash`, the key's
    /// reference `reference`), ending at `until`; its entry.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_ban(
        &self,
        i: usize,
        hash: u64,
        spec: &KeySpec,
        req: &PreparedRequest<'_>,
        reference: u64,
        until: u64,
        now: u64,
    ) -> Option<usize> {
        let id = self.ban_ids[i];
        self.top()
            .add_ban(id, hash, spec, req, reference, until, now)
    }

    /// Takes limit `i`'s listed bans of table entry `hash` off the list; how many.
    pub(crate) fn remove_ban(&self, i: usize, hash: u64, now: u64) -> usize {
        self.top().remove_ban(self.ban_ids[i], hash, now)
    }

    /// The ban listed in entry `slot`, if it lasts beyond `now` and its ban id is a limit's:
    /// that limit, the ban's table entry and the ban.
    pub(crate) fn ban(&self, slot: usize, now: u64) -> Option<(usize, u64, ActiveBan)> {
        let b = self.top().ban(slot, now)?;
        let limit = self.ban_ids.iter().position(|&id| id != 0 && id == b.id)?;
        Some((limit, b.hash, b.ban))
    }

    /// Limit `i`'s listed bans that last beyond `now`, with their table entries.
    pub(crate) fn bans_of(&self, i: usize, now: u64) -> Vec<(u64, ActiveBan)> {
        match self.ban_ids.get(i) {
            Some(&id) if id != 0 => self.top().bans_of(id, now),
            _ => Vec::new(),
        }
    }

    /// Lists again the bans listed in `old`, the counter block of this layout that the host
    /// used before this one (the limits changed, so the block moved), that one of this block's
    /// limits stores under the same ban id (its name and zone generation: bans it still
    /// enforces) and that are not listed yet; how many. Anything else in `old` is ignored.
    pub fn carry_bans(&self, old: Region, now: u64) -> usize {
        if old.as_ptr() as usize % 8 != 0 || old.len() < HEADER_WORDS * 8 {
            return 0;
        }
        let head = old.words(HEADER_WORDS);
        let limits = head[1].load(Relaxed) as usize;
        if head[0].load(Relaxed) != MAGIC || limits > 1 << 24 || old.len() < Self::bytes_for(limits)
        {
            return 0;
        }
        let span = old.part(0, Self::bytes_for(limits)).word_span();
        let from = TopArea {
            words: &[],
            bans: span.slice(Self::top_at(limits) + TopArea::words_for(limits), BAN_WORDS),
            seed: 0,
            exposure: self.exposure,
            hide: &self.hide,
        };
        let to = self.top();
        let listed: Vec<(u64, u64)> = (0..BAN_SLOTS)
            .filter_map(|s| to.ban(s, now))
            .map(|b| (b.id, b.hash))
            .collect();
        (0..BAN_SLOTS)
            .filter_map(|s| from.ban(s, now))
            .filter(|b| b.id != 0 && self.ban_ids.contains(&b.id))
            .filter(|b| !listed.contains(&(b.id, b.hash)))
            .filter(|b| (to.put(b.id, b.hash, b.ban.key.as_bytes(), b.ban.until, now)).is_some())
            .count()
    }

    /// Limit `i`'s top keys and history as of `now` (ns).
    pub fn limit_top(&self, i: usize, now: u64) -> LimitTop {
        self.top().read(i, now, self.limit(i).passed)
    }

    /// The name the status gives client `ip` under this block's exposure.
    pub fn client_name(&self, ip: Option<IpAddr>) -> String {
        let t = self.top();
        super::topkeys::client_name(ip, t.exposure, t.seed)
    }

    /// Engine-wide counts.
    pub fn totals(&self) -> EngineCounts {
        let mut t = EngineCounts::default();
        for s in 0..STRIPES {
            let c = self.totals_in(s);
            t.requests += c.requests.load(Relaxed);
            t.exempt += c.exempt.load(Relaxed);
            t.unmatched += c.unmatched.load(Relaxed);
            t.bad_target += c.bad_target.load(Relaxed);
        }
        t
    }

    /// Counts of limit `i` (panics when `i` is out of range).
    pub fn limit(&self, i: usize) -> LimitCounts {
        let mut t = LimitCounts::default();
        for s in 0..STRIPES {
            let c = self.limit_in(s, i);
            t.passed += c.passed.load(Relaxed);
            t.delayed += c.delayed.load(Relaxed);
            t.rejected += c.rejected.load(Relaxed);
            t.queued += c.queued.load(Relaxed);
            t.dry_run_delayed += c.dry_run_delayed.load(Relaxed);
            t.dry_run_rejected += c.dry_run_rejected.load(Relaxed);
            t.banned += c.banned.load(Relaxed);
        }
        t
    }
}

/// A seed from the system's random source (the clock's nanoseconds if it fails).
pub(crate) fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: writes at most 8 bytes into `b`.
    let got = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if got == 8 {
        u64::from_le_bytes(b)
    } else {
        crate::clock::monotonic_ns()
    }
}

/// A stable fingerprint of a policy's limit names (FNV-1a), so a block is reused only by the
/// same limits in the same order.
pub fn fingerprint<'a>(names: impl Iterator<Item = &'a str>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for name in names {
        for b in name.bytes().chain([0]) {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_block_keeps_counts_for_the_same_limits_only() {
        let map = crate::region::alloc::Mapping::new(Counters::bytes_for(2)).unwrap();
        let region = map.region();
        let fp = fingerprint(["a", "b"].into_iter());
        let c = Counters::attach_in(region, 2, fp, Fresh::Unknown).unwrap();
        for _ in 0..3 {
            c.add_limit(1, |l| &l.rejected);
        }
        for _ in 0..5 {
            c.add_total(|t| &t.requests);
        }
        let again = Counters::attach_in(region, 2, fp, Fresh::Unknown).unwrap();
        assert_eq!(again.limit(1).rejected, 3);
        assert_eq!(again.limit(0), LimitCounts::default());
        assert_eq!(again.totals().requests, 5);
        let other = Counters::attach_in(
            region,
            2,
            fingerprint(["a", "c"].into_iter()),
            Fresh::Unknown,
        )
        .unwrap();
        assert_eq!(other.limit(1).rejected, 0);
        assert_eq!(
            Counters::attach_in(region.part(0, 8), 2, fp, Fresh::Unknown)
                .err()
                .unwrap(),
            format!(
                "counters region of 8 bytes, needs {}",
                Counters::bytes_for(2)
            )
        );
    }

    /// A new in-process block writes its header only: a policy of many limits costs memory as
    /// its limits count (pages resident per `mincore`), not for the whole block up front.
    #[test]
    fn a_new_block_touches_only_what_is_counted() {
        let limits = 1024;
        let c = Counters::new(limits);
        let Backing::Mapped(map) = &c._backing else {
            panic!("an in-process block is a mapping")
        };
        let region = map.region();
        let page = 4096;
        let resident = || {
            let pages = region.len().div_ceil(page);
            let mut v = vec![0u8; pages];
            // SAFETY: the mapping is page-aligned and `v` has a byte per page of it.
            let rc = unsafe { libc::mincore(region.as_ptr().cast(), region.len(), v.as_mut_ptr()) };
            assert_eq!(rc, 0, "mincore");
            v.iter().filter(|b| **b & 1 == 1).count()
        };
        // Pages come in huge pages where the kernel gives them (the mapping is advised to).
        let huge = crate::region::alloc::HUGE_PAGE / page;
        let block_pages = region.len() / page;
        assert!(block_pages > 30 * huge, "{block_pages} pages");
        assert!(
            resident() <= huge,
            "{} pages resident of {block_pages}",
            resident()
        );
        for i in 0..limits {
            c.add_limit(i, |l| &l.passed);
        }
        // This thread's stripe of every limit: a few pages, not the block.
        assert!(resident() <= 3 * huge, "{} pages resident", resident());
        assert_eq!(c.limit(limits - 1).passed, 1);
    }

    #[test]
    fn threads_beyond_the_stripes_lose_no_count() {
        let c = Counters::new(3);
        std::thread::scope(|s| {
            for t in 0..(2 * STRIPES + 3) {
                let c = &c;
                s.spawn(move || {
                    for _ in 0..1000 {
                        c.add_total(|x| &x.requests);
                        c.add_limit(t % 3, |l| &l.passed);
                        c.add_limit(2, |l| &l.dry_run_rejected);
                    }
                });
            }
        });
        let threads = (2 * STRIPES + 3) as u64;
        assert_eq!(c.totals().requests, 1000 * threads);
        assert_eq!(c.totals().exempt, 0);
        let per = |i: usize| (0..threads).filter(|t| *t as usize % 3 == i).count() as u64;
        for i in 0..3 {
            assert_eq!(c.limit(i).passed, 1000 * per(i), "limit {i}");
        }
        assert_eq!(c.limit(2).dry_run_rejected, 1000 * threads);
        assert_eq!(c.limit(1).dry_run_rejected, 0);
    }
}
