//! Built outside the repository without `+cmpxchg16b` (scripts/crate-outside.sh): a table in
//! `MAP_SHARED` memory (what an nginx zone is) is created only where the 16-byte
//! compare-exchange is lock-free, and refused with the crate's error otherwise; a table in
//! process memory works either way. `WEIR_EXPECT_LOCK_FREE` (1 or 0) says which to expect.

use weir::limiter::{Decision, Delay, Gcra, Rate};
use weir::table::{Table, TableError};

const SECOND: u64 = 1_000_000_000;

fn main() {
    let lock_free = match std::env::var("WEIR_EXPECT_LOCK_FREE").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        other => panic!("WEIR_EXPECT_LOCK_FREE must be 1 or 0, not {other:?}"),
    };
    // The point of the exercise: a user's build, without the repository's flag.
    assert!(
        !cfg!(target_feature = "cmpxchg16b"),
        "built with +cmpxchg16b"
    );
    let gcra = Gcra::new(Rate::per_second(1), 0, Delay::NoDelay).unwrap();
    let len = Table::bytes_for(1024);
    // SAFETY: a new shared anonymous mapping; it is never unmapped (the process ends).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: `len` bytes at `p` stay mapped for the process's life; only the table uses them.
    match unsafe { Table::create(p.cast(), len, 1, 0) } {
        Ok(t) if lock_free => {
            let k = t.key_hash(b"client");
            assert_eq!(t.check(&gcra, k, 1, SECOND).decision, Decision::Pass);
            assert_eq!(t.check(&gcra, k, 1, SECOND + 1).decision, Decision::Reject);
            println!("shared table: created (lock-free 16-byte CAS)");
        }
        Err(e @ TableError::NoLockFree128) if !lock_free => {
            println!("shared table: refused: {e}");
        }
        Ok(_) => panic!("a shared table was created although the 16-byte CAS takes a lock"),
        Err(e) => panic!("shared table: unexpected error: {e}"),
    }
    let t = Table::new(len, 1, 0).expect("an in-process table works on every CPU");
    let k = t.key_hash(b"client");
    assert_eq!(t.check(&gcra, k, 1, SECOND).decision, Decision::Pass);
    assert_eq!(t.check(&gcra, k, 1, SECOND + 1).decision, Decision::Reject);
    println!("in-process table: works");
}
