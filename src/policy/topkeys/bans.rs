//! The active bans of an engine, for the status: [`SLOTS`] entries in the counters region
//! after the top keys, shared by every process that shares the region.
//!
//! Entry ([`ENTRY_WORDS`] words): `[0]` the ban's end (ns, the engine's clock; 0 free,
//! [`BUSY`] while written), `[1]` the key's length, `[2]` its limit's ban id (its name and
//! generation, never its position: `policy::engine`'s ban ids), `[3]` the hash of the ban's
//! table entry, then the key's text ([`TEXT_BYTES`] bytes, a longer key cut with its
//! reference, `policy::key_text`). A ban takes a free or ended entry, else the one ending
//! first (the table entry still enforces a ban that left the list). Readers check the end word
//! before and after reading the rest (a sequence lock): a torn entry is skipped. The engine
//! shows an entry only while its limit enforces it (same ban id, and the table entry still
//! banned).

use std::sync::atomic::{fence, AtomicU64, Ordering::*};

use crate::policy::key::KeySpec;
use crate::policy::request::PreparedRequest;

use super::display::Text;
use super::TopArea;
use crate::policy::key_text::write_key;

/// Entries in the list.
pub const SLOTS: usize = 64;
const ENTRY_WORDS: usize = 18;
const HEAD_WORDS: usize = 4;
const TEXT_BYTES: usize = (ENTRY_WORDS - HEAD_WORDS) * 8;
/// Words of the list.
pub(crate) const WORDS: usize = SLOTS * ENTRY_WORDS;
const BUSY: u64 = u64::MAX;

/// One active ban as the status shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActiveBan {
    /// Its key, named as the top keys name keys.
    pub key: String,
    /// When it ends (ns, the engine's clock).
    pub until: u64,
    /// Seconds it still lasts (rounded up).
    pub remaining_s: u64,
}

/// An entry of the list as stored: its ban, its limit's ban id and its table entry's hash.
pub(crate) struct ListedBan {
    pub id: u64,
    pub hash: u64,
    pub ban: ActiveBan,
}

impl TopArea<'_> {
    fn ban_entry(&self, slot: usize) -> &[AtomicU64] {
        &self.bans[slot * ENTRY_WORDS..(slot + 1) * ENTRY_WORDS]
    }

    /// Lists a ban of `spec`'s key for `req` (reference `reference`) by the limit whose ban id
    /// is `id`, stored in its table under `hash`, until `until`, at `now`; the entry taken (for
    /// [`TopArea::ban`]), or `None` when every entry is being written.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub fn add_ban(
        &self,
        id: u64,
        hash: u64,
        spec: &KeySpec,
        req: &PreparedRequest<'_>,
        reference: u64,
        until: u64,
        now: u64,
    ) -> Option<usize> {
        let mut buf = [0u8; TEXT_BYTES];
        let style = self.style(reference, TEXT_BYTES);
        let key = Text::write(&mut buf, |t| write_key(t, &spec.parts, req, true, &style));
        self.put(id, hash, key, until, now)
    }

    /// Lists a ban of the limit whose ban id is `id` (its table entry `hash`) named `key`
    /// until `until`, at `now`: [`TopArea::add_ban`] with the key's text written.
    pub fn put(&self, id: u64, hash: u64, key: &[u8], until: u64, now: u64) -> Option<usize> {
        let mut buf = [0u8; TEXT_BYTES];
        let key = &key[..key.len().min(TEXT_BYTES)];
        buf[..key.len()].copy_from_slice(key);
        for _ in 0..4 {
            // A free or ended entry, else the one ending first.
            let (slot, end) = (0..SLOTS)
                .map(|s| (s, self.ban_entry(s)[0].load(Acquire)))
                .filter(|&(_, end)| end != BUSY)
                .min_by_key(|&(_, end)| if end <= now { 0 } else { end })?;
            let e = self.ban_entry(slot);
            if e[0].compare_exchange(end, BUSY, AcqRel, Relaxed).is_err() {
                continue;
            }
            fence(Release);
            e[1].store(key.len() as u64, Relaxed);
            e[2].store(id, Relaxed);
            e[3].store(hash, Relaxed);
            for (w, chunk) in e[HEAD_WORDS..].iter().zip(buf.chunks(8)) {
                w.store(
                    u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8])),
                    Relaxed,
                );
            }
            e[0].store(until, Release);
            return Some(slot);
        }
        None
    }

    /// Takes the bans whose ban id is `id` and table entry `hash` off the list (a lifted
    /// ban); how many entries it freed.
    pub fn remove_ban(&self, id: u64, hash: u64, now: u64) -> usize {
        let mut freed = 0;
        for slot in 0..SLOTS {
            let Some(b) = self.ban(slot, now) else {
                continue;
            };
            if (b.id, b.hash) == (id, hash)
                && self.ban_entry(slot)[0]
                    .compare_exchange(b.ban.until, 0, AcqRel, Relaxed)
                    .is_ok()
            {
                freed += 1;
            }
        }
        freed
    }

    /// Entry `slot` if it holds a ban that lasts beyond `now`.
    pub fn ban(&self, slot: usize, now: u64) -> Option<ListedBan> {
        let e = self
            .bans
            .get(slot * ENTRY_WORDS..(slot + 1) * ENTRY_WORDS)?;
        let until = e[0].load(Acquire);
        if until == BUSY || until <= now {
            return None;
        }
        let (len, id, hash) = (e[1].load(Relaxed), e[2].load(Relaxed), e[3].load(Relaxed));
        let mut text = [0u8; TEXT_BYTES];
        for (w, chunk) in e[HEAD_WORDS..].iter().zip(text.chunks_mut(8)) {
            chunk.copy_from_slice(&w.load(Relaxed).to_le_bytes());
        }
        fence(Acquire);
        if e[0].load(Relaxed) != until {
            return None;
        }
        let len = (len as usize).min(TEXT_BYTES);
        Some(ListedBan {
            id,
            hash,
            ban: ActiveBan {
                key: String::from_utf8_lossy(&text[..len]).into_owned(),
                until,
                remaining_s: (until - now).div_ceil(1_000_000_000),
            },
        })
    }

    /// The bans of ban id `id` that last beyond `now` (with their table entries), ending last
    /// first.
    pub fn bans_of(&self, id: u64, now: u64) -> Vec<(u64, ActiveBan)> {
        let mut out: Vec<(u64, ActiveBan)> = (0..SLOTS)
            .filter_map(|s| self.ban(s, now))
            .filter(|b| b.id == id)
            .map(|b| (b.hash, b.ban))
            .collect();
        out.sort_by(|(_, a), (_, b)| b.until.cmp(&a.until).then_with(|| a.key.cmp(&b.key)));
        out
    }
}
