package weir

// Deferred charges (charge_on_status limits): the response status they are charged with.

import (
	"errors"
	"io"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// charging reports whether the request holds deferred charges (its response status counts).
func (rs *reqState) charging() bool {
	for _, v := range rs.held {
		if v != nil && v.holdsCharges() {
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

// serveCharged serves the request through next, recording its response status in rs for the
// deferred charges: the status written, or for an error the status Caddy answers it with.
func (rs *reqState) serveCharged(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	rs.sw = statusWriter{ResponseWriterWrapper: caddyhttp.ResponseWriterWrapper{ResponseWriter: w}}
	err := next.ServeHTTP(&rs.sw, r)
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
