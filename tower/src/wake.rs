//! Hand-over within the process: a request waiting in a concurrency queue is woken as soon as
//! a request served through the same layer gives back a permit of its queue (its limit and
//! key), instead of at its next poll.
//!
//! The engine does not let a new arrival take a slot while requests wait for it, so a freed
//! slot stays idle until a waiter asks the engine again. Waiters ask every
//! [`weir::policy::engine::QUEUE_POLL_NS`] (the fallback that also covers other layers and
//! processes on the same zones); a permit given back through this layer wakes one waiter of
//! its queue at once: the oldest while the queue moves, the newest once it stands
//! ([`weir::policy::Engine::queue_lifo`]). A woken waiter that leaves without the slot
//! (refused, or its future dropped) wakes the next.

use std::sync::atomic::{fence, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use weir::policy::engine::QueueId;

/// Whether a queue serves its newest waiter first ([`weir::policy::Engine::queue_lifo`]).
pub(crate) type Lifo<'a> = dyn Fn(QueueId) -> bool + Sync + 'a;

/// One waiting request.
struct Entry {
    queue: QueueId,
    /// Woken and not asked since.
    woken: bool,
    wake: Arc<Notify>,
}

/// The requests of one layer waiting in a queue, in the order they came, and how to wake
/// them.
#[derive(Default)]
pub(crate) struct Waiters {
    list: Mutex<Vec<Entry>>,
    /// How many wait: a release wakes nobody (takes no lock) when none does.
    count: AtomicUsize,
}

impl Waiters {
    fn list(&self) -> MutexGuard<'_, Vec<Entry>> {
        // Nothing panics holding the lock; a poisoned list is still consistent.
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a request waiting in `queue` among the waiters until the guard is dropped.
    /// Enter before evaluating again: a release after entering wakes it. `lifo` serves the
    /// wake a leaving waiter passes on.
    /// With it, how many of this layer's requests already wait in `queue` (a newcomer that
    /// finds some asks again only when woken or at its poll: asking at once could take a slot
    /// freed for one of them before it runs).
    pub(crate) fn enter<'a>(&'a self, queue: QueueId, lifo: &'a Lifo<'a>) -> (Waiting<'a>, usize) {
        let wake = Arc::new(Notify::new());
        let mut list = self.list();
        let ahead = list.iter().filter(|e| e.queue == queue).count();
        list.push(Entry {
            queue,
            woken: false,
            wake: wake.clone(),
        });
        drop(list);
        self.count.fetch_add(1, SeqCst);
        fence(SeqCst);
        let waiting = Waiting {
            waiters: self,
            wake,
            served: false,
            lifo,
        };
        (waiting, ahead)
    }

    /// Whether any request waits (a release that finds none skips the rest).
    pub(crate) fn any(&self) -> bool {
        // Pairs with the fence in `enter`: either this load sees the waiter, or the waiter's
        // next evaluation sees the permits given back.
        fence(SeqCst);
        self.count.load(SeqCst) > 0
    }

    /// Permits of `queues` were just given back to the engine: wake one waiter of each.
    /// `lifo` tells whether a queue serves its newest waiter first.
    pub(crate) fn released(&self, queues: &[Option<QueueId>], lifo: &Lifo<'_>) {
        let mut list = self.list();
        for &q in queues.iter().flatten() {
            wake(&mut list, q, lifo);
        }
    }
}

/// Wakes the oldest (or newest) waiter of queue `q` not woken yet.
fn wake(list: &mut [Entry], q: QueueId, lifo: &Lifo<'_>) {
    let mut waiting = list.iter_mut().filter(|e| e.queue == q && !e.woken);
    let Some(oldest) = waiting.next() else {
        return;
    };
    let pick = if lifo(q) {
        waiting.next_back().unwrap_or(oldest)
    } else {
        oldest
    };
    pick.woken = true;
    pick.wake.notify_one();
}

/// A request counted among the waiters.
pub(crate) struct Waiting<'a> {
    waiters: &'a Waiters,
    wake: Arc<Notify>,
    served: bool,
    lifo: &'a Lifo<'a>,
}

impl Waiting<'_> {
    /// The request asked again and waits on, in `queue`, in the place it came.
    pub(crate) fn requeued(&self, queue: QueueId) {
        let mut list = self.waiters.list();
        if let Some(e) = list.iter_mut().find(|e| Arc::ptr_eq(&e.wake, &self.wake)) {
            e.queue = queue;
            e.woken = false;
        }
    }

    /// The request got its slot: leaving wakes nobody else.
    pub(crate) fn served(&mut self) {
        self.served = true;
    }

    /// Waits `d` (real time) or until a release wakes the request, whichever comes first.
    /// A wake-up given while the request was not napping is kept for its next nap.
    pub(crate) async fn nap(&self, d: Duration) {
        let _ = tokio::time::timeout(d, self.wake.notified()).await;
    }
}

impl Drop for Waiting<'_> {
    /// Leaves, waking the next waiter of the queue if this one was woken for a slot it did
    /// not take (refused, or its future dropped).
    fn drop(&mut self) {
        let mut list = self.waiters.list();
        if let Some(i) = list.iter().position(|e| Arc::ptr_eq(&e.wake, &self.wake)) {
            let e = list.remove(i);
            if e.woken && !self.served {
                wake(&mut list, e.queue, self.lifo);
            }
        }
        self.waiters.count.fetch_sub(1, SeqCst);
    }
}
