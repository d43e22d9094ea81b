//go:build weirtest

package weir

// Test-only hooks, compiled with `-tags weirtest` (target/caddy/caddy-weirtest, never the
// production binary). They let the Go tests replay the shared vectors (tests/vectors) over
// real HTTP with the vectors' clock and peers:
//
//	X-Weir-Test-Now: <t_ms>       evaluate at 1_000_000_000_000 + t_ms·1e6 ns (the vectors' base)
//	X-Weir-Test-Peer: <address>   the client address (instead of Caddy's client_ip)
//	X-Weir-Test-Step: <id>        keep this request's permits / queue ticket under <id>
//	X-Weir-Test-Release: <id>     release the permits held under <id> (answers 204), after
//	                              charging its deferred charges with X-Weir-Test-Status (or 0)
//	X-Weir-Test-Retry: <id>       evaluate the ticket held under <id> again (evaluate_queued)
//	X-Weir-Test-Abandon: <id>     give up the ticket held under <id> (answers 204)
//
// Responses carry X-Weir-Test-Action (pass, delay, reject, queue, exempt, bad_request),
// X-Weir-Test-Limit, X-Weir-Test-Wait-Ms and X-Weir-Test-Dry-Run. Delays are reported, not
// slept, and queued requests answer at once (the ticket stays held for a retry step).

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
)

const testBase = 1_000_000_000_000

type testCtl struct {
	hold bool
	step string
}

type held struct {
	s       *engineState // the engine of v
	release []func(status int, now uint64)
	v       *verdict
	rv      reqView
}

var (
	heldMu sync.Mutex
	heldBy = map[string]*held{}
)

func isTestHeader(name string) bool {
	const prefix = "x-weir-test-"
	return len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix)
}

func take(id string) *held {
	heldMu.Lock()
	defer heldMu.Unlock()
	x := heldBy[id]
	delete(heldBy, id)
	return x
}

func put(id string, x *held) {
	heldMu.Lock()
	heldBy[id] = x
	heldMu.Unlock()
}

func testIntercept(h *Handler, w http.ResponseWriter, r *http.Request, env *reqEnv) (bool, error) {
	t := r.Header.Get("X-Weir-Test-Now")
	p := r.Header.Get("X-Weir-Test-Peer")
	if t == "" && p == "" {
		return false, nil
	}
	ctl := &testCtl{step: r.Header.Get("X-Weir-Test-Step")}
	ctl.hold = ctl.step != ""
	env.test = ctl
	if t != "" {
		ms, err := strconv.ParseUint(t, 10, 64)
		if err != nil {
			http.Error(w, "bad X-Weir-Test-Now", http.StatusBadRequest)
			return true, nil
		}
		env.now = testBase + ms*1_000_000
	}
	if p != "" {
		env.peer = p
	}
	if id := r.Header.Get("X-Weir-Test-Release"); id != "" {
		status, _ := strconv.Atoi(r.Header.Get("X-Weir-Test-Status"))
		if x := take(id); x != nil {
			for i := len(x.release) - 1; i >= 0; i-- {
				x.release[i](status, env.now)
			}
		}
		w.WriteHeader(http.StatusNoContent)
		return true, nil
	}
	if id := r.Header.Get("X-Weir-Test-Abandon"); id != "" {
		if x := take(id); x != nil && x.v != nil {
			x.s.eng.abandon(x.v, env.now)
		}
		w.WriteHeader(http.StatusNoContent)
		return true, nil
	}
	if id := r.Header.Get("X-Weir-Test-Retry"); id != "" {
		x := take(id)
		if x == nil || x.v == nil {
			http.Error(w, "no ticket held under "+id, http.StatusConflict)
			return true, nil
		}
		s, v := x.s, x.v
		s.eng.evaluate(&x.rv, env.now, v, true)
		limit := s.name(v.limit())
		switch v.action() {
		case actQueue:
			put(ctl.step, &held{s: s, v: v, rv: x.rv})
			testReport(w, env, "queue", limit, v)
			w.WriteHeader(v.status())
		case actReject:
			testReport(w, env, "reject", limit, v)
			w.WriteHeader(v.status())
		default:
			put(ctl.step, &held{release: []func(int, uint64){func(status int, now uint64) {
				releaseHeld(s, v, status, 0, now)
			}}})
			testReport(w, env, "pass", "", v)
			w.WriteHeader(http.StatusOK)
		}
		return true, nil
	}
	return false, nil
}

func testHold(t *testCtl, release []func(status int, now uint64)) {
	put(t.step, &held{release: release})
}

func testQueue(s *engineState, w http.ResponseWriter, env *reqEnv, rv *reqView, v *verdict, limit string) {
	c := *rv
	c.headers = append([]byte(nil), rv.headers...)
	c.vars = append([]byte(nil), rv.vars...)
	if rv.sel != nil {
		c.sel = append([]uint16(nil), rv.sel...)
	}
	if env.test.step != "" {
		put(env.test.step, &held{s: s, v: v, rv: c})
	}
	testReport(w, env, "queue", limit, v)
}

func testReport(w http.ResponseWriter, env *reqEnv, action, limit string, v *verdict) {
	if env.test == nil {
		return
	}
	hd := w.Header()
	hd.Set("X-Weir-Test-Action", action)
	hd.Set("X-Weir-Test-Limit", limit)
	if v != nil {
		hd.Set("X-Weir-Test-Wait-Ms", strconv.FormatUint(v.waitNS()/1_000_000, 10))
		switch {
		case v.dryRunLimit() < 0:
		case v.dryRunAction() == actReject:
			hd.Set("X-Weir-Test-Dry-Run", "reject")
		case v.dryRunAction() == actDelay:
			hd.Set("X-Weir-Test-Dry-Run", "delay")
		}
		for _, l := range v.headerLines() {
			hd.Set(l[0], l[1])
		}
	}
}
