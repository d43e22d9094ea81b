package weir

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Placeholders set on every request the handler sees.
const (
	phStatus = "http.weir.status" // pass, delay, queued, reject, exempt, bad_request, error
	phLimit  = "http.weir.limit"  // the deciding limit (policy) or zone (inline), else ""
	phAction = "http.weir.action" // the engine's word: pass, exempt, delay, queue, reject, dry-run-…
	phKey    = "http.weir.key"    // the deciding limit's key as the engine renders it, else ""
	// caddy-ratelimit's: the zone (or policy limit) that rejected; unset unless rejected.
	phExceeded = "http.rate_limit.exceeded.name"
)

// reqEnv is the time and peer one request is evaluated with.
type reqEnv struct {
	now  uint64
	peer string
	test *testCtl // non-nil only in weirtest builds, when the request carries test headers
}

// clientIP is the client address Caddy resolved (honours the server's trusted_proxies), else
// the TCP peer, else "" (a unix socket peer, which Caddy names "@": the engine's local
// client). Looked up when needed (policy evaluation, rejection logs), once.
func (e *reqEnv) clientIP(r *http.Request) string {
	if e.peer != "" {
		return e.peer
	}
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" && ip != "@" {
		e.peer = ip
	} else if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		e.peer = host
	}
	return e.peer
}

// Engines a request may go through, in this order: the inline zones', then the policy's.
const (
	engZones = iota
	engPolicy
	nEngines
)

// reqState is one request's scratch memory, pooled so that a request that passes allocates
// nothing here: the verdicts the engines write into (kept while they hold permits, released
// once the response is complete), the limits its inline zones select and their keys.
type reqState struct {
	v      [nEngines]verdict
	held   [nEngines]*verdict // a verdict holding permits or charges to give back, by engine
	heldBy [nEngines]*engineState
	// the response's status, recorded for deferred charges and samples (0: none written)
	sw statusWriter
	// the backend's time for the request (0: unknown), given back with the permits
	latency time.Duration
	sel     []uint16
	vars    []byte
	selBuf  [maxZones]uint16
}

var reqStates = sync.Pool{New: func() any {
	rs := new(reqState)
	rs.reset()
	return rs
}}

func (rs *reqState) reset() {
	rs.held, rs.heldBy = [nEngines]*verdict{}, [nEngines]*engineState{}
	rs.sw = statusWriter{}
	rs.latency = 0
	rs.sel = rs.selBuf[:0]
	rs.vars = rs.vars[:0]
}

// releaseHeld charges v's deferred charges for a response of status, then gives v's permits
// back with the backend's time (latency, 0: unknown) and the status, to s's engine (unless
// the engine is gone), and wakes the requests waiting for them.
func releaseHeld(s *engineState, v *verdict, status int, latency time.Duration, now uint64) {
	permits := v.holdsPermits()
	// The queues to wake, noted before the release clears the permits (none: nobody waits).
	var qs [maxPermits]queueID
	n := 0
	if permits && s.waiters.any() {
		n = v.permitQueues(&qs)
	}
	s.mu.RLock()
	if s.eng != nil {
		if v.holdsCharges() {
			s.eng.charge(v, status, now)
		}
		if permits {
			s.eng.releaseSampled(v, latency, status, now)
		}
	}
	s.mu.RUnlock()
	if n > 0 {
		s.waiters.released(qs[:n], s.lifo)
	}
}

// detach hands the request's permits over as functions (test harness: held across steps);
// the state then holds none.
func (rs *reqState) detach() []func(status int, now uint64) {
	var out []func(status int, now uint64)
	for i, v := range rs.held {
		if v != nil {
			s := rs.heldBy[i]
			out = append(out, func(status int, now uint64) { releaseHeld(s, v, status, 0, now) })
		}
	}
	rs.reset()
	return out
}

// done charges and releases what the request holds, the policy's first, and recycles its
// state.
func (h *Handler) done(rs *reqState) {
	for i := nEngines - 1; i >= 0; i-- {
		if v := rs.held[i]; v != nil {
			releaseHeld(rs.heldBy[i], v, rs.sw.status, rs.latency, nowNS())
		}
	}
	rs.reset()
	reqStates.Put(rs)
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	env := reqEnv{now: nowNS()}
	if done, err := testIntercept(h, w, r, &env); done {
		return err
	}
	rs := reqStates.Get().(*reqState)
	defer h.done(rs)
	status, dec := "pass", logDec{action: "pass"}
	if h.zoneEng != nil {
		st, d, err := h.serveEngine(w, r, repl, &env, rs, engZones)
		if err != nil {
			return unlessAnswered(err)
		}
		status, dec = st, d
	}
	if h.policy != nil {
		st, d, err := h.serveEngine(w, r, repl, &env, rs, engPolicy)
		if err != nil {
			return unlessAnswered(err)
		}
		// The policy's decision, unless it names no limit where the zones' does.
		if d.limit != "" || dec.limit == "" {
			status, dec = st, d
		}
	}
	setPlaceholders(r, repl, status, dec)
	if env.test != nil && env.test.hold {
		// Test harness: keep the permits until an explicit release step.
		testHold(env.test, rs.detach())
	}
	if rs.holding() {
		return rs.serveHeld(w, r, repl, next)
	}
	return next.ServeHTTP(w, r)
}

// phVar is the request variable (caddyhttp.SetVar) holding the request's placeholder values.
const phVar = "weir\x00placeholders" // (a name no Caddyfile can write)

// placeholders are one request's {http.weir.*} values, served to Caddy's replacer by one
// provider (repl.Map) per request. Set through repl.Set instead, they would be the first
// entries of the replacer's static map on most routes, which allocates its table on every
// request. Later weir handlers of the same request find them in the request's variables.
type placeholders struct {
	status string
	dec    logDec
}

// logDec is what access logs show of a decision: the engine's action word, the deciding
// limit's name and its key as the engine renders it (both "" when no limit decided).
type logDec struct{ action, limit, key string }

func (p *placeholders) get(key string) (any, bool) {
	switch key {
	case phStatus:
		return p.status, true
	case phLimit:
		return p.dec.limit, true
	case phAction:
		return p.dec.action, true
	case phKey:
		return p.dec.key, true
	case phExceeded:
		if p.status == "reject" {
			return p.dec.limit, true
		}
	}
	return nil, false
}

func setPlaceholders(r *http.Request, repl *caddy.Replacer, status string, dec logDec) {
	if repl == nil {
		return
	}
	vars, ok := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	if !ok {
		// No variable table (not a request of Caddy's HTTP server): static values.
		repl.Set(phStatus, status)
		repl.Set(phLimit, dec.limit)
		repl.Set(phAction, dec.action)
		repl.Set(phKey, dec.key)
		if status == "reject" {
			repl.Set(phExceeded, dec.limit)
		}
		return
	}
	if p, ok := vars[phVar].(*placeholders); ok {
		p.status, p.dec = status, dec
		return
	}
	p := &placeholders{status, dec}
	vars[phVar] = p
	repl.Map(p.get)
}

// errAnswered stops the request after rejected answered it itself (ServeHTTP returns nil).
var errAnswered = errors.New("weir: answered")

func unlessAnswered(err error) error {
	if err == errAnswered {
		return nil
	}
	return err
}

// rejected sets the response fields, logs the rejection at the limit's level ("rate limit
// exceeded"; a banned key's refusal "rate limit exceeded (banned key)", as nginx's
// `limiting requests, banned key,` line) and returns the
// error Caddy turns into the status (so that handle_errors can shape the response). Without
// handle_errors it answers the status itself (as Caddy would, with an empty body), so that
// Caddy's error log does not report every rejection again (a 5xx at error level).
func (h *Handler) rejected(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, env *reqEnv,
	status int, dec logDec, level zapcore.Level, retry string, lines [][2]string, logKey, banned bool) error {
	hdr := w.Header()
	for _, l := range lines {
		hdr.Set(l[0], l[1])
	}
	if retry != "" {
		hdr.Set("Retry-After", retry)
	}
	limit := dec.limit
	setPlaceholders(r, repl, "reject", dec)
	if h.logger != nil {
		msg := "rate limit exceeded"
		if banned {
			msg = "rate limit exceeded (banned key)"
		}
		if ce := h.logger.Check(level, msg); ce != nil {
			fields := []zap.Field{zap.String("limit", limit), zap.Int("status", status),
				zap.String("retry_after", hdr.Get("Retry-After")), zap.String("client_ip", env.clientIP(r))}
			if logKey && dec.key != "" {
				fields = append(fields, zap.String("key", dec.key))
			}
			if banned {
				fields = append(fields, zap.Bool("banned", true))
			}
			ce.Write(fields...)
		}
	}
	testReport(w, env, "reject", limit, nil)
	if h.answerRejections {
		w.WriteHeader(status)
		return errAnswered
	}
	return caddyhttp.Error(status, errors.New("weir: rate limit exceeded: "+limit))
}

// dryRun logs what a dry-run limit would have done to a request that goes on: a rejection at
// the limit's level, a delay one level lower (as nginx logs delays).
func (h *Handler) dryRun(r *http.Request, env *reqEnv, limit string, action int, level zapcore.Level) {
	if h.logger == nil {
		return
	}
	msg := "rate limit exceeded (dry run)"
	if action == actDelay {
		msg, level = "request delayed (dry run)", level-1
	}
	if ce := h.logger.Check(level, msg); ce != nil {
		ce.Write(zap.String("limit", limit), zap.Bool("dry_run", true), zap.String("client_ip", env.clientIP(r)))
	}
}

// request is what engine `which` of h evaluates of r: for the policy, the headers it reads
// (hb, a pooled buffer to hand back); for the inline zones, the limits of the zones r
// matches and their keys. No limit selected: ok false, nothing to evaluate.
func (h *Handler) request(eng *engine, r *http.Request, repl *caddy.Replacer, env *reqEnv, rs *reqState,
	which int) (rv reqView, hb *[]byte, ok bool, err error) {
	rv = reqView{method: r.Method, target: r.RequestURI}
	if which == engPolicy {
		hb = headerPool.Get().(*[]byte)
		*hb = eng.packPolicyHeaders((*hb)[:0], r)
		rv.peer, rv.headers = env.clientIP(r), *hb
		return rv, hb, true, nil
	}
	rs.sel = rs.selBuf[:0]
	var selected uint64 // bit i: zone i
	for i, z := range h.zones {
		if len(z.matchers) > 0 {
			m, err := z.matchers.AnyMatchWithError(r)
			if err != nil {
				return rv, nil, false, caddyhttp.Error(http.StatusInternalServerError, err)
			}
			if !m {
				continue
			}
		}
		rs.sel = append(rs.sel, z.limit)
		selected |= 1 << i
	}
	if len(rs.sel) == 0 {
		return rv, nil, false, nil
	}
	rs.vars = rs.vars[:0]
	for _, z := range h.varZones {
		if selected&(1<<z) == 0 {
			rs.vars = packVar(rs.vars, "")
			continue
		}
		rs.vars = h.zones[z].packKey(rs.vars, r, repl)
	}
	rv.sel, rv.vars = rs.sel, rs.vars
	if h.zonesUseIP {
		rv.peer = env.clientIP(r)
	}
	return rv, nil, true, nil
}

// packVar appends one variable value in the format wgo_var reads.
func packVar(dst []byte, value string) []byte {
	dst = binary.NativeEndian.AppendUint32(dst, uint32(len(value)))
	return append(dst, value...)
}

// packKey appends the zone's variable value for r: its expanded key (the engine masks an
// address to the zone's prefix), never empty (an empty key is one bucket, as in
// caddy-ratelimit, where the engine would leave the request uncounted).
func (z *inlineZone) packKey(dst []byte, r *http.Request, repl *caddy.Replacer) []byte {
	k := z.key.expand(r, repl)
	if k == "" {
		return packVar(dst, "\x00")
	}
	return packVar(dst, k)
}

// serveEngine evaluates the request with engine `which` (one cgo call) and acts on the
// verdict: it answers a rejection, serves a delay, waits in a queue, and keeps the permits
// to release once the response is complete.
func (h *Handler) serveEngine(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, env *reqEnv,
	rs *reqState, which int) (string, logDec, error) {
	s := h.policy
	if which == engZones {
		s = h.zoneEng
	}
	v := &rs.v[which]
	if env.test != nil {
		v = new(verdict) // the test harness may keep it beyond this request
	}
	pass := logDec{action: "pass"}
	s.mu.RLock()
	if s.eng == nil {
		s.mu.RUnlock()
		return "pass", pass, nil
	}
	eng := s.eng // its Go fields (limit names) stay valid after a Destruct
	rv, hb, ok, err := h.request(eng, r, repl, env, rs, which)
	if hb != nil {
		defer func() { *hb = (*hb)[:0]; headerPool.Put(hb) }()
	}
	if !ok {
		s.mu.RUnlock()
		return "pass", pass, err
	}
	eng.evaluate(&rv, env.now, v, false)
	closed := v.rc != 0 && eng.failsClosed()
	dec := logDec{action: v.logAction()}
	if l := v.logLimit(); v.rc == 0 && l >= 0 {
		// A limit decided: the engine renders its key now, while the request view lives.
		dec.limit, dec.key = s.name(l), eng.renderKey(&rv, l)
	}
	s.mu.RUnlock()
	if v.rc == errBadTarget {
		setPlaceholders(r, repl, "bad_request", logDec{})
		testReport(w, env, "bad_request", "", nil)
		return "", dec, caddyhttp.Error(http.StatusBadRequest, errors.New("weir: invalid request target"))
	}
	if v.rc != 0 {
		if err := h.failed(v.rc, closed); err != nil {
			setPlaceholders(r, repl, "error", logDec{})
			return "", dec, err
		}
		return "error", logDec{}, nil
	}
	limit := s.name(v.limit())
	if d := v.dryRunLimit(); d >= 0 {
		h.dryRun(r, env, s.name(d), v.dryRunAction(), s.logLevel(d))
	}
	holdPermits := func() {
		if v.holdsPermits() || v.holdsCharges() {
			rs.held[which], rs.heldBy[which] = v, s
		}
	}
	reject := func(retry string, lines [][2]string) error {
		if ban := s.eng.banLine(v); ban != "" && h.logger != nil {
			if ce := h.logger.Check(s.logLevel(v.limit()), ban); ce != nil {
				ce.Write(zap.String("limit", limit), zap.String("client_ip", env.clientIP(r)))
			}
		}
		dec.action = "reject" // also a queued request's at its timeout
		return h.rejected(w, r, repl, env, v.status(), dec, s.logLevel(v.limit()), retry, lines,
			h.LogKey && which == engZones, v.banned())
	}
	// The policy's verdict carries its response header lines (Retry-After among them); the
	// zones' does not: Retry-After is written here.
	retry := func() string {
		if which == engZones {
			return strconv.FormatInt(jittered(v.retryAfterS(), h.Jitter), 10)
		}
		return ""
	}
	switch v.action() {
	case actReject:
		return "", dec, reject(retry(), v.headerLines())
	case actQueue:
		if env.test != nil {
			// Test harness: report the queue verdict and keep the ticket for a retry step.
			testQueue(s, w, env, &rv, v, limit)
			return "", dec, caddyhttp.Error(v.status(), errors.New("weir: queued (test)"))
		}
		ok, err := h.waitQueued(s, &rv, v, r)
		if err != nil {
			return "", dec, err
		}
		if !ok {
			return "", dec, reject(retry(), v.headerLines())
		}
		holdPermits()
		h.passHeaders(w, v)
		return "queued", dec, nil
	case actDelay:
		testReport(w, env, "delay", limit, v)
		if env.test == nil && !sleepCtx(r.Context(), time.Duration(v.waitNS())) {
			holdPermits()
			return "", dec, caddyhttp.Error(499, r.Context().Err())
		}
		holdPermits()
		h.passHeaders(w, v)
		return "delay", dec, nil
	}
	holdPermits()
	h.passHeaders(w, v)
	if v.exempt() >= 0 {
		testReport(w, env, "exempt", "", v)
		return "exempt", dec, nil
	}
	testReport(w, env, "pass", "", v)
	return "pass", dec, nil
}

// failed applies the policy's failure_mode to an evaluation that returned error code rc: it
// logs, then lets the request through (nil; "open") or answers 503 ("closed").
func (h *Handler) failed(rc int, closed bool) error {
	if !closed {
		h.logger.Error("weir evaluation failed; letting the request through", zap.Int("code", rc))
		return nil
	}
	h.logger.Error("weir evaluation failed; answering 503 (failure_mode closed)", zap.Int("code", rc))
	return caddyhttp.Error(http.StatusServiceUnavailable, errors.New("weir: evaluation failed"))
}

func (h *Handler) passHeaders(w http.ResponseWriter, v *verdict) {
	if v.v.headers_len == 0 {
		return
	}
	for _, l := range v.headerLines() {
		w.Header().Set(l[0], l[1])
	}
}

// waitQueued asks engine s again with the queue ticket, as soon as a request of s gives a
// permit of its queue back and otherwise as often as the engine says, until a slot is free
// (true), the engine rejects — the limit's timeout has passed, among others — (false), or
// the client leaves (error).
func (h *Handler) waitQueued(s *engineState, rv *reqView, v *verdict, r *http.Request) (bool, error) {
	x, ahead := s.waiters.enter(v)
	served := false
	defer func() { s.waiters.leave(x, served, s.lifo) }()
	// Alone in the queue, ask again at once: a release since the first evaluation found no
	// waiter to wake. Behind others, a release wakes them first.
	var wait time.Duration
	if ahead > 0 {
		wait = time.Duration(v.waitNS())
		if pollEvery > 0 {
			wait = pollEvery
		}
	}
	for {
		if wait > 0 && !napQueued(r.Context(), wait, x.ch) {
			s.mu.RLock()
			if s.eng != nil {
				s.eng.abandon(v, nowNS())
			}
			s.mu.RUnlock()
			return false, caddyhttp.Error(499, r.Context().Err())
		}
		s.mu.RLock()
		if s.eng == nil {
			s.mu.RUnlock()
			served = true
			return true, nil
		}
		s.eng.evaluate(rv, nowNS(), v, true)
		closed := v.rc != 0 && s.eng.failsClosed()
		s.mu.RUnlock()
		if v.rc != 0 {
			return true, h.failed(v.rc, closed)
		}
		switch v.action() {
		case actQueue:
			s.waiters.requeued(x, v)
			wait = time.Duration(v.waitNS())
			if pollEvery > 0 {
				wait = pollEvery
			}
			continue
		case actReject:
			return false, nil
		default:
			served = true
			return true, nil
		}
	}
}

// pollEvery, when set (tests), replaces the engine's poll interval for queued requests: so
// long that a waiter gets a freed slot only by being woken (the hand-over alone).
var pollEvery time.Duration

// napQueued waits d, or until woken is closed; false when ctx ended first.
func napQueued(ctx context.Context, d time.Duration, woken <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-woken:
		return true
	case <-ctx.Done():
		return false
	}
}
