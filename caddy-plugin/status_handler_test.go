package weir

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestStatusHandler: the weir_status handler answers the page and the JSON status like the
// admin route, and key changes only with its own write argument.
func TestStatusHandler(t *testing.T) {
	h := policyHandlerFor(t, "[zones.sh]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n"+
		"[[limit]]\nname = \"site-status\"\nclass = \"*\"\nzone = \"sh\"\n")
	defer provisioned(t, h)()
	const client = "192.0.2.77"
	if s1, s2 := sendFrom(t, h, client), sendFrom(t, h, client); s1 != 200 || s2 != 429 {
		t.Fatalf("statuses %d, %d; want 200, 429", s1, s2)
	}
	serve := func(s *StatusHandler, method, target string, hdr http.Header) (int, *httptest.ResponseRecorder) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, target, nil)
		for k, v := range hdr {
			r.Header[k] = v
		}
		err := s.ServeHTTP(w, r, nil)
		var he caddyhttp.HandlerError
		if errors.As(err, &he) {
			return he.StatusCode, w
		}
		if err != nil {
			t.Fatal(err)
		}
		return w.Code, w
	}
	ro, rw := &StatusHandler{}, &StatusHandler{Write: true}
	if code, w := serve(ro, "GET", "/weir_status?format=html", nil); code != 200 ||
		w.Header().Get("Content-Type") != "text/html; charset=utf-8" ||
		!strings.HasPrefix(w.Header().Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("page: %d %v", code, w.Header())
	}
	if code, w := serve(ro, "GET", "/weir_status", nil); code != 200 || !strings.Contains(w.Body.String(), `"site-status"`) {
		t.Fatalf("json: %d %.200s", code, w.Body)
	}
	if code, _ := serve(ro, "GET", "/weir_status?format=xml", nil); code != 400 {
		t.Fatalf("format=xml: %d", code)
	}
	if code, w := serve(ro, "PUT", "/weir_status", nil); code != 405 || w.Header().Get("Allow") != "GET, HEAD" {
		t.Fatalf("PUT: %d %v", code, w.Header())
	}
	q := "/weir_status?limit=site-status&key=" + client + "&action=reset"
	change := http.Header{"Weir-Key-Action": {"reset"}}
	if code, _ := serve(ro, "POST", q, change); code != 403 {
		t.Fatalf("reset without write: %d", code)
	}
	if s := sendFrom(t, h, client); s != 429 {
		t.Fatalf("a refused reset let the key pass: %d", s)
	}
	if code, w := serve(rw, "POST", q, change); code != 200 {
		t.Fatalf("reset with write: %d %s", code, w.Body)
	}
	if s := sendFrom(t, h, client); s != 200 {
		t.Fatalf("after a reset: %d", s)
	}

	var parsed StatusHandler
	if err := parsed.UnmarshalCaddyfile(caddyfile.NewTestDispenser("weir_status write")); err != nil || !parsed.Write {
		t.Fatalf("weir_status write: %v %+v", err, parsed)
	}
	if err := new(StatusHandler).UnmarshalCaddyfile(caddyfile.NewTestDispenser("weir_status writ")); err == nil ||
		!strings.Contains(err.Error(), "expected write") {
		t.Fatalf("weir_status writ: %v", err)
	}
}
