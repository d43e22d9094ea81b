package weir

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

const hour = caddy.Duration(time.Hour)

// serveZone sends one request with the given headers through h; it returns the status weir
// gave (200 when it passed), the placeholders and the response headers.
func serveZone(t *testing.T, h *Handler, next caddyhttp.Handler, hdr ...string) (int, string, http.Header) {
	t.Helper()
	r0 := httptest.NewRequest("GET", "/", nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r0.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	r, repl := caddyRequest(r0, w)
	status := http.StatusOK
	if err := h.ServeHTTP(w, r, next); err != nil {
		var he caddyhttp.HandlerError
		if !errors.As(err, &he) {
			t.Fatal(err)
		}
		status = he.StatusCode
	}
	return status, repl.ReplaceAll("{http.weir.status}/{http.weir.limit}", "-"), w.Header()
}

// A request is charged to all its zones or none: a zone's rejection gives back what the
// zones before it charged, and the zone that rejected names itself.
func TestZonesAllOrNothing(t *testing.T) {
	h := &Handler{RateLimits: map[string]*Zone{
		"a": {Key: "static", MaxEvents: 3, Window: hour},
		"b": {Key: "{http.request.header.X-K}", MaxEvents: 1, Window: hour, Status: 503},
	}}
	defer provisioned(t, h)()
	for i, c := range []struct {
		key, ph string
		status  int
	}{
		{"x", "pass/-", 200},
		{"x", "reject/b", 503}, // b rejects: a's charge is given back
		{"y", "pass/-", 200},
		{"z", "pass/-", 200},   // a's 3rd event (without the refund, its 4th)
		{"w", "reject/a", 429}, // a is full
	} {
		status, ph, hdr := serveZone(t, h, nextOK, "X-K", c.key)
		if status != c.status || ph != c.ph {
			t.Errorf("request %d (key %s): %d %s, want %d %s", i, c.key, status, ph, c.status, c.ph)
		}
		if c.status != 200 && hdr.Get("Retry-After") != "3600" {
			t.Errorf("request %d: Retry-After %q, want 3600", i, hdr.Get("Retry-After"))
		}
	}
}

// An empty key is one bucket (as in caddy-ratelimit), not a request the zone leaves out.
func TestZoneEmptyKeyIsOneBucket(t *testing.T) {
	h := &Handler{RateLimits: map[string]*Zone{"e": {Key: "{http.request.header.X-Absent}", MaxEvents: 1, Window: hour}}}
	defer provisioned(t, h)()
	if s, _, _ := serveZone(t, h, nextOK); s != 200 {
		t.Fatalf("first: %d", s)
	}
	if s, _, _ := serveZone(t, h, nextOK); s != 429 {
		t.Fatalf("second request with an empty key: %d, want 429", s)
	}
}

// With the client address as the key, prefixes go to the engine's `ip` key part; with another
// key, an expanded key that is an address is masked by the engine (caddy-ratelimit's meaning).
func TestZonePrefixes(t *testing.T) {
	p, err := zoneParamsOf("n", &Zone{Key: "{http.vars.client_ip}", MaxEvents: 1, Window: hour, IPv4Prefix: 24})
	if err != nil || p.key != "ip" || p.v4 != 24 || p.v6 != 128 {
		t.Errorf("client_ip key: %+v %v, want ip /24 /128", p, err)
	}
	p, err = zoneParamsOf("n", &Zone{Key: "{http.request.header.X-Ip}", MaxEvents: 1, Window: hour, IPv6Prefix: 64})
	if err != nil || p.key != "var:n" || p.v6 != 64 || p.v4 != -1 {
		t.Errorf("header key with a prefix: %+v %v", p, err)
	}
	if p, _ := zoneParamsOf("odd name", &Zone{Key: "k", Rate: "1r/s"}); p.key != "global" || !strings.HasPrefix(p.engName, "zone-") {
		t.Errorf("constant key, a name the policy's names do not allow: %+v", p)
	}
	h := &Handler{RateLimits: map[string]*Zone{"n": {Key: "{http.request.header.X-Ip}", MaxEvents: 1, Window: hour,
		IPv4Prefix: 24, IPv6Prefix: 64}}}
	defer provisioned(t, h)()
	for i, c := range []struct {
		ip     string
		status int
	}{
		{"192.0.2.7", 200}, {"192.0.2.200", 429}, {"::ffff:192.0.2.9", 429}, {"192.0.3.1", 200},
		{"2001:db8:1:2::1", 200}, {"2001:db8:1:2:ffff::9", 429}, {"2001:db8:1:3::1", 200},
		{"not-an-ip", 200}, {"not-an-ip", 429}, {"fe80::1%eth0", 200}, {"fe80::2%eth0", 200},
	} {
		if s, _, _ := serveZone(t, h, nextOK, "X-Ip", c.ip); s != c.status {
			t.Errorf("%d: key %s: %d, want %d", i, c.ip, s, c.status)
		}
	}
}

// Configs with the same zones share one engine (a reload keeps the zones' state); a changed
// zone starts afresh, while the unchanged zones of a changed set keep their state.
func TestZonesSharedAcrossConfigs(t *testing.T) {
	zones := func(window caddy.Duration) map[string]*Zone {
		return map[string]*Zone{"s": {Key: "k", MaxEvents: 1, Window: window}}
	}
	h1 := &Handler{RateLimits: zones(hour)}
	cleanup1 := provisioned(t, h1)
	if s, _, _ := serveZone(t, h1, nextOK); s != 200 {
		t.Fatalf("first: %d", s)
	}
	h2 := &Handler{RateLimits: zones(hour)}
	cleanup2 := provisioned(t, h2)
	if h1.zoneEng != h2.zoneEng {
		t.Fatal("the same zones got another engine")
	}
	if s, _, _ := serveZone(t, h2, nextOK); s != 429 {
		t.Fatalf("the same zone in a new config: %d, want 429 (state kept)", s)
	}
	h3 := &Handler{RateLimits: zones(2 * hour)}
	defer provisioned(t, h3)()
	if s, _, _ := serveZone(t, h3, nextOK); s != 200 {
		t.Fatalf("a changed zone: %d, want 200 (fresh state)", s)
	}
	// Zone s unchanged beside a new zone (a new engine): s keeps its state; the one request
	// is not charged to the new zone (all or nothing).
	h4 := &Handler{RateLimits: zones(hour)}
	h4.RateLimits["t"] = &Zone{Key: "k", MaxEvents: 1, Window: hour}
	defer provisioned(t, h4)()
	if h4.zoneEng == h1.zoneEng {
		t.Fatal("another set of zones shares the engine")
	}
	if s, ph, _ := serveZone(t, h4, nextOK); s != 429 || ph != "reject/s" {
		t.Fatalf("the unchanged zone beside a new one: %d %s, want 429 reject/s (state kept)", s, ph)
	}
	// The old configs end (their engine is freed): the table lives on with the new engine.
	cleanup1()
	cleanup2()
	if h1.zoneEng.eng != nil {
		t.Fatal("the old engine outlived its configs")
	}
	if s, _, _ := serveZone(t, h4, nextOK); s != 429 {
		t.Fatalf("after the old configs ended: %d, want 429 (the table kept)", s)
	}
	delete(h4.RateLimits, "s")
	h5 := &Handler{RateLimits: h4.RateLimits}
	defer provisioned(t, h5)()
	if s, _, _ := serveZone(t, h5, nextOK); s != 200 {
		t.Fatalf("the new zone alone: %d, want 200 (nothing charged to it before)", s)
	}
}

// A concurrency zone's queue is the engine's: a request waits while the slot is held and gets
// it when the holder's response completes; one beyond the queue is refused at once.
func TestZoneQueue(t *testing.T) {
	h := &Handler{RateLimits: map[string]*Zone{"c": {Key: "k", Max: 1, Queue: 1, Timeout: caddy.Duration(5 * time.Second)}}}
	defer provisioned(t, h)()
	entered, leave := make(chan struct{}), make(chan struct{})
	holder := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		close(entered)
		<-leave
		return nil
	})
	first := make(chan int)
	go func() { s, _, _ := serveZone(t, h, holder); first <- s }()
	<-entered
	second := make(chan string)
	go func() {
		s, ph, _ := serveZone(t, h, nextOK)
		second <- strings.Join([]string{http.StatusText(s), ph}, " ")
	}()
	time.Sleep(50 * time.Millisecond) // the second request is in the queue
	if s, _, hdr := serveZone(t, h, nextOK); s != 429 || hdr.Get("Retry-After") != "1" {
		t.Errorf("third (queue full): %d Retry-After %q, want 429 and 1", s, hdr.Get("Retry-After"))
	}
	select {
	case got := <-second:
		t.Fatalf("the queued request ended while the slot was held: %s", got)
	default:
	}
	close(leave)
	if s := <-first; s != 200 {
		t.Errorf("holder: %d", s)
	}
	if got := <-second; got != "OK queued/c" {
		t.Errorf("queued request: %s, want OK queued/c", got)
	}
}
