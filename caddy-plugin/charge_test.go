package weir

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

const chargePolicy = `[zones.f]
size = "64k"
algorithm = "sliding"
events = 2
window = "1h"
[[limit]]
name = "failures"
class = "*"
zone = "f"
key = "global"
charge_on_status = [401]
`

// TestChargeOnStatus: ServeHTTP charges the policy's charge_on_status limit with the status
// the next handler wrote (or the status of its error), after it returns: 200s and other
// statuses never count; after two 401s (one written, one as a handler error) the key is
// refused with 429 before the next handler runs.
func TestChargeOnStatus(t *testing.T) {
	h := policyHandlerFor(t, chargePolicy)
	defer provisioned(t, h)()
	answer := func(status int, asError bool) int {
		called := false
		next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			called = true
			if asError {
				return caddyhttp.Error(status, errors.New("denied"))
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte("x"))
			return nil
		})
		w := httptest.NewRecorder()
		r, _ := caddyRequest(httptest.NewRequest("POST", "/login", nil), w)
		err := h.ServeHTTP(w, r, next)
		if !called && err == nil {
			return w.Code
		}
		var he caddyhttp.HandlerError
		if errors.As(err, &he) {
			return he.StatusCode
		}
		return w.Code
	}
	for i := 0; i < 5; i++ {
		if got := answer(200, false); got != 200 {
			t.Fatalf("200 #%d: %d", i, got)
		}
		if got := answer(403, true); got != 403 {
			t.Fatalf("403 #%d: %d", i, got)
		}
	}
	if got := answer(401, false); got != 401 {
		t.Fatalf("first 401: %d", got)
	}
	if got := answer(401, true); got != 401 {
		t.Fatalf("second 401 (a handler error): %d", got)
	}
	if got := answer(200, false); got != 429 {
		t.Fatalf("after two 401s the key is refused: %d", got)
	}
}
