//! Helpers shared by integration tests.
#![allow(dead_code)]

/// An anonymous `MAP_SHARED` mapping: page-aligned, zeroed, shared with forked children.
pub struct SharedRegion {
    pub ptr: *mut u8,
    pub len: usize,
}

impl SharedRegion {
    pub fn new(len: usize) -> SharedRegion {
        // SAFETY: anonymous mapping with no address hint; checked for MAP_FAILED below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap failed");
        SharedRegion {
            ptr: ptr.cast(),
            len,
        }
    }
}

// SAFETY: the mapping is only accessed through atomics (tables, counters).
unsafe impl Sync for SharedRegion {}
unsafe impl Send for SharedRegion {}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with this length.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

pub mod fork;
