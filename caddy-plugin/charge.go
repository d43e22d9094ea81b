package weir

// What a request gives back after its response: deferred charges (charge_on_status limits),
// charged with the response status, and concurrency permits, released with the backend's
// time for the request and the status.

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// holding reports whether the request holds permits or deferred charges (its response status
// and backend time count).
func (rs *reqState) holding() bool {
	for _, v := range rs.held {
		if v != nil {
			return true
		}
	}
	return false
}

// statusWriter records the status of the response written through it.
type statusWriter struct {
	caddyhttp.ResponseWriterWrapper
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriterWrapper.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.Write(b)
}

func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriterWrapper.ReadFrom(r)
}

// upstreamLatency is reverse_proxy's placeholder for the time its upstream took to answer
// (until the response header, the last try's). Its `upstream.duration` would include the
// time the client took to read the body.
const upstreamLatency = "http.reverse_proxy.upstream.latency"

// serveHeld serves the request through next, recording in rs what its permits and charges go
// back with: the response status (the status written, or for an error the status Caddy
// answers it with) and the backend's time, reverse_proxy's upstream latency when it proxied,
// else the time next took.
func (rs *reqState) serveHeld(w http.ResponseWriter, r *http.Request, repl *caddy.Replacer, next caddyhttp.Handler) error {
	rs.sw = statusWriter{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	start := time.Now()
	err := next.ServeHTTP(&rs.sw, r)
	rs.latency = time.Since(start)
	if repl != nil {
		if d, ok := repl.Get(upstreamLatency); ok {
			if d, ok := d.(time.Duration); ok && d > 0 {
				rs.latency = d
			}
		}
	}
	if err != nil && rs.sw.status == 0 {
		var he caddyhttp.HandlerError
		if errors.As(err, &he) && he.StatusCode != 0 {
			rs.sw.status = he.StatusCode
		} else {
			rs.sw.status = http.StatusInternalServerError
		}
	}
	return err
}
