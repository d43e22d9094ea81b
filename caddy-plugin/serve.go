package weir

import (
	"context"
	"errors"
	"net"
	"net/http"
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
)

// queuePoll is how often a queued request looks for a free slot.
const queuePoll = 2 * time.Millisecond

// reqEnv is the time and peer one request is evaluated with.
type reqEnv struct {
	now  uint64
	peer string
	test *testCtl // non-nil only in weirtest builds, when the request carries test headers
	ctx  context.Context
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

// maxHeld is how many zone charges and permits a request keeps in its pooled state before
// spilling into a larger slice (more zones than that in one handler is unusual).
const maxHeld = 4

// reqState is one request's scratch memory, pooled so that a request that passes allocates
// nothing here: the C structs the engine writes into, the rate zones charged so far (refunded
// if a later zone rejects) and the permits to release once the response is complete.
type reqState struct {
	check       cCheck
	v           verdict
	charged     []charge
	permits     []permit // the C permits only (handed to C)
	permitZones []*zoneState
	policyHeld  *verdict // a policy verdict holding permits to release

	chargedBuf     [maxHeld]charge
	permitsBuf     [maxHeld]permit
	permitZonesBuf [maxHeld]*zoneState
}

type charge struct {
	z   *inlineZone
	key string
}

var reqStates = sync.Pool{New: func() any {
	rs := new(reqState)
	rs.reset()
	return rs
}}

func (rs *reqState) reset() {
	clear(rs.chargedBuf[:])
	clear(rs.permitZonesBuf[:])
	rs.charged = rs.chargedBuf[:0]
	rs.permits = rs.permitsBuf[:0]
	rs.permitZones = rs.permitZonesBuf[:0]
	rs.policyHeld = nil
}

// release gives back the request's permits, the policy's first, then the zones' in reverse.
func (rs *reqState) release(h *Handler, now uint64) {
	if v := rs.policyHeld; v != nil {
		s := h.policy
		s.mu.RLock()
		if s.eng != nil {
			s.eng.release(v, now)
		}
		s.mu.RUnlock()
	}
	for i := len(rs.permits) - 1; i >= 0; i-- {
		st := rs.permitZones[i]
		st.mu.RLock()
		if st.z != nil {
			st.z.releasePermit(&rs.permits[i], now)
		}
		st.mu.RUnlock()
	}
}

// detach hands the request's permits over as functions (test harness: held across steps);
// the state then holds none.
func (rs *reqState) detach(h *Handler) []func(uint64) {
	var out []func(uint64)
	for i := range rs.permits {
		st, p := rs.permitZones[i], rs.permits[i]
		out = append(out, func(now uint64) {
			st.mu.RLock()
			if st.z != nil {
				st.z.releasePermit(&p, now)
			}
			st.mu.RUnlock()
		})
	}
	if v := rs.policyHeld; v != nil {
		s := h.policy
		out = append(out, func(now uint64) {
			s.mu.RLock()
			if s.eng != nil {
				s.eng.release(v, now)
			}
			s.mu.RUnlock()
		})
	}
	rs.reset()
	return out
}

// done releases what the request holds and recycles its state.
func (h *Handler) done(rs *reqState) {
	if len(rs.permits) > 0 || rs.policyHeld != nil {
		rs.release(h, nowNS())
	}
	rs.reset()
	reqStates.Put(rs)
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	env := reqEnv{now: nowNS(), ctx: r.Context()}
	if done, err := testIntercept(h, w, r, &env); done {
		return err
	}
	rs := reqStates.Get().(*reqState)
	defer h.done(rs)
	status, limit := "pass", ""
	if len(h.zones) > 0 {
		st, lim, err := h.serveZones(w, r, repl, &env, rs)
		if err != nil {
			return unlessAnswered(err)
		}
		status, limit = st, lim
	}
	if h.policy != nil {
		st, lim, err := h.servePolicy(w, r, repl, &env, rs)
		if err != nil {
			return unlessAnswered(err)
		}
		if st != "pass" || limit == "" {
			status, limit = st, lim
		}
	}
	setPlaceholders(r, repl, status, limit)
	if env.test != nil && env.test.hold {
		// Test harness: keep the permits until an explicit release step.
		testHold(h, env.test, rs.detach(h))
	}
	return next.ServeHTTP(w, r)
}

// phVar is the request variable (caddyhttp.SetVar) holding the request's placeholder values.
const phVar = "weir\x00placeholders" // (a name no Caddyfile can write)

// placeholders are one request's {http.weir.*} values, served to Caddy's replacer by one
// provider (repl.Map) per request. Set through repl.Set instead, they would be the first
// entries of the replacer's static map on most routes, which allocates its table on every
// request. Later weir handlers of the same request find them in the request's variables.
type placeholders struct{ status, limit string }

func (p *placeholders) get(key string) (any, bool) {
	switch key {
	case phStatus:
		return p.status, true
	case phLimit:
		return p.limit, true
	}
	return nil, false
}

func setPlaceholders(r *http.Request, repl *caddy.Replacer, status, limit string) {
	if repl == nil {
		return
	}
	vars, ok := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	if !ok {
		// No variable table (not a request of Caddy's HTTP server): static values.
		repl.Set(phStatus, status)
		repl.Set(phLimit, limit)
		return
	}
	if p, ok := vars[phVar].(*placeholders); ok {
		p.status, p.limit = status, limit
		return
	}
	p := &placeholders{status, limit}
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

// rejected sets the response fields, logs the rejection at the limit's level and returns the
// error Caddy turns into the status (so that handle_errors can shape the response). Without
// handle_errors it answers the status itself (as Caddy would, with an empty body), so that
// Caddy's error log does not report every rejection again (a 5xx at error level).
func (h *Handler) rejected(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, env *reqEnv,
	status int, limit string, level zapcore.Level, retry string, lines [][2]string, key string) error {
	hdr := w.Header()
	for _, l := range lines {
		hdr.Set(l[0], l[1])
	}
	if retry != "" {
		hdr.Set("Retry-After", retry)
	}
	setPlaceholders(r, repl, "reject", limit)
	if h.logger != nil {
		if ce := h.logger.Check(level, "rate limit exceeded"); ce != nil {
			fields := []zap.Field{zap.String("limit", limit), zap.Int("status", status),
				zap.String("retry_after", hdr.Get("Retry-After")), zap.String("client_ip", env.clientIP(r))}
			if h.LogKey && key != "" {
				fields = append(fields, zap.String("key", key))
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

// serveZones runs the inline zones: all-or-nothing across rate zones (a later rejection
// refunds earlier charges), then concurrency zones (permits released after the response).
func (h *Handler) serveZones(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, env *reqEnv,
	rs *reqState) (string, string, error) {
	refund := func() {
		for _, c := range rs.charged {
			c.z.state.mu.RLock()
			if c.z.state.z != nil {
				c.z.state.z.refund(c.key, env.now)
			}
			c.z.state.mu.RUnlock()
		}
		rs.charged = rs.charged[:0]
	}
	for _, z := range h.zones {
		if len(z.matchers) > 0 {
			ok, err := z.matchers.AnyMatchWithError(r)
			if err != nil {
				refund()
				return "", "", caddyhttp.Error(http.StatusInternalServerError, err)
			}
			if !ok {
				continue
			}
		}
		key := applyPrefix(z.key.expand(r, repl), z.cfg.IPv4Prefix, z.cfg.IPv6Prefix)
		st := z.state
		if z.params.kind != kindConcurrency {
			st.mu.RLock()
			if st.z == nil {
				st.mu.RUnlock()
				continue
			}
			c, err := st.z.check(key, env.now, &rs.check)
			st.mu.RUnlock()
			if err != nil {
				h.logger.Error("weir zone check failed; letting the request through", zap.String("zone", z.name), zap.Error(err))
				continue
			}
			if c.action == actReject {
				refund()
				st.rejected.Add(1)
				return "", "", h.rejected(w, r, repl, env, z.status, z.name, z.logLevel, retryAfter(time.Duration(c.retryNS)), nil, key)
			}
			st.passed.Add(1)
			rs.charged = append(rs.charged, charge{z, key})
			continue
		}
		rs.permits = append(rs.permits, emptyPermit())
		p := &rs.permits[len(rs.permits)-1]
		admitted, err := h.acquire(z, key, env, p, &rs.check)
		if err != nil || !admitted || !permitHeld(p) {
			rs.permits = rs.permits[:len(rs.permits)-1]
		} else {
			rs.permitZones = append(rs.permitZones, st)
		}
		if err != nil {
			refund()
			return "", "", err
		}
		if !admitted {
			refund()
			st.rejected.Add(1)
			return "", "", h.rejected(w, r, repl, env, z.status, z.name, z.logLevel, "1", nil, key)
		}
		if permitHeld(p) {
			st.passed.Add(1)
		}
	}
	return "pass", "", nil
}

// acquire takes a concurrency permit, waiting in the zone's bounded queue when full.
func (h *Handler) acquire(z *inlineZone, key string, env *reqEnv, p *permit, out *cCheck) (bool, error) {
	st := z.state
	try := func(now uint64) (bool, bool) {
		st.mu.RLock()
		defer st.mu.RUnlock()
		if st.z == nil {
			return true, false // freed under us (old config draining): let it through
		}
		c, err := st.z.acquire(key, now, p, out)
		if err != nil {
			h.logger.Error("weir zone acquire failed; letting the request through", zap.String("zone", z.name), zap.Error(err))
			return true, false
		}
		return c.action == actPass, true
	}
	if ok, _ := try(env.now); ok {
		return true, nil
	}
	if z.cfg.Queue <= 0 || env.test != nil || !st.enqueue(key, z.cfg.Queue) {
		return false, nil
	}
	defer st.dequeue(key)
	st.queued.Add(1)
	ctx := env.ctx
	deadline := time.Now().Add(z.timeout)
	for time.Now().Before(deadline) {
		if !sleepCtx(ctx, queuePoll) {
			return false, caddyhttp.Error(499, ctx.Err())
		}
		if ok, _ := try(nowNS()); ok {
			return true, nil
		}
	}
	st.timedOut.Add(1)
	return false, nil
}

// servePolicy evaluates the request with the policy engine (one cgo call).
func (h *Handler) servePolicy(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, env *reqEnv,
	rs *reqState) (string, string, error) {
	s := h.policy
	v := &rs.v
	if env.test != nil {
		v = new(verdict) // the test harness may keep it beyond this request
	}
	s.mu.RLock()
	if s.eng == nil {
		s.mu.RUnlock()
		return "pass", "", nil
	}
	eng := s.eng // its Go fields (limit names) stay valid after a Destruct
	bp := headerPool.Get().(*[]byte)
	hb := eng.packPolicyHeaders((*bp)[:0], r)
	rv := reqView{method: r.Method, target: r.RequestURI, peer: env.clientIP(r), headers: hb}
	eng.evaluate(&rv, env.now, v)
	closed := v.rc != 0 && eng.failsClosed()
	s.mu.RUnlock()
	*bp = hb[:0]
	headerPool.Put(bp)
	if v.rc == errBadTarget {
		setPlaceholders(r, repl, "bad_request", "")
		testReport(w, env, "bad_request", "", nil)
		return "", "", caddyhttp.Error(http.StatusBadRequest, errors.New("weir: invalid request target"))
	}
	if v.rc != 0 {
		if err := h.failed(v.rc, closed); err != nil {
			setPlaceholders(r, repl, "error", "")
			return "", "", err
		}
		return "error", "", nil
	}
	limit := eng.limitName(v.limit())
	if d := v.dryRunLimit(); d >= 0 {
		h.dryRun(r, env, eng.limitName(d), v.dryRunAction(), s.logLevel(d))
	}
	holdPermits := func() {
		if v.holdsPermits() {
			rs.policyHeld = v
		}
	}
	switch v.action() {
	case actReject:
		return "", "", h.rejected(w, r, repl, env, v.status(), limit, s.logLevel(v.limit()), "", v.headerLines(), "")
	case actQueue:
		if env.test != nil {
			// Test harness: report the queue verdict and keep the ticket for a retry step.
			testQueue(h, w, env, &rv, v, limit)
			return "", "", caddyhttp.Error(v.status(), errors.New("weir: queued (test)"))
		}
		ok, err := h.waitQueued(&rv, v, r, env)
		if err != nil {
			return "", "", err
		}
		if !ok {
			if v.action() == actReject {
				return "", "", h.rejected(w, r, repl, env, v.status(), limit, s.logLevel(v.limit()), "", v.headerLines(), "")
			}
			return "", "", h.rejected(w, r, repl, env, v.status(), limit, s.logLevel(v.limit()), "1", nil, "")
		}
		holdPermits()
		h.passHeaders(w, v)
		return "queued", limit, nil
	case actDelay:
		testReport(w, env, "delay", limit, v)
		if env.test == nil && !sleepCtx(r.Context(), time.Duration(v.waitNS())) {
			holdPermits()
			return "", "", caddyhttp.Error(499, r.Context().Err())
		}
		holdPermits()
		h.passHeaders(w, v)
		return "delay", limit, nil
	}
	holdPermits()
	h.passHeaders(w, v)
	if v.exempt() >= 0 {
		testReport(w, env, "exempt", "", v)
		return "exempt", "", nil
	}
	testReport(w, env, "pass", "", v)
	return "pass", "", nil
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

// waitQueued polls the engine with the queue ticket until a slot is free (true), the
// limit's timeout passes or the engine rejects (false), or the client leaves (error).
func (h *Handler) waitQueued(rv *reqView, v *verdict, r *http.Request, env *reqEnv) (bool, error) {
	s := h.policy
	timeout := time.Duration(0)
	if i := v.limit(); i >= 0 && i < len(s.timeouts) {
		timeout = time.Duration(s.timeouts[i])
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	deadline := time.Now().Add(timeout)
	abandon := func() {
		s.mu.RLock()
		if s.eng != nil {
			s.eng.abandon(v, nowNS())
		}
		s.mu.RUnlock()
	}
	for {
		if !sleepCtx(r.Context(), queuePoll) {
			abandon()
			return false, caddyhttp.Error(499, r.Context().Err())
		}
		if !time.Now().Before(deadline) {
			abandon()
			return false, nil
		}
		s.mu.RLock()
		if s.eng == nil {
			s.mu.RUnlock()
			return true, nil
		}
		s.eng.evaluateQueued(rv, nowNS(), v)
		closed := v.rc != 0 && s.eng.failsClosed()
		s.mu.RUnlock()
		if v.rc != 0 {
			return true, h.failed(v.rc, closed)
		}
		switch v.action() {
		case actQueue:
			continue
		case actReject:
			return false, nil
		default:
			return true, nil
		}
	}
}
