//! Zero-filled memory for in-process regions, straight from an anonymous mapping: its pages
//! read as zero (an empty slot) and the kernel backs each one only when it is first written,
//! so a table's memory grows with the keys it holds, not with its size.

use std::sync::atomic::{AtomicU32, AtomicU64};

use super::{Region, RegionError, REGION_ALIGN};

/// A transparent huge page on x86-64 (the alignment of large in-process tables).
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// A private anonymous mapping of at least `len` bytes, unmapped on drop. Regions of a huge
/// page or more start on a huge-page boundary and are advised to use huge pages, so a random
/// key rarely costs a TLB miss (advice only: it faults nothing in).
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    pub(crate) fn new(len: usize) -> Result<Mapping, RegionError> {
        let huge = len >= HUGE_PAGE;
        let reserve = if huge {
            len.checked_add(HUGE_PAGE)
                .ok_or(RegionError::Alloc { bytes: len })?
        } else {
            len
        };
        // SAFETY: a new private anonymous mapping; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(RegionError::Alloc { bytes: len });
        }
        let base = base.cast::<u8>();
        if !huge {
            // Page-aligned, hence REGION_ALIGN-aligned.
            debug_assert_eq!(base as usize % REGION_ALIGN, 0);
            return Ok(Mapping { ptr: base, len });
        }
        let head = (base as usize).next_multiple_of(HUGE_PAGE) - base as usize;
        let tail = reserve - head - len;
        // SAFETY: `[base, ptr)` and `[end + spare, base + reserve)` lie in the mapping made
        // above, outside `[ptr, ptr + len)`, and start on page boundaries (`ptr` is 2 MiB
        // aligned, `end + spare` is `end` rounded up to a page).
        let ptr = unsafe {
            let ptr = base.add(head);
            if head > 0 {
                libc::munmap(base.cast(), head);
            }
            let end = ptr.add(len);
            let spare = (end as usize).next_multiple_of(page_size()) - end as usize;
            if tail > spare {
                libc::munmap(end.add(spare).cast(), tail - spare);
            }
            // Advice only: where transparent huge pages are off, this fails and nothing
            // changes; it touches no page.
            libc::madvise(ptr.cast(), len, libc::MADV_HUGEPAGE);
            ptr
        };
        Ok(Mapping { ptr, len })
    }

    /// The mapped bytes as a region (valid until the mapping is dropped).
    pub(crate) fn region(&self) -> Region {
        // SAFETY: `[ptr, ptr + len)` is mapped, readable and writable until `self` is dropped
        // (holders keep the mapping alive beside their handles: `owner::Backing`), and a new
        // private mapping has no other user.
        let region = unsafe { Region::new(self.ptr, self.len, REGION_ALIGN) };
        // MAP_PRIVATE: no other process reaches these bytes (a fork gets a copy).
        region.expect("a mapping is aligned").process_private()
    }
}

// SAFETY: the mapping is plain memory owned by this value; unmapping it from any thread is
// fine, and it is only reached through `Region` handles (atomics).
unsafe impl Send for Mapping {}
// SAFETY: as `Send`; `&Mapping` gives only the region's address.
unsafe impl Sync for Mapping {}

/// `n` atomics starting at zero, straight from the allocator's zeroed memory (pages are touched
/// only when used).
pub(crate) fn zeroed_u32(n: usize) -> Box<[AtomicU32]> {
    let zeroed = vec![0u32; n].into_boxed_slice();
    // SAFETY: `AtomicU32` has the size, alignment and bit validity of `u32`; the box is moved,
    // not copied, so the zeroed allocation is never written here.
    unsafe { Box::from_raw(Box::into_raw(zeroed) as *mut [AtomicU32]) }
}

/// `n` zeroed `AtomicU64`s, as [`zeroed_u32`].
pub(crate) fn zeroed_u64(n: usize) -> Box<[AtomicU64]> {
    let zeroed = vec![0u64; n].into_boxed_slice();
    // SAFETY: `AtomicU64` has the size, alignment and bit validity of `u64`; the box is moved,
    // not copied, so the zeroed allocation is never written here.
    unsafe { Box::from_raw(Box::into_raw(zeroed) as *mut [AtomicU64]) }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `[ptr, ptr + len)` is mapped by `new` (the spare bytes up to the next page
        // boundary are unmapped with it) and no handle uses it any more.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).unwrap_or(4096)
}
