//! Hand-over within the process: a request waiting in a concurrency queue is woken as soon as
//! a request served through the same layer gives its permits back, instead of at its next poll.
//!
//! The engine does not let a new arrival take a slot while requests wait for it, so a freed
//! slot stays idle until a waiter asks the engine again. Waiters ask every
//! [`weir::policy::engine::QUEUE_POLL_NS`] (the fallback that also covers other layers and
//! processes on the same zones); a release through this layer wakes every waiter of this
//! layer at once, and each asks again (one of them gets the slot, the others wait on).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicUsize, Ordering::SeqCst};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// The requests of one layer waiting in a queue, and how to wake them.
#[derive(Default)]
pub(crate) struct Waiters {
    notify: Notify,
    /// How many wait: a release wakes nobody (takes no lock) when none does.
    count: AtomicUsize,
}

impl Waiters {
    /// A wake-up for the next wait. Create it before the evaluation that may answer "queue":
    /// a release after that evaluation wakes it.
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Counts the caller among the waiters until the guard is dropped. Enter after creating
    /// the first [`Waiters::notified`] and before evaluating again.
    pub(crate) fn enter(&self) -> Waiting<'_> {
        self.count.fetch_add(1, SeqCst);
        fence(SeqCst);
        Waiting(self)
    }

    /// Permits were just given back to the engine: wake every waiter.
    pub(crate) fn released(&self) {
        // Pairs with the fence in `enter`: either this load sees the waiter, or the waiter's
        // next evaluation sees the permits given back.
        fence(SeqCst);
        if self.count.load(SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }
}

/// A request counted among the waiters.
pub(crate) struct Waiting<'a>(&'a Waiters);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, SeqCst);
    }
}

/// Waits `d` (real time) or until `woken` fires, whichever comes first.
pub(crate) async fn nap(d: Duration, mut woken: Pin<&mut Notified<'_>>) {
    let mut sleep = std::pin::pin!(tokio::time::sleep(d));
    std::future::poll_fn(|cx| {
        if woken.as_mut().poll(cx).is_ready() || sleep.as_mut().poll(cx).is_ready() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}
