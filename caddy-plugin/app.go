package weir

import (
	"net/http"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// App is the Caddy app "weir": settings of the process's weir engines as a whole. Today one:
// whether the admin API's /weir/status may change keys (POST reset, unban; docs/CADDY.md).
// Without the app, or with status_write false, /weir/status is read-only.
//
// Caddyfile (global options):
//
//	{
//	    weir {
//	        status_write
//	    }
//	}
type App struct {
	// StatusWrite enables key changes (POST ...&action=reset|unban) on the admin API's
	// /weir/status. Such a request must still carry the Weir-Key-Action header and must not
	// come from another site (docs/METRICS.md, "Key operations").
	StatusWrite bool `json:"status_write,omitempty"`
}

// running is the started App of the running config (nil: none, so read-only).
var running atomic.Pointer[App]

func init() {
	caddy.RegisterModule(App{})
	httpcaddyfile.RegisterGlobalOption("weir", parseGlobal)
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "weir", New: func() caddy.Module { return new(App) }}
}

// Start makes a's settings the running ones (a reload starts the new config's app before it
// stops the old one's).
func (a *App) Start() error {
	running.Store(a)
	return nil
}

// Stop drops a's settings unless a newer config's app took over.
func (a *App) Stop() error {
	running.CompareAndSwap(a, nil)
	return nil
}

// statusWrite reports whether the running config enables key changes on /weir/status.
func statusWrite() bool {
	a := running.Load()
	return a != nil && a.StatusWrite
}

// parseGlobal reads the global option `weir { status_write }`.
func parseGlobal(d *caddyfile.Dispenser, _ any) (any, error) {
	var a App
	d.Next() // the option's name
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "status_write":
			if d.NextArg() {
				return nil, d.ArgErr()
			}
			a.StatusWrite = true
		default:
			return nil, d.Errf("weir: unknown global option %q; expected status_write", d.Val())
		}
	}
	return httpcaddyfile.App{Name: "weir", Value: caddyconfig.JSON(a, nil)}, nil
}

// keyHeaders packs (packHeaders) the headers weir_key_request's access gate reads: Origin,
// Host, Sec-Fetch-Site, Content-Type and Weir-Key-Action, the first value of each.
func keyHeaders(r *http.Request) []byte {
	var b []byte
	for _, name := range [...]string{"Origin", "Sec-Fetch-Site", "Content-Type", "Weir-Key-Action"} {
		if v := r.Header.Values(name); len(v) > 0 {
			b = packHeaders(b, name, v[0])
		}
	}
	if r.Host != "" { // Go keeps Host out of r.Header
		b = packHeaders(b, "host", r.Host)
	}
	return b
}

var (
	_ caddy.App    = (*App)(nil)
	_ caddy.Module = (*App)(nil)
)
