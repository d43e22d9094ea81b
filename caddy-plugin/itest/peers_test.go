package itest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Requests over a unix socket (`bind unix//…`) have no IP peer: the policy counts them for
// its local client, and believes their X-Forwarded-For when it trusts "unix:".

const peersCfg = `%GLOBALS%
http://:%PORT% {
	bind 127.0.0.1 unix/%DIR%/s.sock
	weir {
		policy %DIR%/p.toml
	}
	handle_errors {
		respond "{http.weir.status}" {err.status_code}
	}
	respond "{http.weir.status}"
}
`

// perIP: two requests per client (burst 1), keyed by client address.
const perIP = `[zones.z]
size = "64k"
algorithm = "gcra"
rate = "1r/m"
[[limit]]
class = "*"
zone = "z"
name = "per-ip"
burst = 1
nodelay = true
`

func startPolicy(t *testing.T, bin, policy string) *server {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.toml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(peersCfg, "%DIR%/p.toml", dir+"/p.toml")
	return startCaddy(t, bin, "caddyfile", cfg)
}

// unixStatuses sends one GET per X-Forwarded-For value ("" for none) over the unix socket.
func unixStatuses(t *testing.T, s *server, xffs ...string) []int {
	t.Helper()
	var got []int
	for _, xff := range xffs {
		var h [][2]string
		if xff != "" {
			h = [][2]string{{"X-Forwarded-For", xff}}
		}
		r, err := tryRequestOn("unix", filepath.Join(s.dir, "s.sock"), "GET", "/", h)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.status)
	}
	return got
}

func TestUnixPeerUntrustedIsOneLocalClient(t *testing.T) {
	s := startPolicy(t, binary(t, "WEIR_CADDY"), "failure_mode = \"closed\"\ntrusted_proxies = [\"10.0.0.0/8\"]\n"+perIP)
	got := unixStatuses(t, s, "203.0.113.1", "203.0.113.2", "203.0.113.3", "")
	if want := []int{200, 200, 429, 429}; !reflect.DeepEqual(got, want) {
		t.Fatalf("untrusted unix peer: %v, want %v (one local client, header ignored)\n%s", got, want, s.Logs())
	}
	// 127.0.0.1 over TCP is not the local client.
	if r := get(t, s.port, "/"); r.status != 200 {
		t.Fatalf("TCP peer after the local client's burst: %d %q", r.status, r.body)
	}
	if strings.Contains(s.Logs(), "evaluation failed") {
		t.Fatalf("evaluation failed:\n%s", s.Logs())
	}
	s.assertAlive()
}

func TestUnixPeerTrustedForwardsTheClient(t *testing.T) {
	s := startPolicy(t, binary(t, "WEIR_CADDY"), "trusted_proxies = [\"unix:\"]\n"+perIP)
	got := unixStatuses(t, s, "203.0.113.9", "203.0.113.9", "203.0.113.9", "203.0.113.10", "", "", "")
	if want := []int{200, 200, 429, 200, 200, 200, 429}; !reflect.DeepEqual(got, want) {
		t.Fatalf("trusted unix peer: %v, want %v\n%s", got, want, s.Logs())
	}
	s.assertAlive()
}

// TestFailureMode forces evaluations to fail (the weirtest build's X-Weir-Test-Peer given a
// peer that is no address): failure_mode "closed" answers 503, "open" lets them through.
func TestFailureMode(t *testing.T) {
	broken := [2]string{"X-Weir-Test-Peer", "not-an-address"}
	for mode, want := range map[string]int{"closed": 503, "open": 200} {
		s := startPolicy(t, binary(t, "WEIR_CADDY_TEST"), "failure_mode = \""+mode+"\"\n"+perIP)
		got := []int{get(t, s.port, "/", broken).status, get(t, s.port, "/").status, get(t, s.port, "/", broken).status}
		if !reflect.DeepEqual(got, []int{want, 200, want}) {
			t.Errorf("failure_mode %s: %v, want [%d 200 %d]\n%s", mode, got, want, want, s.Logs())
		}
		msg := "weir evaluation failed; " + map[string]string{"closed": "answering 503", "open": "letting the request through"}[mode]
		// Caddy's log reaches the test through a pipe: wait for the lines (10 s at most).
		for i := 0; i < 200 && strings.Count(s.Logs(), msg) < 2; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if n := strings.Count(s.Logs(), msg); n != 2 {
			t.Errorf("failure_mode %s: %d failures logged, want 2\n%s", mode, n, s.Logs())
		}
		s.assertAlive()
	}
}
