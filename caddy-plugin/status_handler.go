package weir

import (
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// The status in a site of its own (http.handlers.weir_status): the same answers as the admin
// route /weir/status (the JSON status, the page with ?format=html, key operations), on a
// listener and with access rules the operator chooses, as nginx's weir_status location. A
// browser can open the page here: Caddy's admin endpoint refuses browser requests that carry
// no Origin, which a typed URL never does.
//
//	http://127.0.0.1:8082 {
//	    weir_status [<matcher>] [write]
//	}
//
// write enables key changes (POST reset, unban) on this handler; without it they are
// refused (403), whatever the global option weir { status_write } says for the admin route.

func init() {
	caddy.RegisterModule(StatusHandler{})
	httpcaddyfile.RegisterHandlerDirective("weir_status", parseStatusCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("weir_status", httpcaddyfile.Before, "respond")
}

// StatusHandler is the HTTP handler module http.handlers.weir_status.
type StatusHandler struct {
	// Write enables key changes (POST ...&action=reset|unban) here.
	Write  bool `json:"write,omitempty"`
	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (StatusHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.weir_status",
		New: func() caddy.Module { return new(StatusHandler) },
	}
}

// Provision takes the module's logger (audit lines of key changes).
func (s *StatusHandler) Provision(ctx caddy.Context) error {
	s.logger = ctx.Logger(s)
	return nil
}

// ServeHTTP answers every request it gets; it never calls next.
func (s *StatusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	err := serveStatus(w, r, s.Write, s.logger)
	var api caddy.APIError
	if errors.As(err, &api) {
		if api.HTTPStatus == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", "GET, HEAD")
		}
		return caddyhttp.Error(api.HTTPStatus, api.Err)
	}
	return err
}

func parseStatusCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var s StatusHandler
	err := s.UnmarshalCaddyfile(h.Dispenser)
	return &s, err
}

// UnmarshalCaddyfile reads `weir_status [write]`.
func (s *StatusHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	for d.NextArg() {
		if d.Val() != "write" {
			return d.Errf("weir_status: unknown argument %q; expected write", d.Val())
		}
		s.Write = true
	}
	if d.NextBlock(0) {
		return d.Errf("weir_status: takes no block")
	}
	return nil
}

var (
	_ caddy.Provisioner           = (*StatusHandler)(nil)
	_ caddyhttp.MiddlewareHandler = (*StatusHandler)(nil)
	_ caddyfile.Unmarshaler       = (*StatusHandler)(nil)
)
