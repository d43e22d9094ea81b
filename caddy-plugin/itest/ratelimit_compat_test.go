package itest

import (
	"fmt"
	"testing"
)

// caddy-ratelimit's documented test cases, ported to the weir directive with the same zone
// shape (its JSON `rate_limits` with match/key/window/max_events). Time is injected with
// X-Weir-Test-Now (caddy-weirtest). Zones of this shape use weir's exact sliding log, so
// statuses and Retry-After values are caddy-ratelimit's (checked by hand against a
// caddy-ratelimit build in real time; see docs/CADDY.md).

func at(ms uint64) [2]string { return [2]string{"X-Weir-Test-Now", fmt.Sprint(ms)} }

// TestRateLimitsPort: 10 events per 60 s on a static key, matched to GET.
func TestRateLimitsPort(t *testing.T) {
	bin := binary(t, "WEIR_CADDY_TEST")
	cfg := `{
	"admin": {"listen": "127.0.0.1:%ADMIN%"},
	"apps": {"http": {"servers": {"demo": {
		"listen": ["127.0.0.1:%PORT%"],
		"routes": [{"handle": [
			{"handler": "weir", "rate_limits": {"zone1": {
				"match": [{"method": ["GET"]}], "key": "static", "window": "60s", "max_events": 10}}},
			{"handler": "static_response", "status_code": 200}
		]}]
	}}}}
}`
	s := startCaddy(t, bin, "json", cfg)
	const t0 = 20000
	for i := 0; i < 10; i++ {
		if r := get(t, s.port, "/", at(t0)); r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	// Retry-After is when the oldest logged event leaves the window, + 0.5 s, printed
	// without decimals (caddy-ratelimit's formula; Go rounds the exact .5 to even).
	cases := []struct {
		tMs        uint64
		status     int
		retryAfter string
	}{
		{t0, 429, "60"},         // the 11th request: the 10 events leave at t0 + 60 s
		{t0 + 30000, 429, "30"}, // half a window later
		{t0 + 59500, 429, "1"},  // half a second before
		{t0 + 60000, 200, ""},   // the 10 events have left the window
		{t0 + 66000, 200, ""},
		{t0 + 66000, 200, ""},
		{t0 + 66000, 200, ""},
		{t0 + 66000, 200, ""},
		{t0 + 66000, 200, ""},
		{t0 + 66000, 200, ""},
		{t0 + 66000, 200, ""},
		{t0 + 66000, 200, ""},
		{t0 + 66000, 200, ""},   // 10 events since t0 + 60 s
		{t0 + 66000, 429, "54"}, // the one at t0 + 60 s leaves at t0 + 120 s
		{t0 + 120000, 200, ""},
	}
	for i, c := range cases {
		r := get(t, s.port, "/", at(c.tMs))
		if r.status != c.status || r.header.Get("Retry-After") != c.retryAfter {
			t.Errorf("case %d, t=%d ms: got %d Retry-After %q, want %d %q",
				i, c.tMs, r.status, r.header.Get("Retry-After"), c.status, c.retryAfter)
		}
	}
	// A request the zone does not match is never limited.
	if r := rawRequest(t, s.port, "POST", "/", [][2]string{at(t0)}); r.status != 200 {
		t.Errorf("POST: %d", r.status)
	}
}

// TestDistinctZonesAndKeysPort: two zones (GET, DELETE) keyed by path count independently.
// Written as a Caddyfile, which also exercises the zone/match syntax.
func TestDistinctZonesAndKeysPort(t *testing.T) {
	bin := binary(t, "WEIR_CADDY_TEST")
	cfg := `%GLOBALS%
:%PORT% {
	weir {
		zone zone1 {
			match {
				method GET
			}
			key {http.request.orig_uri.path}
			window 60s
			events 10
		}
		zone zone2 {
			match {
				method DELETE
			}
			key {http.request.orig_uri.path}
			window 60s
			events 10
		}
	}
	respond 200
}
`
	s := startCaddy(t, bin, "caddyfile", cfg)
	for _, m := range []string{"GET", "DELETE"} {
		for _, p := range []string{"/path1", "/path2"} {
			for i := 0; i < 10; i++ {
				if r := rawRequest(t, s.port, m, p, [][2]string{at(20000)}); r.status != 200 {
					t.Fatalf("%s %s #%d: %d", m, p, i, r.status)
				}
			}
			r := rawRequest(t, s.port, m, p, [][2]string{at(20000)})
			if r.status != 429 {
				t.Fatalf("%s %s #11: %d, want 429", m, p, r.status)
			}
			if r.header.Get("Retry-After") != "60" {
				t.Errorf("%s %s: Retry-After %q", m, p, r.header.Get("Retry-After"))
			}
		}
	}
}

// TestIPPrefixPort: caddy-ratelimit's ipv4_prefix / ipv6_prefix cases, observed through
// the bucket a client lands in (key {client_ip}, the client given by X-Weir-Test-Peer, 1 event
// per hour). The prefixes apply to the client address only: with another key they are refused.
func TestIPPrefixPort(t *testing.T) {
	bin := binary(t, "WEIR_CADDY_TEST")
	cfg := `%GLOBALS%
:%PORT% {
	weir {
		zone nets {
			key {client_ip}
			events 1
			window 1h
			ipv4_prefix 24
			ipv6_prefix 64
		}
	}
	respond 200
}
`
	s := startCaddy(t, bin, "caddyfile", cfg)
	steps := []struct {
		client string
		status int
	}{
		{"2001:db8:1234:5678:9abc:def0:1234:5678", 200},
		{"2001:db8:1234:5678:ffff:ffff:ffff:ffff", 429}, // same /64
		{"2001:db8:1234:5678::1", 429},                  // same /64
		{"2001:db8:1234:5679::1", 200},                  // another /64
		{"192.168.1.100", 200},
		{"192.168.1.7", 429}, // same /24
		{"192.168.2.7", 200},
		{"::ffff:192.168.2.9", 429}, // IPv4-mapped counts as IPv4: same /24
	}
	for _, st := range steps {
		r := get(t, s.port, "/", at(0), [2]string{"X-Weir-Test-Peer", st.client})
		if r.status != st.status {
			t.Errorf("client %s: %d, want %d", st.client, r.status, st.status)
		}
	}
}

// TestJSONGCRAAndConcurrencyZones: the JSON form of GCRA and concurrency zones.
func TestJSONGCRAAndConcurrencyZones(t *testing.T) {
	bin := binary(t, "WEIR_CADDY_TEST")
	cfg := `{
	"admin": {"listen": "127.0.0.1:%ADMIN%"},
	"apps": {"http": {"servers": {"demo": {
		"listen": ["127.0.0.1:%PORT%"],
		"routes": [
			{"match": [{"path": ["/g"]}], "handle": [
				{"handler": "weir", "rate_limits": {"g": {"key": "{http.request.header.X-Client}", "rate": "2r/m", "burst": 1}}},
				{"handler": "static_response", "status_code": 200}]},
			{"match": [{"path": ["/c"]}], "handle": [
				{"handler": "weir", "rate_limits": {"c": {"key": "static", "max": 1, "status": 503}}},
				{"handler": "static_response", "status_code": 200}]}
		]
	}}}}
}`
	s := startCaddy(t, bin, "json", cfg)
	a := [2]string{"X-Client", "a"}
	// 2r/m: T = 30 s, burst 1 → 2 back to back; the 3rd waits until the TAT (now + 90 s)
	// is within the 60 s tolerance: 30 s.
	for i, want := range []int{200, 200, 429} {
		r := get(t, s.port, "/g", at(0), a)
		if r.status != want {
			t.Fatalf("gcra #%d: %d, want %d", i, r.status, want)
		}
		if want == 429 && r.header.Get("Retry-After") != "30" {
			t.Errorf("gcra Retry-After %q, want 30", r.header.Get("Retry-After"))
		}
	}
	if r := get(t, s.port, "/g", at(0), [2]string{"X-Client", "b"}); r.status != 200 {
		t.Errorf("another key: %d", r.status)
	}
	if r := get(t, s.port, "/g", at(30000), a); r.status != 200 {
		t.Errorf("gcra after 30 s: %d", r.status)
	}
	// Concurrency max 1: hold the first request's permit (test step), the second is refused
	// with the zone's status, after the release the slot is free again.
	step := func(h ...[2]string) response { return get(t, s.port, "/c", append([][2]string{at(0)}, h...)...) }
	if r := step([2]string{"X-Weir-Test-Step", "c/0"}); r.status != 200 {
		t.Fatalf("first: %d", r.status)
	}
	if r := step(); r.status != 503 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("second: %d Retry-After %q, want 503 and 1", r.status, r.header.Get("Retry-After"))
	}
	if r := step([2]string{"X-Weir-Test-Release", "c/0"}); r.status != 204 {
		t.Fatalf("release: %d", r.status)
	}
	if r := step(); r.status != 200 {
		t.Fatalf("after release: %d", r.status)
	}
}
