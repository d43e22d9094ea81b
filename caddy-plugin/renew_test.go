package weir

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

const leasePolicy = `[zones.c]
size = "64k"
algorithm = "concurrency"
max = 1
lease = "2s"
[[limit]]
name = "one"
class = "*"
zone = "c"
key = "global"
`

// TestLongRequestKeepsItsPermit: with a 2 s lease and max 1, a request whose next handler
// runs for three leases keeps its permit the whole time (the engine's renewer renews it):
// second requests are refused throughout; once the first completes, the next passes.
func TestLongRequestKeepsItsPermit(t *testing.T) {
	const lease, held = 2 * time.Second, 6 * time.Second
	h := policyHandlerFor(t, leasePolicy)
	defer provisioned(t, h)()
	serve := func(next caddyhttp.Handler) int {
		w := httptest.NewRecorder()
		r, _ := caddyRequest(httptest.NewRequest("GET", "/long", nil), w)
		err := h.ServeHTTP(w, r, next)
		var he caddyhttp.HandlerError
		if errors.As(err, &he) {
			return he.StatusCode // a rejection
		}
		if err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
		return w.Code
	}
	inside, finish, done := make(chan struct{}), make(chan struct{}), make(chan int)
	go func() {
		done <- serve(caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			close(inside)
			<-finish
			w.WriteHeader(200)
			return nil
		}))
	}()
	<-inside
	start := time.Now()
	probes := 0
	for time.Since(start) < held {
		if got := serve(nextOK); got != 429 {
			t.Fatalf("%.1fs (%.1f leases) into the first request, a second got %d",
				time.Since(start).Seconds(), float64(time.Since(start))/float64(lease), got)
		}
		probes++
		time.Sleep(250 * time.Millisecond)
	}
	close(finish)
	if got := <-done; got != 200 {
		t.Fatalf("the long request: %d", got)
	}
	if got := serve(nextOK); got != 200 {
		t.Fatalf("after the long request completed: %d", got)
	}
	t.Logf("%d second requests refused over %v (lease %v)", probes, held, lease)
}
