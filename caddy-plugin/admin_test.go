package weir

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// statusLimit is a limit's entry in the JSON status, the parts the test reads.
type statusLimit struct {
	Name     string
	Passed   int
	Rejected int
	Last1m   struct {
		Clients []struct {
			Client   string
			Rejected int
		}
	} `json:"last_1m"`
	PerSecond struct{ Rejected []int } `json:"per_second"`
}

// sendFrom sends a GET / from client addr through h: the status weir answered (200 passed).
func sendFrom(t *testing.T, h *Handler, addr string) int {
	t.Helper()
	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = addr + ":1234"
	r, _ := caddyRequest(req, w)
	if err := h.ServeHTTP(w, r, nextOK); err != nil {
		var he caddyhttp.HandlerError
		if !errors.As(err, &he) {
			t.Fatal(err)
		}
		return he.StatusCode
	}
	return w.Code
}

// TestAdminStatus: after rejections from several clients through a provisioned handler, the
// admin route /weir/status answers the engine's JSON status: version 2, the limit's counts,
// its most rejected client first and every rejection in its per-second history.
func TestAdminStatus(t *testing.T) {
	h := policyHandlerFor(t, "[zones.ip]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"1r/m\"\n"+
		"[[limit]]\nname = \"admin-ip\"\nclass = \"*\"\nzone = \"ip\"\n")
	defer provisioned(t, h)()
	send := func(addr string) int { return sendFrom(t, h, addr) }
	rejected := 0
	for i := 0; i < 6; i++ {
		if send("203.0.113.9") == http.StatusTooManyRequests {
			rejected++
		}
	}
	for _, a := range []string{"198.51.100.1", "198.51.100.2"} {
		for i := 0; i < 2; i++ {
			if send(a) == http.StatusTooManyRequests {
				rejected++
			}
		}
	}
	if rejected != 7 {
		t.Fatalf("%d rejections, want 7", rejected)
	}

	w := httptest.NewRecorder()
	if err := (&AdminStatus{}).serveStatus(w, httptest.NewRequest("GET", "/weir/status", nil)); err != nil {
		t.Fatal(err)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var st struct {
		Version int
		Limits  []statusLimit
	}
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	var lim *statusLimit
	for i := range st.Limits {
		if st.Limits[i].Name == "admin-ip" {
			lim = &st.Limits[i]
		}
	}
	if st.Version != 2 || lim == nil || lim.Passed != 3 || lim.Rejected != 7 {
		t.Fatalf("status: %s", w.Body)
	}
	if c := lim.Last1m.Clients; len(c) == 0 || c[0].Client != "203.0.113.9" || c[0].Rejected != 5 {
		t.Fatalf("clients: %+v", c)
	}
	sum := 0
	for _, n := range lim.PerSecond.Rejected {
		sum += n
	}
	if sum != 7 {
		t.Fatalf("per-second rejections %d, want 7", sum)
	}
	if err := (&AdminStatus{}).serveStatus(httptest.NewRecorder(), httptest.NewRequest("POST", "/weir/status", nil)); err == nil {
		t.Fatal("POST accepted")
	}
}

// TestAdminStatusPage: ?format=html answers the status page with its Content-Security-Policy
// and headers (the browser test runs it); an unknown format is refused.
func TestAdminStatusPage(t *testing.T) {
	w := httptest.NewRecorder()
	if err := (&AdminStatus{}).serveStatus(w, httptest.NewRequest("GET", "/weir/status?format=html", nil)); err != nil {
		t.Fatal(err)
	}
	h := w.Header()
	if ct := h.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'; script-src 'sha256-") ||
		!strings.HasSuffix(csp, "frame-ancestors 'none'") {
		t.Fatalf("policy %q", csp)
	}
	if h.Get("X-Frame-Options") != "DENY" || h.Get("Cache-Control") != "no-store" {
		t.Fatalf("headers %v", h)
	}
	if b := w.Body.String(); !strings.HasPrefix(b, "<!DOCTYPE html>") || !strings.Contains(b, "?format=json") {
		t.Fatalf("page %.200s", b)
	}
	if err := (&AdminStatus{}).serveStatus(httptest.NewRecorder(), httptest.NewRequest("GET", "/weir/status?format=xml", nil)); err == nil {
		t.Fatal("format=xml accepted")
	}
}
