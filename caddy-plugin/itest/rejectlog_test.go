package itest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestRejectionLogLevel: each rejection by an inline zone is logged once, by weir, at the
// zone's log_level (info by default), also for a 503 without handle_errors: Caddy's error log
// does not report it again at error level. (Policy limits: tests/hosts/rejection-log.)
func TestRejectionLogLevel(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	cfg := `%GLOBALS%
:%PORT% {
	weir {
		zone quiet {
			match {
				path /z*
			}
			key static
			rate 1r/h
			status 503
		}
		zone loud {
			match {
				path /e*
			}
			key static
			rate 1r/h
			status 503
			log_level error
		}
	}
	respond "ok"
}
`
	s := startCaddy(t, bin, "caddyfile", cfg)
	for _, path := range []string{"/z", "/e"} {
		if r := get(t, s.port, path); r.status != 200 {
			t.Fatalf("first %s: %d", path, r.status)
		}
		if r := get(t, s.port, path); r.status != 503 || r.body != "" {
			t.Fatalf("second %s: %d %q, want 503 with an empty body", path, r.status, r.body)
		}
	}
	want := map[string]string{"quiet": "info", "loud": "error"}
	// Caddy's output reaches the test through a pipe: wait for the last entries.
	got := map[string]string{}
	for deadline := time.Now().Add(10 * time.Second); len(got) < len(want) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		got = rejectionLevels(t, s.Logs())
	}
	s.assertAlive()
	for limit, level := range want {
		if got[limit] != level {
			t.Errorf("rejection by %s logged at %q, want %q; log:\n%s", limit, got[limit], level, s.Logs())
		}
	}
}

// rejectionLevels returns the level of weir's rejection entry per limit; it fails the test on
// an entry of Caddy's error log or a rejection logged twice.
func rejectionLevels(t *testing.T, logs string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(logs, "\n") {
		var e struct{ Level, Logger, Msg, Limit string }
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if e.Logger == "http.log.error" {
			t.Fatalf("Caddy's error log reported a rejection: %s", line)
		}
		if e.Msg == "rate limit exceeded" {
			if _, dup := got[e.Limit]; dup {
				t.Fatalf("limit %s logged twice", e.Limit)
			}
			got[e.Limit] = e.Level
		}
	}
	return got
}
