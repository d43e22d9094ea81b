package weir

import (
	"errors"
	"net/http"
	"net/url"
	"sort"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// The JSON status on Caddy's admin API: GET /weir/status answers the engine's JSON status
// (docs/METRICS.md "JSON status": counters, per-second history, top rejected keys and
// clients) of every live weir engine of the process, as nginx's weir_status?format=json and
// weir_tower::StatusService do; GET /weir/status?format=html answers the status page that
// reads it (docs/DASHBOARD.md). With a key argument the request is a key operation
// (docs/METRICS.md "Key operations"): GET/HEAD ?limit=NAME&key=TEXT inspects one key, POST
// ...&action=reset|unban changes it; the engine answers, and each change is logged. Changes
// are refused (403) unless the running config's weir app enables them (App.StatusWrite),
// and, as everywhere, when a browser may have sent them from another site.

func init() {
	caddy.RegisterModule(AdminStatus{})
}

// AdminStatus is the admin API module admin.api.weir.
type AdminStatus struct {
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (AdminStatus) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.weir",
		New: func() caddy.Module { return new(AdminStatus) },
	}
}

// Provision takes the module's logger (Caddy provisions admin routers before their routes).
func (a *AdminStatus) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger(a)
	return nil
}

// Routes serves /weir/status.
func (a *AdminStatus) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{
		Pattern: "/weir/status",
		Handler: caddy.AdminHandlerFunc(a.serveStatus),
	}}
}

func (a *AdminStatus) serveStatus(w http.ResponseWriter, r *http.Request) error {
	return serveStatus(w, r, statusWrite(), a.logger)
}

// serveStatus answers a status request (the admin route's, the weir_status handler's):
// the JSON status, the page (?format=html) or a key operation; write: whether key changes
// are enabled there; logger: for the audit lines (nil: Caddy's default logger). Errors are
// caddy.APIError with the status to answer.
func serveStatus(w http.ResponseWriter, r *http.Request, write bool, logger *zap.Logger) error {
	if isKeyQuery(r.URL.RawQuery) {
		return serveKey(w, r, write, logger)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: errMethod}
	}
	var body []byte
	ctype := "application/json"
	switch r.URL.Query().Get("format") {
	case "", "json":
		hub.held(func(engines []*engine) { body = statusJSON(engines) })
	case "html":
		var headers [][2]string
		body, headers = statusPage()
		for _, h := range headers {
			w.Header().Set(h[0], h[1])
		}
		ctype = "text/html; charset=utf-8"
	default:
		return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: errFormat}
	}
	if body == nil {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: errRender}
	}
	w.Header().Set("Content-Type", ctype)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
	return nil
}

// serveKey answers a key operation with the engine's answer (its status, JSON errors
// included) and logs the audit line of a change at the limit's log_level.
func serveKey(w http.ResponseWriter, r *http.Request, write bool, logger *zap.Logger) error {
	var ans keyAnswer
	ok := false
	hub.held(func(engines []*engine) {
		ans, ok = keyRequest(engines, r.Method, r.URL.RawQuery, keyHeaders(r), write, nowNS())
	})
	if !ok {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: errKey}
	}
	if ans.audit != "" {
		if logger == nil {
			logger = caddy.Log().Named("weir.status")
		}
		if ce := logger.Check(policyLogLevel(ans.level), ans.audit); ce != nil {
			q, _ := url.ParseQuery(r.URL.RawQuery)
			ce.Write(zap.String("limit", q.Get("limit")), zap.String("key", q.Get("key")),
				zap.String("remote_addr", r.RemoteAddr))
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ans.status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(ans.body)
	}
	return nil
}

// held calls f with every live engine in the order of their sources (policy file or
// handler), each held (its state's read lock) so that none is freed meanwhile.
func (h *metricsHub) held(f func(engines []*engine)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	states := make([]*engineState, 0, len(h.live))
	for s := range h.live {
		states = append(states, s)
	}
	sort.SliceStable(states, func(i, j int) bool { return states[i].source < states[j].source })
	engines := make([]*engine, 0, len(states))
	for _, s := range states {
		s.mu.RLock()
		defer s.mu.RUnlock()
		engines = append(engines, s.eng)
	}
	f(engines)
}

var (
	errMethod = errors.New("weir status: GET or HEAD only")
	errRender = errors.New("weir status: rendering failed")
	errFormat = errors.New("weir status: format is json or html")
	errKey    = errors.New("weir status: the key operation failed")

	_ caddy.AdminRouter = (*AdminStatus)(nil)
	_ caddy.Provisioner = (*AdminStatus)(nil)
)
