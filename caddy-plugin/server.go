package weir

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// checkServer looks at the HTTP server the handler is provisioned in (Caddy puts it in the
// provisioning context): whether it has handle_errors routes, and whether the client address
// weir limits on could be chosen by the client.
//
// With trusted_proxies but without trusted_proxies_strict, Caddy takes the leftmost address
// of X-Forwarded-For (client_ip_headers) that a trusted proxy forwards: the client writes that
// entry itself, so every request could name a new address and pass any per-address limit.
// With trusted_proxies_strict, Caddy walks the list right to left and skips trusted proxies,
// as weir policies' own trusted_proxies do. A handler that limits on the client address
// (a policy, or a zone keyed on {client_ip}) is refused on such a server.
func (h *Handler) checkServer(ctx caddy.Context) error {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return nil // not inside an HTTP server (e.g. provisioned alone)
	}
	h.answerRejections = srv.Errors == nil || len(srv.Errors.Routes) == 0
	if srv.TrustedProxiesStrict > 0 || !trustsProxies(srv) {
		return nil
	}
	what := ""
	if h.Policy != "" {
		what = "policy " + h.Policy
	} else {
		for name, z := range h.RateLimits {
			if strings.Contains(z.Key, "client_ip") {
				what = "zone " + name + " (key " + z.Key + ")"
				break
			}
		}
	}
	if what == "" {
		return nil
	}
	return fmt.Errorf("weir: %s limits on the client address, but server %q trusts proxies without "+
		"trusted_proxies_strict: Caddy then takes the leftmost X-Forwarded-For address, which the "+
		"client writes itself; add trusted_proxies_strict to the server's options (global "+
		"`servers { trusted_proxies …; trusted_proxies_strict }`, JSON \"trusted_proxies_strict\": 1)",
		what, srv.Name())
}

// trustsProxies reports whether srv believes forwarded client addresses from some peers.
// Caddy keeps its loaded trusted_proxies source in an unexported field (the JSON is dropped
// once loaded); only whether it is set is read. If a Caddy version renames the field, the
// server is assumed to trust proxies (the safe answer: trusted_proxies_strict is then asked for).
func trustsProxies(srv *caddyhttp.Server) bool {
	if srv.TrustedProxiesUnix {
		return true
	}
	f := reflect.ValueOf(srv).Elem().FieldByName("trustedProxies")
	return !f.IsValid() || f.Kind() != reflect.Interface || !f.IsNil()
}
