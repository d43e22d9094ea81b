package itest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// {http.weir.action}, {http.weir.limit} and {http.weir.key} in Caddy's access log (log_append):
// every rejection names the deciding zone or policy limit and its key as the engine renders it
// (an inline zone's address-valued key masked to the zone's prefix by the engine), a dry-run
// limit's would-be rejection names that limit, passes name none.

const accessLogCfg = `%GLOBALS%
:%PORT% {
	log {
		output file %DIR%/access.log
		format json
	}
	log_append weir_action {http.weir.action}
	log_append weir_limit {http.weir.limit}
	log_append weir_key {http.weir.key}
	weir {
		zone net {
			key {http.request.header.X-Ip}
			events 1
			window 1h
			ipv4_prefix 24
		}
		policy %DIR%/p.toml
	}
	respond "ok"
}
`

const accessLogPolicy = `[zones.g]
size = "64k"
algorithm = "gcra"
rate = "1r/h"
[classes.trial]
match = [{ path_prefix = "/dry" }]
[[limit]]
class = "trial"
zone = "g"
name = "trial"
key = ["ip", "path"]
dry_run = true
`

func TestAccessLogPlaceholders(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	dir := t.TempDir()
	writeFile(t, dir, "p.toml", accessLogPolicy)
	s := startCaddy(t, bin, "caddyfile", strings.ReplaceAll(accessLogCfg, "%DIR%", dir))
	type line struct {
		ip, path string
		status   int
		action   string
		limit    string
		key      string
	}
	want := []line{
		{"192.0.2.7", "/", 200, "pass", "", ""},
		{"192.0.2.200", "/", 429, "reject", "net", "192.0.2.0/24"},
		{"192.0.3.1", "/", 200, "pass", "", ""},
		{"not-an-ip", "/", 200, "pass", "", ""},
		{"not-an-ip", "/", 429, "reject", "net", "not-an-ip"},
		{"198.51.100.1", "/dry", 200, "pass", "", ""},
		{"203.0.113.2", "/dry", 200, "dry-run-reject", "trial", "ip=127.0.0.1 path=/dry"},
	}
	for i, w := range want {
		if r := get(t, s.port, w.path, [2]string{"X-Ip", w.ip}); r.status != w.status {
			t.Fatalf("request %d (%s %s): %d, want %d", i, w.ip, w.path, r.status, w.status)
		}
	}
	var got []line
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < len(want) && time.Now().Before(deadline) {
		got = got[:0]
		f, err := os.Open(filepath.Join(dir, "access.log"))
		if err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				var e struct {
					Request struct {
						URI     string              `json:"uri"`
						Headers map[string][]string `json:"headers"`
					} `json:"request"`
					Status int    `json:"status"`
					Action string `json:"weir_action"`
					Limit  string `json:"weir_limit"`
					Key    string `json:"weir_key"`
				}
				if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
					t.Fatalf("access log line %q: %v", sc.Text(), err)
				}
				ip := ""
				if h := e.Request.Headers["X-Ip"]; len(h) > 0 {
					ip = h[0]
				}
				got = append(got, line{ip, e.Request.URI, e.Status, e.Action, e.Limit, e.Key})
			}
			f.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(got) != len(want) {
		t.Fatalf("access log: %d lines, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// {http.weir.key} of a limit keyed on a session cookie shows its keyed hash, never the value
// (key text hides header and cookie values by default), and no other part of the access log
// shows it either.
func TestAccessLogHidesCookieKeys(t *testing.T) {
	const secret = "SECRET-7f3a9c"
	bin := binary(t, "WEIR_CADDY")
	dir := t.TempDir()
	writeFile(t, dir, "p.toml", `[zones.s]
size = "64k"
algorithm = "gcra"
rate = "1r/h"
[classes.c]
match = [{ path_prefix = "/c" }]
[[limit]]
class = "c"
zone = "s"
name = "session"
key = "cookie:session"
`)
	s := startCaddy(t, bin, "caddyfile", strings.ReplaceAll(accessLogCfg, "%DIR%", dir))
	// Each request from another network, so that the inline zone `net` passes both and the
	// session limit decides.
	for i, want := range []int{200, 429} {
		ip := [2]string{"X-Ip", fmt.Sprintf("10.%d.0.1", i)}
		if r := get(t, s.port, "/c", [2]string{"Cookie", "a=1; session=" + secret}, ip); r.status != want {
			t.Fatalf("request %d: %d, want %d", i, r.status, want)
		}
	}
	var key string
	deadline := time.Now().Add(10 * time.Second)
	for key == "" && time.Now().Before(deadline) {
		data, _ := os.ReadFile(filepath.Join(dir, "access.log"))
		if strings.Contains(string(data), secret) {
			t.Fatalf("the access log shows the cookie: %s", data)
		}
		for _, l := range strings.Split(string(data), "\n") {
			var e struct {
				Key string `json:"weir_key"`
			}
			if json.Unmarshal([]byte(l), &e) == nil && e.Key != "" {
				key = e.Key
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasPrefix(key, "cookie:session=~") || !strings.Contains(key, " #") {
		t.Fatalf("weir_key %q: want the cookie's hash and the key's reference", key)
	}
}
