//! Identity words at the start of every format: word 0 is the magic (seven ASCII bytes naming
//! the format, then a layout version byte); a format may add a version word, size words and
//! schema words at fixed word indexes. Creation writes them last, the magic with Release;
//! attaching reads the magic with Acquire, so an attacher that sees the magic sees the rest.

use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};

use super::RegionError;

/// The identity a format expects: `(word index, value)` pairs besides the magic.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ident<'a> {
    /// Word 0: the format's name (low 7 bytes) and layout version (high byte).
    pub magic: u64,
    /// A separate layout version word, if the format has one.
    pub version: Option<(usize, u64)>,
    /// Words fixed by the region's size; a mismatch is reported with the first one's values.
    pub size: &'a [(usize, u64)],
    /// Words fixed by what the states mean; a mismatch is reported with the first one's.
    pub schema: &'a [(usize, u64)],
}

const NAME_MASK: u64 = 0x00ff_ffff_ffff_ffff;

/// `magic` for a format `name` (7 bytes) at layout `version`.
pub(crate) const fn magic(name: &[u8; 7], version: u8) -> u64 {
    let mut b = [0u8; 8];
    let mut i = 0;
    while i < 7 {
        b[i] = name[i];
        i += 1;
    }
    b[7] = version;
    u64::from_le_bytes(b)
}

impl Ident<'_> {
    /// Whether the words `word(i)` hold this identity, or which part differs: another format
    /// or none ([`RegionError::NotATable`]), then the layout version, the size, the schema.
    pub fn check<'w>(&self, word: impl Fn(usize) -> &'w AtomicU64) -> Result<(), RegionError> {
        let found = word(0).load(Acquire);
        if found != self.magic {
            if found & NAME_MASK != self.magic & NAME_MASK {
                return Err(RegionError::NotATable);
            }
            return Err(RegionError::LayoutVersion {
                found: found >> 56,
                expected: self.magic >> 56,
            });
        }
        if let Some((i, expected)) = self.version {
            let found = word(i).load(Relaxed);
            if found != expected {
                return Err(RegionError::LayoutVersion { found, expected });
            }
        }
        let differs =
            |words: &[(usize, u64)]| words.iter().any(|&(i, v)| word(i).load(Relaxed) != v);
        if differs(self.size) {
            let (i, now) = self.size[0];
            let created = word(i).load(Relaxed);
            return Err(RegionError::SizeChanged { created, now });
        }
        if differs(self.schema) {
            let (i, now) = self.schema[0];
            let created = word(i).load(Relaxed);
            return Err(RegionError::SchemaChanged { created, now });
        }
        Ok(())
    }

    /// Writes this identity: the other words, then `fill` (a format's own header words), then
    /// the magic with Release (publishing everything written before it).
    pub fn write<'w>(&self, word: impl Fn(usize) -> &'w AtomicU64, fill: impl FnOnce()) {
        let others = self.version.iter().chain(self.size).chain(self.schema);
        for &(i, v) in others {
            word(i).store(v, Relaxed);
        }
        fill();
        word(0).store(self.magic, Release);
    }
}
