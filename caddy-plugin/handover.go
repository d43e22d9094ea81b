package weir

// Hand-over within the process: a request waiting in a concurrency queue is woken as soon as
// a request of the same engine gives back a permit of its queue (its limit and key), instead
// of at its next poll. The engine keeps a freed slot for the requests waiting for it (a new
// arrival queues behind them) until one of them asks again; each waiter asks at least as
// often as the engine says (10 ms), which also covers other Caddy instances sharing the zone.
//
// One waiter is woken per permit given back: the oldest while the queue moves, the newest
// once it stands (the engine decides: weir_engine_queue_lifo). A woken waiter that leaves
// without the slot (refused, or its client gone) wakes the next.

import (
	"sync"
	"sync/atomic"
)

// waiter is one request waiting in a queue.
type waiter struct {
	q      queueID
	ticket ticket
	ch     chan struct{} // one wake-up, buffered
	woken  bool          // woken and not asked since (guarded by waiters.mu)
}

// waiters are the requests waiting in one engine's queues, in the order they came.
type waiters struct {
	count atomic.Int64 // how many wait: a release with none waiting takes no lock
	mu    sync.Mutex
	list  []*waiter
}

// enter counts the request of queued verdict v among the waiters until leave. Enter before
// evaluating again: a release after enter wakes it. ahead: how many already wait in its
// queue (a newcomer that finds some asks again only when woken or at its poll: asking at
// once could take a slot freed for one of them before it runs).
func (w *waiters) enter(v *verdict) (x *waiter, ahead int) {
	x = &waiter{q: v.queue(), ticket: v.ticketCopy(), ch: make(chan struct{}, 1)}
	w.mu.Lock()
	for _, y := range w.list {
		if y.q == x.q {
			ahead++
		}
	}
	w.list = append(w.list, x)
	w.mu.Unlock()
	w.count.Add(1)
	return x, ahead
}

// requeued: x asked again and still waits (v its new verdict), in the place it came.
func (w *waiters) requeued(x *waiter, v *verdict) {
	w.mu.Lock()
	x.q, x.ticket, x.woken = v.queue(), v.ticketCopy(), false
	w.mu.Unlock()
}

// leave takes x out; served: it got its slot. A woken waiter that leaves without it wakes
// the next in its queue (lifo as in released).
func (w *waiters) leave(x *waiter, served bool, lifo func(*ticket) bool) {
	w.mu.Lock()
	for i, y := range w.list {
		if y == x {
			w.list = append(w.list[:i], w.list[i+1:]...)
			break
		}
	}
	if x.woken && !served {
		w.wake(x.q, lifo)
	}
	w.mu.Unlock()
	w.count.Add(-1)
}

// any reports whether a request waits (a release that finds none skips the rest). Either
// it sees a waiter that entered, or that waiter's next evaluation sees the permits given
// back.
func (w *waiters) any() bool { return w.count.Load() > 0 }

// released wakes one waiter of each queue in qs: permits of those queues were just given
// back to the engine. lifo tells whether a queue serves its newest waiter first.
func (w *waiters) released(qs []queueID, lifo func(*ticket) bool) {
	w.mu.Lock()
	for _, q := range qs {
		w.wake(q, lifo)
	}
	w.mu.Unlock()
}

// wake wakes the oldest (or newest) waiter of queue q not woken yet. Holds w.mu.
func (w *waiters) wake(q queueID, lifo func(*ticket) bool) {
	pick := -1
	for i, x := range w.list {
		if x.q == q && !x.woken {
			pick = i
			break
		}
	}
	if pick < 0 {
		return
	}
	if lifo(&w.list[pick].ticket) {
		for i := len(w.list) - 1; i > pick; i-- {
			if x := w.list[i]; x.q == q && !x.woken {
				pick = i
				break
			}
		}
	}
	x := w.list[pick]
	x.woken = true
	select {
	case x.ch <- struct{}{}:
	default:
	}
}
