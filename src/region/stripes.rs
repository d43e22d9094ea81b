//! Which counter stripe a thread adds to, and whether it may add without a locked instruction.
//!
//! Counters (a table's, an engine's) are striped, one cache line per stripe, and readers sum
//! the stripes. Every stripe but the last has an owner word: the Linux thread id of the one
//! thread that adds to it, with a plain load and store instead of a locked add (an engine
//! request makes about seven adds, and they took about 6 % of its time; docs/PERFORMANCE.md).
//! The last stripe, [`SHARED`], has no owner: threads that own no stripe add to it with locked
//! adds.
//!
//! Invariant: only the thread named in a stripe's owner word writes that stripe's counters, and
//! an owner word changes only from 0, or from a thread that no longer exists, to the thread
//! that writes it (compare-exchange). So a plain increment never races with another write and
//! no count is lost. Thread ids are unique among the live threads of a pid namespace; the
//! processes that share a region must be in one (nginx's workers are).
//!
//! A thread asks for stripe `k`, assigned round-robin from a per-process start that depends on
//! the process id (so single-threaded worker processes ask for different stripes). If another
//! live thread owns it, this thread adds to [`SHARED`]; on the first and then every 4096th such
//! add it checks whether that owner still exists (one `kill(tid, 0)` system call, so only
//! threads beyond the stripes ever make one), and takes the stripe over if not. A child of
//! `fork` forgets its parent's identity (a `pthread_atfork` handler).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed};

/// Counter stripes per region (the engine's counter block has as many).
pub const STRIPES: usize = 16;
/// The stripe without an owner, for threads that own none.
pub const SHARED: usize = STRIPES - 1;
/// Adds to [`SHARED`] between two checks of whether the wanted stripe's owner still exists.
const CHECK_EVERY: u32 = 4096;

/// The atomic word operations the protocol uses: std's in regions, loom's in its model.
pub trait Word {
    fn load(&self) -> u64;
    fn store(&self, v: u64);
    fn add_locked(&self);
    fn claim(&self, current: u64, new: u64) -> bool;
}

macro_rules! word_impl {
    ($t:ty) => {
        impl Word for $t {
            #[inline]
            fn load(&self) -> u64 {
                self.load(Relaxed)
            }
            #[inline]
            fn store(&self, v: u64) {
                self.store(v, Relaxed)
            }
            #[inline]
            fn add_locked(&self) {
                self.fetch_add(1, Relaxed);
            }
            /// Acquire: the counts a departed owner stored are the ones the claimer adds to.
            #[inline]
            fn claim(&self, current: u64, new: u64) -> bool {
                self.compare_exchange(current, new, Acquire, Relaxed)
                    .is_ok()
            }
        }
    };
}
word_impl!(AtomicU64);
#[cfg(loom)]
word_impl!(loom::sync::atomic::AtomicU64);

/// Where one thread adds, in one region: a stripe, and whether this thread owns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lane {
    pub stripe: usize,
    owned: bool,
}

impl Lane {
    pub const SHARED: Lane = Lane {
        stripe: SHARED,
        owned: false,
    };

    /// Adds one to `counter`, which must lie in stripe `self.stripe`.
    #[inline]
    pub fn add(self, counter: &impl Word) {
        if self.owned {
            // Single writer (module invariant): a load and a store lose nothing.
            counter.store(counter.load().wrapping_add(1));
        } else {
            counter.add_locked();
        }
    }
}

/// The calling thread: its id (never 0) and the stripe it asks for (never [`SHARED`]).
#[derive(Clone, Copy, Debug)]
pub struct Me {
    pub tid: u64,
    pub stripe: usize,
}

thread_local! {
    /// `tid << 8 | stripe`, or 0 before first use (and in a child of `fork`).
    static ME: Cell<u64> = const { Cell::new(0) };
    /// Adds to [`SHARED`] left before the next liveness check.
    static UNTIL_CHECK: Cell<u32> = const { Cell::new(0) };
}

impl Me {
    /// The calling thread (a thread-local read after its first call).
    #[cfg(not(loom))]
    #[inline]
    pub fn get() -> Me {
        let packed = ME.with(|m| match m.get() {
            0 => {
                let packed = Me::first_call();
                m.set(packed);
                packed
            }
            p => p,
        });
        Me {
            tid: packed >> 8,
            stripe: (packed & 0xff) as usize,
        }
    }

    /// Under loom every thread adds to [`SHARED`] (loom's threads share one OS thread id); the
    /// owner protocol has its own model, on [`Me::lane_with`].
    #[cfg(loom)]
    #[inline]
    pub fn get() -> Me {
        Me {
            tid: u64::MAX,
            stripe: SHARED,
        }
    }

    #[cfg(not(loom))]
    #[cold]
    fn first_call() -> u64 {
        static FORK_HANDLER: std::sync::Once = std::sync::Once::new();
        static NEXT: std::sync::atomic::AtomicUsize =
            std::sync::atomic::AtomicUsize::new(usize::MAX);
        extern "C" fn forget_in_child() {
            ME.with(|m| m.set(0));
        }
        FORK_HANDLER.call_once(|| {
            // SAFETY: registers a handler that only writes this thread's thread-locals.
            unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
        });
        let _ = NEXT.compare_exchange(usize::MAX, std::process::id() as usize, Relaxed, Relaxed);
        let stripe = NEXT.fetch_add(1, Relaxed) % SHARED;
        // SAFETY: gettid has no preconditions; a thread id is positive.
        let tid = unsafe { libc::gettid() } as u64;
        tid << 8 | stripe as u64
    }

    /// Where this thread adds in a region whose stripe [`Me::stripe`] has owner word `owner`:
    /// that stripe when this thread owns it, or claims it (no owner yet, or `due()` and
    /// `gone(owner)`); otherwise [`Lane::SHARED`].
    pub fn lane_with(
        self,
        owner: &impl Word,
        due: impl FnOnce() -> bool,
        gone: impl FnOnce(u64) -> bool,
    ) -> Lane {
        if self.stripe == SHARED {
            return Lane::SHARED;
        }
        let current = owner.load();
        if current == self.tid {
            return Lane {
                stripe: self.stripe,
                owned: true,
            };
        }
        let claimable = current == 0 || (due() && gone(current));
        if claimable && owner.claim(current, self.tid) {
            return Lane {
                stripe: self.stripe,
                owned: true,
            };
        }
        Lane::SHARED
    }
}

/// Adds one to a counter of this thread's stripe in a region: `owner(k)` is stripe `k`'s owner
/// word, `counter(k)` the counter in stripe `k`.
#[inline]
pub(crate) fn add<'a>(
    owner: impl Fn(usize) -> &'a AtomicU64,
    counter: impl Fn(usize) -> &'a AtomicU64,
) {
    let me = Me::get();
    if owner(me.stripe).load(Relaxed) == me.tid {
        let c = counter(me.stripe);
        // Single writer (module invariant): a load and a store lose nothing.
        c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
    } else {
        add_unowned(me, owner, counter);
    }
}

/// [`add`] when this thread does not own its stripe (yet).
#[cold]
#[inline(never)]
fn add_unowned<'a>(
    me: Me,
    owner: impl Fn(usize) -> &'a AtomicU64,
    counter: impl Fn(usize) -> &'a AtomicU64,
) {
    let lane = me.lane_with(owner(me.stripe), due_for_check, thread_gone);
    lane.add(counter(lane.stripe));
}

/// True once per [`CHECK_EVERY`] calls on a thread (the first call included).
fn due_for_check() -> bool {
    UNTIL_CHECK.with(|u| match u.get() {
        0 => {
            u.set(CHECK_EVERY - 1);
            true
        }
        n => {
            u.set(n - 1);
            false
        }
    })
}

/// Whether no thread with id `tid` exists (Linux's `kill` takes a thread id too). A reaped
/// thread or process is gone; a zombie process not yet reaped by its parent is not.
fn thread_gone(tid: u64) -> bool {
    let Ok(tid) = libc::pid_t::try_from(tid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the target exists.
    unsafe { libc::kill(tid, 0) != 0 && *libc::__errno_location() == libc::ESRCH }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_claims_a_free_stripe_and_keeps_it() {
        let owner = AtomicU64::new(0);
        let me = Me::get();
        assert_ne!(me.stripe, SHARED);
        let lane = me.lane_with(&owner, || false, |_| false);
        assert_eq!(lane.stripe, me.stripe);
        assert!(lane.owned);
        assert_eq!(owner.load(Relaxed), me.tid);
        assert_eq!(me.lane_with(&owner, || true, |_| true), lane);
    }

    #[test]
    fn a_live_owner_is_not_displaced_and_others_add_to_the_shared_stripe() {
        let me = Me::get();
        let other = std::thread::spawn(|| Me::get().tid).join().unwrap();
        // `other` has exited; the main thread (id = process id) is alive.
        let owner = AtomicU64::new(std::process::id() as u64);
        assert_eq!(me.lane_with(&owner, || true, thread_gone), Lane::SHARED);
        // Not due for a check: the owner is not examined.
        let owner = AtomicU64::new(other);
        assert_eq!(me.lane_with(&owner, || false, |_| true), Lane::SHARED);
        assert_eq!(owner.load(Relaxed), other);
        // Due, and the owner is gone: taken over.
        assert!(thread_gone(other));
        assert!(me.lane_with(&owner, || true, thread_gone).owned);
        assert_eq!(owner.load(Relaxed), me.tid);
    }

    #[test]
    fn liveness_checks_are_spaced() {
        let due = std::thread::spawn(|| (0..3 * CHECK_EVERY).filter(|_| due_for_check()).count())
            .join()
            .unwrap();
        assert_eq!(due, 3);
    }
}
