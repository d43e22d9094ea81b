//! The active bans of an engine, for the status: [`SLOTS`] entries in the counters region
//! after the top keys, shared by every process that shares the region.
//!
//! Entry ([`ENTRY_WORDS`] words): `[0]` the ban's end (ns, the engine's clock; 0 free,
//! [`BUSY`] while written), `[1]` limit index `| key length << 32`, `[2]` the key's hash (what
//! a lifted ban is found by), then the key's text ([`TEXT_BYTES`] bytes, a longer key cut with
//! its reference, `policy::key_text`). A ban takes a free or ended entry, else the one
//! ending first (the table entry still enforces a ban that left the list). Readers check the
//! end word before and after reading the rest (a sequence lock): a torn entry is skipped.

use std::sync::atomic::{fence, AtomicU64, Ordering::*};

use crate::policy::key::KeySpec;
use crate::policy::request::PreparedRequest;

use super::display::Text;
use super::TopArea;
use crate::policy::key_text::write_key;

/// Entries in the list.
pub const SLOTS: usize = 64;
const ENTRY_WORDS: usize = 16;
const TEXT_AT: usize = 3;
const TEXT_BYTES: usize = (ENTRY_WORDS - TEXT_AT) * 8;
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

impl TopArea<'_> {
    fn ban_entry(&self, slot: usize) -> &[AtomicU64] {
        &self.bans[slot * ENTRY_WORDS..(slot + 1) * ENTRY_WORDS]
    }

    /// Lists a ban of `spec`'s key for `req` (hash `key_hash`, reference `reference`) by
    /// limit `i` until `until`, at `now`; the entry taken (for [`TopArea::ban`]), or `None`
    /// when every entry is being written.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    pub fn add_ban(
        &self,
        i: usize,
        spec: &KeySpec,
        req: &PreparedRequest<'_>,
        key_hash: u64,
        reference: u64,
        until: u64,
        now: u64,
    ) -> Option<usize> {
        let mut buf = [0u8; TEXT_BYTES];
        let style = self.style(reference, TEXT_BYTES);
        let key = Text::write(&mut buf, |t| write_key(t, &spec.parts, req, true, &style));
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
            e[1].store(i as u64 | (key.len() as u64) << 32, Relaxed);
            e[2].store(key_hash, Relaxed);
            for (w, chunk) in e[TEXT_AT..].iter().zip(buf.chunks(8)) {
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

    /// Takes the bans of key `key_hash` by limit `i` off the list (a lifted ban); how many
    /// entries it freed.
    pub fn remove_ban(&self, i: usize, key_hash: u64, now: u64) -> usize {
        let mut freed = 0;
        for slot in 0..SLOTS {
            let Some((l, ban)) = self.ban(slot, now) else {
                continue;
            };
            if l == i
                && self.ban_entry(slot)[2].load(Relaxed) == key_hash
                && self.ban_entry(slot)[0]
                    .compare_exchange(ban.until, 0, AcqRel, Relaxed)
                    .is_ok()
            {
                freed += 1;
            }
        }
        freed
    }

    /// Entry `slot` if it holds a ban that lasts beyond `now`: its limit and the ban.
    pub fn ban(&self, slot: usize, now: u64) -> Option<(usize, ActiveBan)> {
        let e = self
            .bans
            .get(slot * ENTRY_WORDS..(slot + 1) * ENTRY_WORDS)?;
        let until = e[0].load(Acquire);
        if until == BUSY || until <= now {
            return None;
        }
        let head = e[1].load(Relaxed);
        let mut text = [0u8; TEXT_BYTES];
        for (w, chunk) in e[TEXT_AT..].iter().zip(text.chunks_mut(8)) {
            chunk.copy_from_slice(&w.load(Relaxed).to_le_bytes());
        }
        fence(Acquire);
        if e[0].load(Relaxed) != until {
            return None;
        }
        let len = ((head >> 32) as usize).min(TEXT_BYTES);
        Some((
            head as u32 as usize,
            ActiveBan {
                key: String::from_utf8_lossy(&text[..len]).into_owned(),
                until,
                remaining_s: (until - now).div_ceil(1_000_000_000),
            },
        ))
    }

    /// Limit `i`'s bans that last beyond `now`, ending last first.
    pub fn bans_of(&self, i: usize, now: u64) -> Vec<ActiveBan> {
        let mut out: Vec<ActiveBan> = (0..SLOTS)
            .filter_map(|s| self.ban(s, now))
            .filter(|(l, _)| *l == i)
            .map(|(_, b)| b)
            .collect();
        out.sort_by(|a, b| b.until.cmp(&a.until).then_with(|| a.key.cmp(&b.key)));
        out
    }
}
