//! One slot: a 16-byte word `tag (high 64) | state (low 64)` updated by a single
//! compare-exchange, so a key and its state always change together and a process killed at any
//! instruction leaves either the old or the new word — never half of each.

#[cfg(not(loom))]
pub(crate) use portable_atomic::AtomicU128 as SlotWord;

/// Under loom, a 128-bit atomic is modelled as a mutex around the value: each load and
/// compare-exchange is one linearizable step, which is what cmpxchg16b gives.
#[cfg(loom)]
#[derive(Default)]
pub(crate) struct SlotWord(loom::sync::Mutex<u128>);

#[cfg(loom)]
impl SlotWord {
    pub(crate) fn load(&self, _: core::sync::atomic::Ordering) -> u128 {
        *self.0.lock().unwrap()
    }
    pub(crate) fn compare_exchange(
        &self,
        current: u128,
        new: u128,
        _: core::sync::atomic::Ordering,
        _: core::sync::atomic::Ordering,
    ) -> Result<u128, u128> {
        let mut v = self.0.lock().unwrap();
        if *v == current {
            *v = new;
            Ok(current)
        } else {
            Err(*v)
        }
    }
}

/// Tag of an empty slot.
pub(crate) const EMPTY: u64 = 0;

#[inline]
pub(crate) fn pack(tag: u64, state: u64) -> u128 {
    ((tag as u128) << 64) | state as u128
}

#[inline]
pub(crate) fn tag(word: u128) -> u64 {
    (word >> 64) as u64
}

#[inline]
pub(crate) fn state(word: u128) -> u64 {
    word as u64
}
