//! Zero-filled memory for in-process tables, straight from an anonymous mapping: its pages
//! read as zero (an empty slot) and the kernel backs each one only when it is first written,
//! so a table's memory grows with the keys it holds, not with its size.

use super::{TableError, REGION_ALIGN};

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
    pub(crate) fn new(len: usize) -> Result<Mapping, TableError> {
        let huge = len >= HUGE_PAGE;
        let reserve = if huge {
            len.checked_add(HUGE_PAGE)
                .ok_or(TableError::Alloc { bytes: len })?
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
            return Err(TableError::Alloc { bytes: len });
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

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }
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
