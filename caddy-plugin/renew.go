package weir

/*
#include "weir.h"
*/
import "C"

import "time"

// A concurrency permit is a lease. Each pooled engine has a renewer: a goroutine that renews
// the leases of the permits this process holds through it, every quarter of its shortest
// lease, so a request counts for its whole life however long it runs. It stops when the
// engine is destructed. A process that dies renews nothing: its permits come back within
// two leases.
type renewer struct {
	stop chan struct{}
	done chan struct{}
}

// renewInterval is how often the engine's permits need renewing (0: it has no concurrency
// limit).
func (e *engine) renewInterval() time.Duration {
	return time.Duration(C.weir_engine_renew_interval_ns(e.p))
}

// renewHeld renews the engine's permits held longer than a lease.
func (e *engine) renewHeld(now uint64) { C.weir_engine_renew_held(e.p, C.uint64_t(now)) }

// startRenewer starts s's renewer (nil when its engine has nothing to renew).
func startRenewer(s *engineState) *renewer {
	every := s.eng.renewInterval()
	if every <= 0 {
		return nil
	}
	r := &renewer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
				s.mu.RLock()
				if s.eng != nil {
					s.eng.renewHeld(nowNS())
				}
				s.mu.RUnlock()
			}
		}
	}()
	return r
}

// halt stops the renewer and waits for it (nil: nothing to stop).
func (r *renewer) halt() {
	if r != nil {
		close(r.stop)
		<-r.done
	}
}
