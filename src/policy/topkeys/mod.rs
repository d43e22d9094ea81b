//! Live top keys: per limit, which keys and which clients it rejected most in the last
//! minute and the last 15 minutes, and its per-second passed/delayed/rejected history, kept
//! in the engine's counters region so that every process sharing it feeds one summary.
//!
//! Per limit: [`BUCKETS`] one-minute buckets (bucket `minute % BUCKETS`), each two
//! Space-Saving summaries ([`summary`]) of [`TOP`] entries, the rejected keys (entries of
//! [`KEY_WORDS`] words) and the rejected clients ([`CLIENT_WORDS`]); then the per-second
//! [`ring`]. Only delays and rejections write here; a pass costs nothing. Under a flood only
//! a weighted sample of rejections is named ([`sample`]).
//!
//! "Last minute" is the current and the previous minute bucket; "last 15 minutes" every
//! bucket of the last 15 minutes, merged by adding counts (Space-Saving summaries merge so).

mod atom;
mod bans;
mod display;
mod ring;
mod sample;
mod summary;

use std::net::IpAddr;
use std::sync::atomic::AtomicU64;

pub use crate::policy::key_text::Exposure;
pub(crate) use bans::WORDS as BAN_WORDS;
pub use bans::{ActiveBan, SLOTS as BAN_SLOTS};
pub use ring::{PerSecond, SECONDS};
pub use sample::{EVERY as SAMPLE_EVERY, FULL as NAMED_IN_FULL};
pub use summary::Counted;
/// The summary and history over any atomic words, for the loom models.
#[doc(hidden)]
pub use {atom::Atom, ring::Ring, summary::Summary};

use crate::policy::key::KeySpec;
use crate::policy::key_text::{fnv as tag, write_ip, write_key, Hide, Style};
use crate::policy::request::PreparedRequest;
use display::Text;
use ring::SLOT_WORDS;
use summary::top;

/// Minute buckets kept.
pub const BUCKETS: usize = 15;
/// Entries per summary.
pub const TOP: usize = 16;
/// Names shown per list.
pub const SHOWN: usize = 10;
/// Words per key entry (13 words of name: keys up to 104 bytes, longer ones cut with their
/// reference, `policy::key_text`).
const KEY_WORDS: usize = 16;
/// Bytes of a key entry's name.
const KEY_NAME: usize = (KEY_WORDS - 3) * 8;
/// Words per client entry (40 bytes of name: any IPv6 address).
const CLIENT_WORDS: usize = 8;
const BUCKET_WORDS: usize = TOP * (KEY_WORDS + CLIENT_WORDS);
const LIMIT_WORDS: usize = BUCKETS * BUCKET_WORDS + SECONDS * SLOT_WORDS;
const NS_PER_S: u64 = 1_000_000_000;

/// The top-keys area of a counters region: [`TopArea::words_for`] words per policy.
pub(crate) struct TopArea<'a> {
    pub words: &'a [AtomicU64],
    /// The active bans ([`bans`]).
    pub bans: &'a [AtomicU64],
    /// Seeds the hashes of `hashed` addresses (random per region).
    pub seed: u64,
    pub exposure: Exposure,
    /// Key parts whose values are hidden (the policy's `[key_text] hide`).
    pub hide: &'a Hide,
}

/// One window's view of a limit: what it delayed and rejected, and whom it rejected most.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub seconds: u64,
    /// Passed in the window's seconds whose passes are known ([`PerSecond::passed`]).
    pub passed: u64,
    pub delayed: u64,
    pub rejected: u64,
    /// Rejected keys, most first (counts are estimates under a flood, see `sample` and
    /// `summary`).
    pub keys: Vec<Counted>,
    /// Rejected clients, most first.
    pub clients: Vec<Counted>,
}

/// A limit's live view.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitTop {
    pub last_1m: Window,
    pub last_15m: Window,
    pub per_second: PerSecond,
    /// Its active bans, ending last first; `None` when the limit has no `ban`.
    pub bans: Option<Vec<ActiveBan>>,
}

impl TopArea<'_> {
    pub fn words_for(limits: usize) -> usize {
        limits * LIMIT_WORDS
    }

    fn limit(&self, i: usize) -> &[AtomicU64] {
        &self.words[i * LIMIT_WORDS..(i + 1) * LIMIT_WORDS]
    }

    fn summaries(&self, i: usize, minute: u32) -> (Summary<'_, AtomicU64>, Summary<'_, AtomicU64>) {
        let at = minute as usize % BUCKETS * BUCKET_WORDS;
        let b = &self.limit(i)[at..at + BUCKET_WORDS];
        let (keys, clients) = b.split_at(TOP * KEY_WORDS);
        (
            Summary {
                words: keys,
                width: KEY_WORDS,
            },
            Summary {
                words: clients,
                width: CLIENT_WORDS,
            },
        )
    }

    fn ring(&self, i: usize) -> Ring<'_, AtomicU64> {
        Ring {
            words: &self.limit(i)[BUCKETS * BUCKET_WORDS..],
        }
    }

    /// How keys are written here, `max` bytes at most; `reference` the key's.
    pub(crate) fn style(&self, reference: u64, max: usize) -> Style<'_> {
        Style {
            exposure: self.exposure,
            hide: self.hide,
            seed: self.seed,
            reference: Some(reference),
            max,
        }
    }

    /// Records a rejection by limit `i` of key `spec` for `req` (whose reference is
    /// `reference`) at `now` (ns), naming it when [`sample::weight`] says so; `passed` reads
    /// the limit's passed total (called at most once a second).
    #[cold]
    #[inline(never)]
    pub fn rejected(
        &self,
        i: usize,
        spec: &KeySpec,
        req: &PreparedRequest<'_>,
        reference: u64,
        now: u64,
        passed: impl FnOnce() -> u64,
    ) {
        let second = (now / NS_PER_S) as u32;
        let ring = self.ring(i);
        ring.sample(second, passed);
        let weight = sample::weight(ring.rejected(second), second, i);
        if weight == 0 {
            return;
        }
        let (keys, clients) = self.summaries(i, second / 60);
        // Longer than any stored name (truncated to the entry).
        let mut buf = [0u8; 128];
        let style = self.style(reference, KEY_NAME);
        let key = Text::write(&mut buf, |t| write_key(t, &spec.parts, req, true, &style));
        keys.record(second / 60, tag(0, key), key, weight);
        let client = Text::write(&mut buf, |t| {
            write_ip(t, req.client, None, self.exposure, self.seed);
        });
        clients.record(second / 60, tag(0, client), client, weight);
    }

    /// Records a rejection by limit `i` at `now` (ns) in its history only.
    #[cold]
    #[inline(never)]
    pub fn rejected_unnamed(&self, i: usize, now: u64, passed: impl FnOnce() -> u64) {
        self.history(i, now, passed, |r, s| {
            r.rejected(s);
        });
    }

    /// Records a delay by limit `i` at `now` (ns).
    #[cold]
    #[inline(never)]
    pub fn delayed(&self, i: usize, now: u64, passed: impl FnOnce() -> u64) {
        self.history(i, now, passed, |r, s| r.delayed(s));
    }

    /// Samples limit `i`'s passed total for the second of `now` (once a second) and `add`s
    /// to that second.
    fn history(
        &self,
        i: usize,
        now: u64,
        passed: impl FnOnce() -> u64,
        add: impl FnOnce(&Ring<'_, AtomicU64>, u32),
    ) {
        let second = (now / NS_PER_S) as u32;
        let ring = self.ring(i);
        ring.sample(second, passed);
        add(&ring, second);
    }

    /// Limit `i` as of `now` (ns), whose passed total is `passed`.
    pub fn read(&self, i: usize, now: u64, passed: u64) -> LimitTop {
        let second = now / NS_PER_S;
        let ring = self.ring(i);
        ring.sample(second as u32, || passed);
        let per_second = ring.read(second, passed);
        let minute = (second / 60) as u32;
        let window = |minutes: u32, seconds: usize| {
            let (mut keys, mut clients) = (Vec::new(), Vec::new());
            for m in 0..minutes {
                let m = minute.wrapping_sub(m);
                let (k, c) = self.summaries(i, m);
                k.read(m, &mut keys);
                c.read(m, &mut clients);
            }
            let from = SECONDS - seconds;
            Window {
                seconds: seconds as u64,
                passed: per_second.passed[from..].iter().flatten().sum(),
                delayed: per_second.delayed[from..].iter().sum(),
                rejected: per_second.rejected[from..].iter().sum(),
                keys: top(keys, SHOWN),
                clients: top(clients, SHOWN),
            }
        };
        LimitTop {
            last_1m: window(2, 60),
            last_15m: window(BUCKETS as u32, SECONDS),
            per_second,
            bans: None,
        }
    }
}

/// The client part of a status for an address, as the summaries name it (tests and docs).
pub fn client_name(ip: Option<IpAddr>, exposure: Exposure, seed: u64) -> String {
    let mut buf = [0u8; 64];
    let name = Text::write(&mut buf, |t| {
        write_ip(t, ip, None, exposure, seed);
    });
    String::from_utf8_lossy(name).into_owned()
}
