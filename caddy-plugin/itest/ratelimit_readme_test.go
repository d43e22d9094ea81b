package itest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// caddy-ratelimit's README examples, pasted with the handler renamed (`rate_limit` → `weir`)
// and only what a test needs changed (the listen address, the admin endpoint), run through the
// production binary: `caddy adapt` / `caddy validate`, then real HTTP on 127.0.0.1. Their
// `distributed` needs a Redis server with weir: the pasted config is refused with a message
// saying what to add, and runs once `redis` is added (a real redis-server on loopback).

// startRedis runs redis-server on a free 127.0.0.1 port without persistence; its URL.
func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed (make setup): %v", err)
	}
	port := freePort(t)
	dir := t.TempDir()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return "redis://" + addr + "/0"
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer PING")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// validate runs `caddy validate` on config (adapter "json" or "caddyfile"); its output and
// whether it succeeded.
func validate(t *testing.T, bin, adapter, config string) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	name := "Caddyfile"
	if adapter == "json" {
		name = "caddy.json"
	}
	p := writeFile(t, dir, name, config)
	args := []string{"validate", "--config", p}
	if adapter != "json" {
		args = append(args, "--adapter", adapter)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// adapt runs `caddy adapt` on a Caddyfile; the JSON.
func adapt(t *testing.T, bin, caddyfile string) string {
	t.Helper()
	p := writeFile(t, t.TempDir(), "Caddyfile", caddyfile)
	out, err := exec.Command(bin, "adapt", "--config", p, "--adapter", "caddyfile").Output()
	if err != nil {
		t.Fatalf("adapt: %v\n%s", err, out)
	}
	return string(out)
}

// wantNoRedis: validate refused a distributed block without Redis, saying what to add.
func wantNoRedis(t *testing.T, out string, ok bool) {
	t.Helper()
	for _, want := range []string{"distributed needs a Redis or Valkey server", "redis redis://HOST:6379/0", "inside distributed { }", "expected_nodes N"} {
		if ok || !strings.Contains(out, want) {
			t.Errorf("validate of distributed without redis: ok=%v, want an error saying %q:\n%s", ok, want, out)
		}
	}
}

// The README's JSON example (its server renamed and moved to 127.0.0.1).
const readmeJSON = `{
	"admin": {"listen": "127.0.0.1:%ADMIN%"},
	"apps": {
		"http": {
			"servers": {
				"demo": {
					"listen": ["127.0.0.1:%PORT%"],
					"routes": [
						{
							"handle": [
								{
									"handler": "weir",
									"rate_limits": {
										"static_example": {
											"match": [
												{"method": ["GET"]}
											],
											"key": "static",
											"window": "1m",
											"max_events": 100
										},
										"dynamic_example": {
											"key": "{http.request.remote.host}",
											"window": "5s",
											"max_events": 2
										}
									},
									"distributed": {%REDIS%},
									"log_key": true
								},
								{
									"handler": "static_response",
									"body": "I'm behind the rate limiter!"
								}
							]
						}
					]
				}
			}
		}
	}
}`

// The README's Caddyfile example (the site address on 127.0.0.1, the test's global options).
const readmeCaddyfile = `%GLOBALS%
:%PORT%

weir {
	distributed%REDIS%
	zone static_example {
		match {
			method GET
		}
		key    static
		events 100
		window 1m
	}
	zone dynamic_example {
		key    {remote_host}
		events 2
		window 5s
	}
	log_key
}

respond "I'm behind the rate limiter!"
`

// driveReadme: dynamic_example allows 2 requests per client in 5 s (the third is refused; with
// distributed the zone is weir's sliding-window estimate, whose Retry-After is at most two
// windows); static_example, after it, is not charged for the refused request.
func driveReadme(t *testing.T, s *server) {
	t.Helper()
	roomInWindow(5*time.Second, time.Second)
	for i := 0; i < 2; i++ {
		if r := get(t, s.port, "/"); r.status != 200 || r.body != "I'm behind the rate limiter!" {
			t.Fatalf("request %d: %d %q", i, r.status, r.body)
		}
	}
	r := get(t, s.port, "/")
	if r.status != 429 {
		t.Fatalf("third request in 5 s: %d, want 429", r.status)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 10 {
		t.Errorf("Retry-After %q, want 1..10", r.header.Get("Retry-After"))
	}
	samples := s.compatSamples()
	checkSamples(t, "README example", samples, map[string]float64{
		`caddy_rate_limit_declined_requests_total{zone="dynamic_example"}`:                                              1,
		`caddy_rate_limit_requests_total{zone="dynamic_example"}`:                                                       3,
		`caddy_rate_limit_requests_total{zone="static_example"}`:                                                        2,
		`caddy_rate_limit_config{ipv4_prefix="0",ipv6_prefix="0",max_events="100",window="1m0s",zone="static_example"}`: 1,
		`caddy_rate_limit_config{ipv4_prefix="0",ipv6_prefix="0",max_events="2",window="5s",zone="dynamic_example"}`:    1,
		`caddy_rate_limit_keys_total{zone="dynamic_example"}`:                                                           1,
		`caddy_rate_limit_keys_total{zone="static_example"}`:                                                            1,
		`caddy_rate_limit_declined_requests_total{zone="static_example"}`:                                               0,
	})
}

// compatSamples reads the caddy_rate_limit_* series of the admin /metrics.
func (s *server) compatSamples() map[string]float64 {
	s.t.Helper()
	return s.samplesOf("caddy_rate_limit_")
}

func TestReadmeJSONExample(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	noRedis := strings.ReplaceAll(readmeJSON, "%REDIS%", "")
	out, ok := validate(t, bin, "json", strings.NewReplacer("%ADMIN%", "0", "%PORT%", "8080").Replace(noRedis))
	wantNoRedis(t, out, ok)
	redis := startRedis(t)
	cfg := strings.ReplaceAll(readmeJSON, "%REDIS%", fmt.Sprintf(`"redis": %q`, redis))
	s := startCaddy(t, bin, "json", cfg)
	driveReadme(t, s)
}

func TestReadmeCaddyfileExample(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	noRedis := strings.NewReplacer("%REDIS%", "", "%GLOBALS%", globals(0), "%PORT%", "8080").Replace(readmeCaddyfile)
	// adapt reads it (the JSON has caddy-ratelimit's fields); validate refuses it.
	js := adapt(t, bin, noRedis)
	for _, want := range []string{`"handler":"weir"`, `"distributed":{}`, `"log_key":true`,
		`"key":"{http.request.remote.host}"`, `"max_events":2`, `"window":5000000000`} {
		if !strings.Contains(js, want) {
			t.Errorf("adapted JSON lacks %s:\n%s", want, js)
		}
	}
	out, ok := validate(t, bin, "caddyfile", noRedis)
	wantNoRedis(t, out, ok)
	redis := startRedis(t)
	s := startCaddy(t, bin, "caddyfile", strings.ReplaceAll(readmeCaddyfile, "%REDIS%", " {\n\t\tredis "+redis+"\n\t}"))
	driveReadme(t, s)
}

// The README's network prefix example, JSON and Caddyfile: IPv4 clients are limited one by
// one (only ipv6_prefix is set), here 100 requests a minute from 127.0.0.1.
func TestReadmePrefixExample(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	handler := `{
	"handler": "weir",
	"rate_limits": {
		"per_network": {
			"key": "{http.request.remote.host}",
			"window": "1m",
			"max_events": 100,
			"ipv6_prefix": 64
		}
	}
}`
	jsonCfg := `{"admin": {"listen": "127.0.0.1:%ADMIN%"}, "apps": {"http": {"servers": {"s": {
	"listen": ["127.0.0.1:%PORT%"], "routes": [{"handle": [` + handler + `, {"handler": "static_response", "status_code": 200}]}]}}}}}`
	caddyfile := `%GLOBALS%
:%PORT% {
	weir {
		zone per_network {
			key         {remote_host}
			events      100
			window      1m
			ipv6_prefix 64
		}
	}
	respond 200
}
`
	js := adapt(t, bin, strings.NewReplacer("%GLOBALS%", globals(0), "%PORT%", "8080").Replace(caddyfile))
	if !strings.Contains(js, `"ipv6_prefix":64`) || !strings.Contains(js, `"key":"{http.request.remote.host}"`) {
		t.Errorf("adapted JSON: %s", js)
	}
	for _, c := range []struct{ adapter, cfg string }{{"json", jsonCfg}, {"caddyfile", caddyfile}} {
		t.Run(c.adapter, func(t *testing.T) {
			s := startCaddy(t, bin, c.adapter, c.cfg)
			for i := 0; i < 100; i++ {
				if r := get(t, s.port, "/"); r.status != 200 {
					t.Fatalf("request %d: %d", i, r.status)
				}
			}
			if r := get(t, s.port, "/"); r.status != 429 || r.header.Get("Retry-After") == "" {
				t.Fatalf("request 101: %d Retry-After %q", r.status, r.header.Get("Retry-After"))
			}
		})
	}
}

// Every handler-wide option of caddy-ratelimit's Caddyfile is read: storage (kept in the JSON,
// not used), jitter (Retry-After between the wait and wait·1.5), sweep_interval (no effect),
// disable_metrics (the handler's zones leave the caddy_rate_limit_* families, the others stay),
// and {http.rate_limit.exceeded.name} is the zone that refused.
func TestHandlerOptionsAndPlaceholder(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	cfg := `%GLOBALS%
:%PORT% {
	route /quiet {
		weir {
			disable_metrics
			zone quiet {
				key static
				events 1
				window 1h
			}
		}
		respond 200
	}
	weir {
		storage file_system %DIR%/storage
		jitter 0.5
		sweep_interval 30s
		distributed {
			read_interval 1s
			write_interval 1s
			purge_age 1h
			redis %REDIS%
			expected_nodes 1
		}
		zone per_client {
			match {
				path /limited
			}
			key    {remote_host}
			events 1
			window 20s
		}
	}
	handle_errors 429 {
		respond "over {http.rate_limit.exceeded.name} ({http.weir.limit})" 429
	}
	respond "passed [{http.rate_limit.exceeded.name}]"
}
`
	js := adapt(t, bin, strings.NewReplacer("%GLOBALS%", globals(0), "%PORT%", "8080", "%DIR%", "/tmp/x", "%REDIS%", "redis://127.0.0.1:1/0").Replace(cfg))
	for _, want := range []string{`"storage":{"module":"file_system","root":"/tmp/x/storage"}`, `"jitter":0.5`,
		`"sweep_interval":30000000000`, `"purge_age":3600000000000`, `"disable_metrics":true`} {
		if !strings.Contains(js, want) {
			t.Errorf("adapted JSON lacks %s:\n%s", want, js)
		}
	}
	var parsed map[string]any
	if err := json.Unmarshal([]byte(js), &parsed); err != nil {
		t.Fatal(err)
	}
	s := startCaddy(t, bin, "caddyfile", strings.ReplaceAll(cfg, "%REDIS%", startRedis(t)))
	// Not refused: the placeholder is unknown, which respond leaves as written (as with
	// caddy-ratelimit, which sets it only on a refusal).
	if r := get(t, s.port, "/limited"); r.status != 200 || r.body != "passed [{http.rate_limit.exceeded.name}]" {
		t.Fatalf("first: %d %q", r.status, r.body)
	}
	for i := 0; i < 20; i++ {
		r := get(t, s.port, "/limited")
		if r.status != 429 || r.body != "over per_client (per_client)" {
			t.Fatalf("over the limit: %d %q", r.status, r.body)
		}
		// The estimate's wait for 1 event per 20 s is at most 40 s; with jitter 0.5, 60 s.
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
			t.Fatalf("Retry-After %q, want 1..60", r.header.Get("Retry-After"))
		}
	}
	for i, want := range []int{200, 429} {
		if r := get(t, s.port, "/quiet"); r.status != want {
			t.Fatalf("quiet %d: %d, want %d", i, r.status, want)
		}
	}
	got := s.compatSamples()
	checkSamples(t, "options", got, map[string]float64{
		`caddy_rate_limit_requests_total{zone="per_client"}`:          21,
		`caddy_rate_limit_declined_requests_total{zone="per_client"}`: 20,
	})
	for k := range got {
		if strings.Contains(k, `"quiet"`) {
			t.Errorf("disable_metrics: %s is reported", k)
		}
	}
	if w := s.samples(); w[`weir_limit_requests_total{limit="quiet",verdict="rejected"}`] != 1 {
		t.Errorf("weir's own families keep the zone: %v", w)
	}
}

// Two Caddy instances with the same distributed zone and Redis share one limit: what one
// admitted, the other counts (from its first sync after it first sees the key), and both
// refuse beyond it.
func TestDistributedSharesTheLimit(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	redis := startRedis(t)
	cfg := `%GLOBALS%
:%PORT% {
	weir {
		distributed {
			redis ` + redis + `
			expected_nodes 2
			read_interval 100ms
			write_interval 100ms
		}
		zone shared {
			key    static
			events 6
			window 1h
		}
	}
	handle_errors 429 {
		respond "{http.rate_limit.exceeded.name}" 429
	}
	respond 200
}
`
	a, b := startCaddy(t, bin, "caddyfile", cfg), startCaddy(t, bin, "caddyfile", cfg)
	waitSynced(t, a)
	waitSynced(t, b)
	roomInWindow(time.Hour, 10*time.Second)
	bBeyond, aBeyond := shareSix(t, a, b)
	if r := bBeyond; r.status != 429 || r.body != "shared" {
		t.Fatalf("B beyond the shared limit: %d %q, want 429 shared (A's 3 counted)", r.status, r.body)
	}
	if r := aBeyond; r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("A beyond the shared limit: %d Retry-After %q, want 429 (B's 3 counted)", r.status, r.header.Get("Retry-After"))
	}
	if w := a.samples(); w[`weir_cluster_syncs_total{zone="shared"}`] < 1 || w[`weir_cluster_fallback_active{zone="shared"}`] != 0 {
		t.Errorf("A's cluster metrics: %v", w)
	}
}

// A rate zone with `scope cluster` is one GCRA across the instances (the TAT exchange of
// docs/CLUSTER.md): a burst of 6 is shared, whichever instance admits (an instance learns the
// key's cluster TAT at its first sync after it first sees the key).
func TestClusterScopeRateZone(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	redis := startRedis(t)
	cfg := `%GLOBALS%
:%PORT% {
	weir {
		distributed {
			redis ` + redis + `
			expected_nodes 2
		}
		zone shared {
			key   static
			rate  6r/m
			burst 5
			scope cluster
		}
	}
	respond 200
}
`
	a, b := startCaddy(t, bin, "caddyfile", cfg), startCaddy(t, bin, "caddyfile", cfg)
	waitSynced(t, a)
	waitSynced(t, b)
	bBeyond, aBeyond := shareSix(t, a, b)
	if bBeyond.status != 429 {
		t.Fatalf("B beyond the shared burst: %d, want 429 (A's 3 counted)", bBeyond.status)
	}
	if aBeyond.status != 429 {
		t.Fatalf("A beyond the shared burst: %d, want 429 (B's 3 counted)", aBeyond.status)
	}
}

// shareSix spends a limit of 6 shared by instances a and b: 3 requests on A, B's first
// request of the key (at its next sync B learns A's 3), 2 more on B; all must pass. Then one
// more on B and, after A's next sync, one on A: the answers beyond the limit.
func shareSix(t *testing.T, a, b *server) (bBeyond, aBeyond response) {
	t.Helper()
	for i, s := range []*server{a, a, a, b} {
		if r := get(t, s.port, "/"); r.status != 200 {
			t.Fatalf("request %d: %d", i, r.status)
		}
	}
	time.Sleep(600 * time.Millisecond)
	for i := 1; i < 3; i++ {
		if r := get(t, b.port, "/"); r.status != 200 {
			t.Fatalf("B %d: %d", i, r.status)
		}
	}
	bBeyond = get(t, b.port, "/")
	time.Sleep(600 * time.Millisecond)
	return bBeyond, get(t, a.port, "/")
}

// waitSynced waits until the instance's distributed zone has synced with Redis (before that
// it decides on its fallback share).
func waitSynced(t *testing.T, s *server) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s.samples()[`weir_cluster_syncs_total{zone="shared"}`] >= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sync with Redis:\n%s", s.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// roomInWindow waits, when less than need is left of the current wall-clock window (cluster
// windows are aligned on the wall clock), until just after the next one starts: a test's
// requests then all fall into one window.
func roomInWindow(window, need time.Duration) {
	now := time.Now()
	if left := window - time.Duration(now.UnixNano())%window; left < need {
		time.Sleep(left + 50*time.Millisecond)
	}
}
