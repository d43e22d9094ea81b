package weir

// Hand-over within the process: a request waiting in a concurrency queue is woken as soon as
// a request of the same engine gives its permits back, instead of at its next poll. The
// engine keeps a freed slot for the requests waiting for it (a new arrival queues behind
// them) until one of them asks again; each waiter asks at least as often as the engine says
// (10 ms), which also covers other Caddy instances sharing the zone.

import (
	"sync"
	"sync/atomic"
)

// waiters are the requests waiting in one engine's queues, and their wake-up: a channel
// closed (and replaced) when permits go back.
type waiters struct {
	count atomic.Int64 // how many wait: a release with none waiting takes no lock
	mu    sync.Mutex
	ch    chan struct{}
}

// wakeup is the channel the next release closes. Take it before the evaluation that may
// answer "queue": a release after that evaluation closes it.
func (w *waiters) wakeup() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// enter counts the caller among the waiters until leave. Enter before evaluating again.
func (w *waiters) enter() { w.count.Add(1) }
func (w *waiters) leave() { w.count.Add(-1) }

// released wakes every waiter: permits were just given back to the engine. Either it sees a
// waiter that entered, or that waiter's next evaluation sees the permits given back.
func (w *waiters) released() {
	if w.count.Load() == 0 {
		return
	}
	w.mu.Lock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.mu.Unlock()
}
