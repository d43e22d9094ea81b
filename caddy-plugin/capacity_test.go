package weir

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

const capacityPolicy = `[zones.b]
size = "64k"
algorithm = "concurrency"
max = 8
[[limit]]
name = "backend"
class = "*"
zone = "b"
key = "global"
`

// capacityOf is the JSON status's capacity object of engine s's first limit.
func capacityOf(t *testing.T, s *engineState) map[string]any {
	t.Helper()
	var status struct {
		Limits []struct {
			Capacity map[string]any `json:"capacity"`
		} `json:"limits"`
	}
	if err := json.Unmarshal(statusJSON([]*engine{s.eng}), &status); err != nil || len(status.Limits) == 0 {
		t.Fatalf("status: %v", err)
	}
	return status.Limits[0].Capacity
}

// serveSamples sends n requests through h to next, 15 ms apart (a latency window closes after
// 100 ms with 8 samples).
func serveSamples(t *testing.T, h *Handler, next caddyhttp.Handler, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		w := httptest.NewRecorder()
		r, _ := caddyRequest(httptest.NewRequest("GET", "/", nil), w)
		if err := h.ServeHTTP(w, r, next); err != nil {
			t.Fatal(err)
		}
		time.Sleep(15 * time.Millisecond)
	}
}

// The permits go back with reverse_proxy's upstream latency when the next handler proxied
// (here a handler that sets the placeholder as reverse_proxy does, and returns at once), and
// otherwise with the time the next handler took: the JSON status shows each.
func TestSampleIsTheUpstreamLatency(t *testing.T) {
	proxied := policyHandlerFor(t, capacityPolicy)
	defer provisioned(t, proxied)()
	serveSamples(t, proxied, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
		repl.Set(upstreamLatency, 40*time.Millisecond)
		w.WriteHeader(http.StatusOK)
		return nil
	}), 12)
	if got := capacityOf(t, proxied.policy)["latency_ms"].(float64); got < 39.9 || got > 40.1 {
		t.Errorf("proxied: latency_ms %v, want reverse_proxy's 40", got)
	}

	// Another file: another engine.
	direct := policyHandlerFor(t, capacityPolicy)
	defer provisioned(t, direct)()
	serveSamples(t, direct, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		time.Sleep(30 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
		return nil
	}), 10)
	if got := capacityOf(t, direct.policy)["latency_ms"].(float64); got < 30 || got > 1000 {
		t.Errorf("not proxied: latency_ms %v, want the next handler's 30 or a little more", got)
	}
}

// heldRequest is a request served by a next handler that holds it until leave is closed.
type heldRequest struct {
	entered, leave chan struct{}
	done           chan string // "StatusText placeholder" once answered
}

func sendHeld(t *testing.T, h *Handler) *heldRequest {
	r := &heldRequest{make(chan struct{}), make(chan struct{}), make(chan string, 1)}
	next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		close(r.entered)
		<-r.leave
		return nil
	})
	go func() {
		s, ph, _ := serveZone(t, h, next)
		r.done <- strings.Join([]string{http.StatusText(s), ph}, " ")
	}()
	return r
}

// reached checks that r reaches the next handler (want), or not within 100 ms.
func (r *heldRequest) reached(t *testing.T, want bool, what string) {
	t.Helper()
	wait := 10 * time.Second
	if !want {
		wait = 100 * time.Millisecond
	}
	select {
	case <-r.entered:
		if !want {
			t.Fatalf("%s reached the next handler", what)
		}
	case got := <-r.done:
		t.Fatalf("%s answered %s", what, got)
	case <-time.After(wait):
		if want {
			t.Fatalf("%s never reached the next handler", what)
		}
	}
}

// A queued request is woken when the slot's holder gives it back, not by polling (polls are
// made an hour apart here): b waits behind a and is served once a ends; c, sent while b runs,
// queues behind b and is served once b ends.
func TestQueuedRequestWokenByRelease(t *testing.T) {
	pollEvery = time.Hour
	defer func() { pollEvery = 0 }()
	h := &Handler{RateLimits: map[string]*Zone{"c": {Key: "k", Max: 1, Queue: 2, Timeout: caddy.Duration(time.Hour)}}}
	defer provisioned(t, h)()
	a := sendHeld(t, h)
	a.reached(t, true, "a")
	b := sendHeld(t, h)
	b.reached(t, false, "b (queued behind a)")
	close(a.leave)
	b.reached(t, true, "b, after a's release")
	c := sendHeld(t, h)
	c.reached(t, false, "c (queued behind b)")
	close(b.leave)
	c.reached(t, true, "c, after b's release")
	close(c.leave)
	for i, r := range []*heldRequest{a, b, c} {
		want := "OK queued/c"
		if i == 0 {
			want = "OK pass/-"
		}
		if got := <-r.done; got != want {
			t.Errorf("request %d: %s, want %s", i, got, want)
		}
	}
}

// Once the queue stands (every waiter served for more than an interval waited over 5 ms), a
// freed slot goes to the newest waiter: of three lined up while the slot is taken, the third
// is served first, then the second, then the first. Eight 200 ms answers first teach the
// zone its no-load latency, so that a standing queue's waiters are refused only after 200 ms.
func TestStandingQueueServesNewestFirst(t *testing.T) {
	pollEvery = time.Hour
	defer func() { pollEvery = 0 }()
	h := &Handler{RateLimits: map[string]*Zone{"c": {Key: "k", Max: 1, Queue: 4, Timeout: caddy.Duration(time.Hour)}}}
	defer provisioned(t, h)()
	serveSamples(t, h, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		time.Sleep(200 * time.Millisecond)
		return nil
	}), 8)
	if got := capacityOf(t, h.zoneEng)["noload_latency_ms"].(float64); got < 150 {
		t.Fatalf("no-load latency %v ms, want about 200", got)
	}
	queued := func(n float64) {
		t.Helper()
		for t0 := time.Now(); capacityOf(t, h.zoneEng)["queued"] != n; time.Sleep(time.Millisecond) {
			if time.Since(t0) > 5*time.Second {
				t.Fatalf("never %v queued", n)
			}
		}
	}
	// Each waiter waits 30 ms for its slot, over more than an interval (100 ms).
	holder := sendHeld(t, h)
	holder.reached(t, true, "the first holder")
	for i := 0; i < 5; i++ {
		next := sendHeld(t, h)
		queued(1)
		time.Sleep(30 * time.Millisecond)
		close(holder.leave)
		next.reached(t, true, "the waiter, after the release")
		holder = next
	}
	var x []*heldRequest
	for i := 1; i <= 3; i++ {
		x = append(x, sendHeld(t, h))
		queued(float64(i))
	}
	close(holder.leave)
	for i := 2; i >= 0; i-- {
		x[i].reached(t, true, fmt.Sprintf("x%d", i+1))
		for j := 0; j < i; j++ {
			select {
			case <-x[j].entered:
				t.Fatalf("x%d was served before x%d", j+1, i+1)
			default:
			}
		}
		close(x[i].leave)
	}
}

// An inline concurrency zone with max auto: the Caddyfile's bounds reach the engine (the
// learned limit starts at 20, within them), and bad combinations are refused.
func TestZoneMaxAuto(t *testing.T) {
	var h Handler
	file := "weir {\n\tzone api {\n\t\tkey static\n\t\tmax auto bounds 2 50 queue 10 timeout 2s\n\t}\n}"
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(file)); err != nil {
		t.Fatal(err)
	}
	z := h.RateLimits["api"]
	if !z.MaxAuto || len(z.Bounds) != 2 || z.Bounds[0] != 2 || z.Bounds[1] != 50 || z.Queue != 10 {
		t.Fatalf("zone %+v", z)
	}
	defer provisioned(t, &h)()
	capacity := capacityOf(t, h.zoneEng)
	if capacity["auto"] != true || capacity["limit"] != 20.0 {
		t.Errorf("capacity %v, want auto with the initial limit 20", capacity)
	}
	if s, ph, _ := serveZone(t, &h, nextOK); s != 200 || ph != "pass/-" {
		t.Errorf("a request: %d %s", s, ph)
	}
	for _, bad := range []string{
		"max auto bounds 5 2",
		"max auto bounds 0 2",
		"max auto bounds 2",
		"max 4 bounds 2 5",
		"max 4\n\t\tbounds 2 5",
		"max auto\n\t\tmax 3",
	} {
		var h Handler
		file := "weir {\n\tzone api {\n\t\tkey static\n\t\t" + bad + "\n\t}\n}"
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(file)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
