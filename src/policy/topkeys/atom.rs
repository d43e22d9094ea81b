//! The atomic word operations the summaries and the history use: std's in regions, loom's in
//! the models (`tests/table/loom.rs`).

use std::sync::atomic::Ordering;

pub trait Atom {
    fn load(&self, o: Ordering) -> u64;
    fn store(&self, v: u64, o: Ordering);
    fn fetch_add(&self, v: u64, o: Ordering) -> u64;
    fn compare_exchange(&self, cur: u64, new: u64, ok: Ordering, err: Ordering)
        -> Result<u64, u64>;
    fn fence(o: Ordering);
}

macro_rules! atom_impl {
    ($t:ty, $fence:path) => {
        impl Atom for $t {
            #[inline]
            fn load(&self, o: Ordering) -> u64 {
                <$t>::load(self, o)
            }
            #[inline]
            fn store(&self, v: u64, o: Ordering) {
                <$t>::store(self, v, o)
            }
            #[inline]
            fn fetch_add(&self, v: u64, o: Ordering) -> u64 {
                <$t>::fetch_add(self, v, o)
            }
            #[inline]
            fn compare_exchange(
                &self,
                cur: u64,
                new: u64,
                ok: Ordering,
                err: Ordering,
            ) -> Result<u64, u64> {
                <$t>::compare_exchange(self, cur, new, ok, err)
            }
            #[inline]
            fn fence(o: Ordering) {
                $fence(o)
            }
        }
    };
}
atom_impl!(std::sync::atomic::AtomicU64, std::sync::atomic::fence);
#[cfg(loom)]
atom_impl!(loom::sync::atomic::AtomicU64, loom::sync::atomic::fence);
