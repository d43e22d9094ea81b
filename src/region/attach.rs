//! Create-or-attach: a region that holds the format keeps its state; one that holds nothing
//! (or, for formats that may start over, something else) is formatted.

use std::sync::atomic::AtomicU64;

use super::header::Ident;
use super::{Region, RegionError};

/// What a region holds when it does not hold the format yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fresh {
    /// Unknown bytes: zeroed before the format is written.
    Unknown,
    /// Only zero bytes (fresh shared memory, a new anonymous mapping): only the header is
    /// written, so the other pages are first touched when states land in them.
    Zeroed,
}

impl Fresh {
    pub fn from_zeroed(zeroed: bool) -> Fresh {
        if zeroed {
            Fresh::Zeroed
        } else {
            Fresh::Unknown
        }
    }
}

/// What to do with a region holding the format with another identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Refuse with the error naming the difference (tables: their states would be misread).
    Refuse,
    /// Start over (counters and cluster views, which are worth nothing under another layout).
    Reformat,
}

/// Attaches when `region` holds `ident` (words `word(i)`), formats it otherwise: zeroes it
/// (unless `fresh` says it is zero and it holds no format), calls `fill` (the format's own words), writes `ident`.
/// Returns whether the state was kept.
pub(crate) fn create_or_attach<'w>(
    region: &Region,
    word: impl Fn(usize) -> &'w AtomicU64 + Copy,
    ident: &Ident,
    mismatch: Mismatch,
    fresh: Fresh,
    fill: impl FnOnce(),
) -> Result<bool, RegionError> {
    let fresh = match ident.check(word) {
        Ok(()) => return Ok(true),
        Err(RegionError::NotATable) => fresh,
        Err(e) if mismatch == Mismatch::Refuse => return Err(e),
        // It holds the format under another identity: not zero, whatever `fresh` says.
        Err(_) => Fresh::Unknown,
    };
    format(region, word, ident, fresh, fill);
    Ok(false)
}

/// Formats `region` unconditionally (see [`create_or_attach`]).
pub(crate) fn format<'w>(
    region: &Region,
    word: impl Fn(usize) -> &'w AtomicU64,
    ident: &Ident,
    fresh: Fresh,
    fill: impl FnOnce(),
) {
    if fresh == Fresh::Unknown {
        region.zero();
    }
    ident.write(word, fill);
}
