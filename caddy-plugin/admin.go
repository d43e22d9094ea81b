package weir

import (
	"errors"
	"net/http"
	"sort"

	"github.com/caddyserver/caddy/v2"
)

// The JSON status on Caddy's admin API: GET /weir/status answers the engine's JSON status
// (docs/METRICS.md "JSON status": counters, per-second history, top rejected keys and
// clients) of every live weir engine of the process, as nginx's weir_status?format=json and
// weir_tower::StatusService do.

func init() {
	caddy.RegisterModule(AdminStatus{})
}

// AdminStatus is the admin API module admin.api.weir.
type AdminStatus struct{}

// CaddyModule returns the Caddy module information.
func (AdminStatus) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.weir",
		New: func() caddy.Module { return new(AdminStatus) },
	}
}

// Routes serves /weir/status.
func (AdminStatus) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{
		Pattern: "/weir/status",
		Handler: caddy.AdminHandlerFunc(serveStatus),
	}}
}

func serveStatus(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: errMethod}
	}
	body := hub.statusJSON()
	if body == nil {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: errRender}
	}
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
	return nil
}

// statusJSON renders every live engine in the order of their sources (policy file or
// handler), each held (its state's read lock) so that none is freed meanwhile.
func (h *metricsHub) statusJSON() []byte {
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
	return statusJSON(engines)
}

var (
	errMethod = errors.New("weir status: GET or HEAD only")
	errRender = errors.New("weir status: rendering failed")

	_ caddy.AdminRouter = (*AdminStatus)(nil)
)
