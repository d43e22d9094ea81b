//! Shared-memory regions: every format weir keeps in memory that processes share (the slot
//! table `WEIRTBL`, the exact sliding log `WEIRLOG`, the cluster region `WEIRCLS`, the engine
//! counters `WEIRCNT7`) is laid out on one [`Region`] and created or attached through this
//! module, which holds all of their pointer handling:
//!
//! - [`alloc`]: zero-filled anonymous mappings (huge-page aligned when large) for regions that
//!   live in one process;
//! - [`header`]: identity words (magic with version byte, version, size, schema), checked on
//!   attach with an error naming what differs, written last on creation;
//! - [`attach`]: create-or-attach (fresh zeroed memory, or an existing header);
//! - [`owner`]: who frees a region (the caller, a mapping, or a loom model);
//! - [`stripes`]: counter stripes, one cache line each, and who may write them.
//!
//! Layouts are position-independent (offsets, no pointers), so a region created by a previous
//! process image (an nginx reload) attaches with its state.

pub(crate) mod alloc;
pub mod attach;
pub(crate) mod header;
pub(crate) mod owner;
pub(crate) mod stripes;

mod error;
#[cfg(all(test, not(loom)))]
mod tests;

pub use attach::Fresh;
pub use error::RegionError;

use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// Alignment a caller-given region for a table, log or cluster region must have.
pub const REGION_ALIGN: usize = 64;

/// A span of memory that holds (or will hold) one format: a caller's region (an nginx zone,
/// a `MAP_SHARED` mapping) or a mapping of this process. Copying the handle copies no memory.
///
/// Invariant (the contract of [`Region::new`]): `[ptr, ptr + len)` stays valid for reads and
/// writes while any handle made from it lives, every process and thread reaches its bytes only
/// through atomics, and while a format is written into it nobody else uses it.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    /// Only this process maps the bytes (a [`alloc::Mapping`]); a caller's region may be
    /// shared with other processes, so formats that need a lock-free 16-byte compare-exchange
    /// refuse it where the CPU has none (a lock would be private to each process).
    private: bool,
}

// SAFETY: a region is only reached through atomics (type invariant), so handles may move to
// and be shared with other threads.
unsafe impl Send for Region {}
// SAFETY: as `Send`.
unsafe impl Sync for Region {}

/// Types that may be viewed in a region: any bit pattern (all-zero included) is a valid value
/// and every byte is reached through atomics.
///
/// # Safety
/// Implement only for `repr(C)` types made of atomics (see [`atomic_words`]).
pub unsafe trait Words {}

// SAFETY: an atomic of any bit pattern is valid.
unsafe impl Words for AtomicU64 {}

/// Defines a `repr(C)` struct whose every field is an `AtomicU64` (counters in a region), so
/// that it can be viewed in a region with [`Region::view`].
#[macro_export]
#[doc(hidden)]
macro_rules! atomic_words {
    ($(#[$m:meta])* $vis:vis struct $name:ident {
        $($(#[$fm:meta])* $fvis:vis $field:ident),* $(,)?
    }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug, Default)]
        $vis struct $name {
            $($(#[$fm])* $fvis $field: std::sync::atomic::AtomicU64),*
        }
        // SAFETY: `repr(C)` of `AtomicU64` fields only (this macro writes every field's type):
        // any bit pattern is a valid value and every byte is reached through atomics.
        unsafe impl $crate::region::Words for $name {}
    };
}
pub(crate) use atomic_words;

impl Region {
    /// A handle on `len` bytes at `ptr`, which must not be NULL and be `align`-aligned (a
    /// power of two; 1 checks only NULL, leaving alignment to the format).
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for as long as any handle made
    /// from this region (a table, a log, counters) lives; every user of the bytes (threads,
    /// other processes) reaches them only through atomics; while a format is written into the
    /// region (it holds none yet, or another one), nobody else uses it.
    pub unsafe fn new(ptr: *mut u8, len: usize, align: usize) -> Result<Region, RegionError> {
        debug_assert!(align.is_power_of_two());
        match NonNull::new(ptr) {
            Some(ptr) if ptr.as_ptr() as usize % align == 0 => Ok(Region {
                ptr,
                len,
                private: false,
            }),
            _ => Err(RegionError::Misaligned { align }),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The same region, known to be mapped by this process only (the caller's invariant: no
    /// other process can reach the bytes, e.g. a private anonymous mapping).
    pub(crate) fn process_private(self) -> Region {
        Region {
            private: true,
            ..self
        }
    }

    /// Whether other processes may map the bytes (every caller's region may).
    pub(crate) fn may_be_shared(&self) -> bool {
        !self.private
    }

    /// The first byte (for formats that keep their own typed pointers: src/table/).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// `len` bytes from `offset` (a multiple of 64, so the part keeps the region's alignment
    /// up to 64). Panics when the part does not lie inside the region.
    pub(crate) fn part(&self, offset: usize, len: usize) -> Region {
        assert!(
            offset % REGION_ALIGN == 0 && offset <= self.len && len <= self.len - offset,
            "part [{offset}, +{len}) of a region of {} bytes",
            self.len
        );
        // SAFETY: `offset <= len` (checked above): inside the region or one past its end.
        let ptr = unsafe { self.ptr.add(offset) };
        Region { ptr, len, ..*self }
    }

    /// The `T` at byte `offset`. Panics when it does not lie inside the region or is not
    /// aligned for `T`.
    #[inline]
    pub(crate) fn view<T: Words>(&self, offset: usize) -> &T {
        let size = std::mem::size_of::<T>();
        assert!(offset <= self.len && size <= self.len - offset);
        // SAFETY: `offset + size <= len` (checked above), so the bytes lie in the region.
        let p = unsafe { self.ptr.as_ptr().add(offset) };
        assert_eq!(p as usize % std::mem::align_of::<T>(), 0, "misaligned view");
        // SAFETY: in bounds and aligned (checked above); `T: Words` is valid for any bytes and
        // reached only through atomics; the memory outlives the handle (type invariant).
        unsafe { &*p.cast::<T>() }
    }

    /// The region as words, for formats that view many small parts on the hot path (the
    /// engine's counters): the alignment is checked here, once. Panics when the region is not
    /// 8-byte aligned.
    pub(crate) fn word_span(&self) -> WordSpan {
        assert_eq!(
            self.ptr.as_ptr() as usize % 8,
            0,
            "word span of a misaligned region"
        );
        WordSpan {
            ptr: self.ptr.cast(),
            words: self.len / 8,
        }
    }

    /// The first `n` words. Panics when they do not fit.
    #[inline]
    pub(crate) fn words(&self, n: usize) -> &[AtomicU64] {
        assert!(n <= self.len / 8 && self.ptr.as_ptr() as usize % 8 == 0);
        // SAFETY: `n` aligned words lie in the region (checked above); atomics of any bit
        // pattern are valid; the memory outlives the handle (type invariant).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast::<AtomicU64>(), n) }
    }

    /// Sets every byte to zero, before a format is written into the region.
    pub(crate) fn zero(&self) {
        // SAFETY: the region is valid for `len` bytes and nobody else uses it while a format
        // is written into it (type invariant); zero is a valid value for every atomic.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), 0, self.len) };
    }
}

/// A region's whole words, 8-byte aligned ([`Region::word_span`]): a typed view costs one
/// bounds check. The region's invariant holds for the span.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WordSpan {
    ptr: NonNull<AtomicU64>,
    words: usize,
}

// SAFETY: as `Region`'s: only reached through atomics.
unsafe impl Send for WordSpan {}
// SAFETY: as `Send`.
unsafe impl Sync for WordSpan {}

impl WordSpan {
    /// The `T` at word `word`. Panics when it does not lie inside the span.
    #[inline]
    pub(crate) fn view<T: Words>(&self, word: usize) -> &T {
        const { assert!(std::mem::align_of::<T>() <= 8 && std::mem::size_of::<T>() % 8 == 0) };
        let n = std::mem::size_of::<T>() / 8;
        assert!(
            word <= self.words && n <= self.words - word,
            "view past the span"
        );
        // SAFETY: words `[word, word + n)` lie in the span (checked above), which is 8-byte
        // aligned (checked by `word_span`) and `T` needs no more (checked at compile time);
        // `T: Words` is valid for any bytes and reached only through atomics; the memory
        // outlives the handle (the region's invariant).
        unsafe { &*self.ptr.as_ptr().add(word).cast::<T>() }
    }

    /// Words `[word, word + n)`. Panics when they do not lie inside the span.
    #[inline]
    pub(crate) fn slice(&self, word: usize, n: usize) -> &[AtomicU64] {
        assert!(
            word <= self.words && n <= self.words - word,
            "slice past the span"
        );
        // SAFETY: as `view`'s: the words lie in the aligned span, atomics of any bit pattern
        // are valid, and the memory outlives the handle.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(word), n) }
    }
}
