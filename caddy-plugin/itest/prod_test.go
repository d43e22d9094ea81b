package itest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests run the production binary (target/caddy/caddy, built by xcaddy): real clock,
// real client addresses.

const reloadCfg = `%GLOBALS%
:%PORT% {
	weir {
		zone z {
			key static
			events 3
			window %WINDOW%
		}
		policy %DIR%/p.toml
	}
	handle_errors {
		respond "{http.weir.status} {http.weir.limit} {err.status_code}" {err.status_code}
	}
	respond "%BODY% {http.weir.status}"
}
`

const reloadPolicy = `[zones.g]
size = "64k"
algorithm = "gcra"
rate = "%RATE%"
[[limit]]
class = "*"
zone = "g"
name = "pg"
key = "global"
burst = 2
nodelay = true
`

func writePolicy(t *testing.T, dir, rate string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "p.toml"), []byte(strings.ReplaceAll(reloadPolicy, "%RATE%", rate)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReloadKeepsState: a reload with the same zone parameters and the same policy content
// keeps the counts; a changed layout starts afresh, a changed rate does not. Also checks the placeholders,
// handle_errors, the rejection log and the metrics.
func TestReloadKeepsState(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	dir := t.TempDir()
	writePolicy(t, dir, "1r/h")
	cfg := func(window, body string) string {
		return strings.NewReplacer("%WINDOW%", window, "%BODY%", body, "%DIR%", dir).Replace(reloadCfg)
	}
	s := startCaddy(t, bin, "caddyfile", cfg("1h", "v1"))
	for i := 0; i < 3; i++ {
		if r := get(t, s.port, "/"); r.status != 200 || r.body != "v1 pass" {
			t.Fatalf("request %d: %d %q", i, r.status, r.body)
		}
	}
	r := get(t, s.port, "/")
	if r.status != 429 || r.body != "reject z 429" || r.header.Get("Retry-After") == "" {
		t.Fatalf("4th: %d %q Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
	}
	checkSamples(t, "before the reloads", s.samples(), map[string]float64{
		`weir_limit_requests_total{limit="pg",verdict="passed"}`:  3,
		`weir_limit_requests_total{limit="z",verdict="passed"}`:   3,
		`weir_limit_requests_total{limit="z",verdict="rejected"}`: 1,
	})

	// Same zone, same policy content, another response: state survives.
	s.reload("caddyfile", cfg("1h", "v2"))
	r = getAfterReload(t, s.port, "/")
	if r.status != 429 || r.body != "reject z 429" {
		t.Fatalf("after reload: %d %q, want the zone still full", r.status, r.body)
	}
	// Another window: a new zone (fresh counts); the policy (3 requests: 1 + burst 2,
	// 3 already charged) is still shared, so its limit "pg" now rejects.
	s.reload("caddyfile", cfg("2h", "v3"))
	r = getAfterReload(t, s.port, "/")
	if r.status != 429 || r.body != "reject pg 429" {
		t.Fatalf("after param change: %d %q, want the zone fresh and the policy full", r.status, r.body)
	}
	// Changed policy content (its rate): a new engine over the same zone, whose key keeps its
	// excess (1.5h ahead at 2r/h, beyond the burst's 1h), and the same counters.
	writePolicy(t, dir, "2r/h")
	s.reload("caddyfile", cfg("3h", "v4"))
	if r = getAfterReload(t, s.port, "/"); r.status != 429 || r.body != "reject pg 429" {
		t.Fatalf("after policy change: %d %q, want the policy's zone still full", r.status, r.body)
	}

	s.assertAlive()
	if !strings.Contains(s.Logs(), "rate limit exceeded") {
		t.Errorf("no rejection log line in:\n%s", s.Logs())
	}
	// The counters of every engine these configs had, summed: a new engine's add to its
	// predecessor's (z: 3 + 1 + 1 passed), except where the policy's counter block was kept
	// (pg's limits never changed: 3 passed, 2 rejected).
	checkSamples(t, "after the reloads", s.samples(), map[string]float64{
		`weir_limit_requests_total{limit="pg",verdict="passed"}`:   3,
		`weir_limit_requests_total{limit="pg",verdict="rejected"}`: 2,
		`weir_limit_requests_total{limit="z",verdict="passed"}`:    5,
		`weir_limit_requests_total{limit="z",verdict="rejected"}`:  2,
	})
	if m := string(s.metrics()); strings.Contains(m, "caddy_http_weir") {
		t.Errorf("the old caddy_http_weir_* family is still served:\n%s", grepLines(m, "weir"))
	}
}

// TestReloadKeepsUnchangedZone: a reload that changes one inline zone of a weir block gives
// the block a new engine; the zone left unchanged keeps its state (its table outlives the old
// config), the changed one starts afresh.
func TestReloadKeepsUnchangedZone(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	cfg := func(window string) string {
		return strings.ReplaceAll(`%GLOBALS%
:%PORT% {
	weir {
		zone same {
			match {
				path /same
			}
			key static
			events 1
			window 1h
		}
		zone edited {
			match {
				path /edited
			}
			key static
			events 1
			window %WINDOW%
		}
	}
	respond "ok"
}
`, "%WINDOW%", window)
	}
	s := startCaddy(t, bin, "caddyfile", cfg("1h"))
	for _, p := range []string{"/same", "/edited"} {
		if r := get(t, s.port, p); r.status != 200 {
			t.Fatalf("%s: %d", p, r.status)
		}
		if r := get(t, s.port, p); r.status != 429 {
			t.Fatalf("%s again: %d, want 429", p, r.status)
		}
	}
	before := s.samples()
	checkSamples(t, "before the reload", before, map[string]float64{
		`weir_limit_requests_total{limit="same",verdict="passed"}`:     1,
		`weir_limit_requests_total{limit="same",verdict="rejected"}`:   1,
		`weir_limit_requests_total{limit="edited",verdict="rejected"}`: 1,
	})
	s.reload("caddyfile", cfg("2h"))
	if r := getAfterReload(t, s.port, "/same"); r.status != 429 {
		t.Errorf("the unchanged zone after the reload: %d, want 429 (state kept)", r.status)
	}
	if r := get(t, s.port, "/edited"); r.status != 200 {
		t.Errorf("the edited zone after the reload: %d, want 200 (fresh)", r.status)
	}
	// The new engine's counters add to the old one's; the kept zone's table counts once.
	after := s.samples()
	checkSamples(t, "after the reload", after, map[string]float64{
		`weir_limit_requests_total{limit="same",verdict="passed"}`:     1,
		`weir_limit_requests_total{limit="same",verdict="rejected"}`:   2,
		`weir_limit_requests_total{limit="edited",verdict="passed"}`:   2,
		`weir_limit_requests_total{limit="edited",verdict="rejected"}`: 1,
		// The kept table's own counts, once (not added to the old engine's); the edited
		// zone's new table's add to its old one's.
		`weir_zone_inserts_total{zone="same"}`:   1,
		`weir_zone_rejected_total{zone="same"}`:  2,
		`weir_zone_inserts_total{zone="edited"}`: 2,
		`weir_zone_capacity{zone="same"}`:        before[`weir_zone_capacity{zone="same"}`],
	})
	for k, v := range before { // every counter
		if name, _, _ := strings.Cut(k, "{"); strings.HasSuffix(name, "_total") && after[k] < v {
			t.Errorf("counter %s went from %v to %v over the reload", k, v, after[k])
		}
	}
	s.assertAlive()
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// slowUpstream counts requests in flight and holds each for d.
func slowUpstream(t *testing.T, d time.Duration) (*httptest.Server, *atomic.Int64) {
	var inflight, peak atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(d)
		inflight.Add(-1)
		io.WriteString(w, "slow")
	}))
	t.Cleanup(srv.Close)
	return srv, &peak
}

// TestConcurrencyQueue: a policy concurrency limit (max 2, queue 2, timeout 400 ms) in front of
// an upstream that takes 300 ms, and an inline concurrency zone. (Queue timeouts and clients
// leaving a policy queue: tests/hosts/queue-timeout-and-leave.)
func TestConcurrencyQueue(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	up, peak := slowUpstream(t, 300*time.Millisecond)
	pol := writeFile(t, t.TempDir(), "c.toml", `[zones.c]
size = "64k"
algorithm = "concurrency"
max = 2
[[limit]]
class = "*"
zone = "c"
name = "inflight"
key = "global"
queue = 2
timeout = "400ms"
`)
	cfg := strings.NewReplacer("%UP%", strings.TrimPrefix(up.URL, "http://"), "%POL%", pol).Replace(`%GLOBALS%
:%PORT% {
	handle /policy {
		weir {
			policy %POL%
		}
		reverse_proxy %UP%
	}
	handle /inline {
		weir {
			zone conc {
				key {client_ip}
				max 1 queue 1 timeout 100ms
			}
		}
		reverse_proxy %UP%
	}
}
`)
	s := startCaddy(t, bin, "caddyfile", cfg)
	// 6 at once: 2 run, 2 queue (one of them gets a slot at 300 ms and finishes at 600 ms;
	// the other too), 2 find the queue full and are refused at once.
	codes := fire(t, s.port, "/policy", 6, 0)
	if codes[200] != 4 || codes[429] != 2 {
		t.Errorf("policy queue: %v, want 4×200 and 2×429", codes)
	}
	if p := peak.Load(); p > 2 {
		t.Errorf("upstream saw %d in flight, max 2", p)
	}
	// Inline zone: max 1, queue 1 with 100 ms timeout < 300 ms: 1 passes, 1 times out, the
	// rest are refused.
	codes = fire(t, s.port, "/inline", 4, 0)
	if codes[200] != 1 || codes[429] != 3 {
		t.Errorf("inline queue: %v, want 1×200 and 3×429", codes)
	}
	s.assertAlive()
}

// fire sends n concurrent GETs and counts statuses.
func fire(t *testing.T, port int, path string, n int, delay time.Duration) map[int]int {
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := get(t, port, path)
			mu.Lock()
			codes[r.status]++
			mu.Unlock()
		}()
		time.Sleep(delay)
	}
	wg.Wait()
	return codes
}

// TestConcurrentLoad: 16 clients × 50 requests against a 100-per-hour zone and a policy
// GCRA limit: exactly the quota passes, whatever the interleaving.
func TestConcurrentLoad(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	dir := t.TempDir()
	pol := `[zones.g]
size = "64k"
algorithm = "gcra"
rate = "1r/h"
[[limit]]
class = "*"
zone = "g"
key = "global"
burst = 149
nodelay = true
`
	if err := os.WriteFile(filepath.Join(dir, "g.toml"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(`%GLOBALS%
:%PORT% {
	handle /zone {
		weir {
			zone hot {
				key static
				events 100
				window 1h
			}
		}
		respond 200
	}
	handle /policy {
		weir {
			policy %POL%
		}
		respond 200
	}
}
`, "%POL%", filepath.Join(dir, "g.toml"))
	s := startCaddy(t, bin, "caddyfile", cfg)
	for _, c := range []struct {
		path string
		want int
	}{{"/zone", 100}, {"/policy", 150}} {
		var ok atomic.Int64
		var wg sync.WaitGroup
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					if get(t, s.port, c.path).status == 200 {
						ok.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		// A sliding window that happens to cross an hour boundary mid-test may admit a few
		// more (the estimate); in practice the count is exact.
		if got := int(ok.Load()); got != c.want {
			t.Errorf("%s: %d passed of 800, want %d", c.path, got, c.want)
		}
	}
}

// TestBadConfigs: `caddy validate` / `caddy adapt` fail and say where.
func TestBadConfigs(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	dir := t.TempDir()
	badPolicy := "[zones.z]\nsize = \"64k\"\nalgorithm = \"gcra\"\nrate = \"10r/w\"\n"
	if err := os.WriteFile(filepath.Join(dir, "bad.toml"), []byte(badPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, caddyfile, want string
	}{
		{"events not a number", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\tevents ten\n\t\t\twindow 1m\n\t\t}\n\t}\n}\n",
			`invalid events .*ten.*Caddyfile:4`},
		{"zone without window", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\tevents 10\n\t\t}\n\t}\n}\n",
			`requires both a window and events.*Caddyfile:5`},
		{"two algorithms", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\tevents 10\n\t\t\twindow 1m\n\t\t\trate 10r/s\n\t\t}\n\t}\n}\n",
			`exactly one of.*Caddyfile:7`},
		{"bad rate unit", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\trate 10r/w burst 5\n\t\t}\n\t}\n}\n",
			`unknown rate unit.*Caddyfile:4`},
		{"unknown setting", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\tevnts 10\n\t\t}\n\t}\n}\n",
			`unknown setting .*evnts.*Caddyfile:4`},
		{"bad policy", ":8080 {\n\tweir {\n\t\tpolicy " + dir + "/bad.toml\n\t}\n}\n",
			regexp.QuoteMeta(dir+"/bad.toml:4:") + `.*unknown rate unit.*Caddyfile:3`},
		{"missing policy", ":8080 {\n\tweir {\n\t\tpolicy " + dir + "/nope.toml\n\t}\n}\n",
			`reading policy.*Caddyfile:3`},
		{"size beyond int64 JSON", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\trate 10r/s\n\t\t\tsize 9223372036854775807\n\t\t}\n\t}\n}\n",
			`size 9223372036854775807 is too large.*Caddyfile:5`},
		{"size above 1 TiB", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\trate 10r/s\n\t\t\tsize 2199023255552\n\t\t}\n\t}\n}\n",
			`size 2199023255552 is too large: at most 1099511627776 bytes.*Caddyfile:5`},
		{"size 1", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\trate 10r/s\n\t\t\tsize 1\n\t\t}\n\t}\n}\n",
			`size 1 is below the [0-9]+ bytes.*Caddyfile:5`},
		{"log zone too small", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\tevents 4096\n\t\t\twindow 1m\n\t\t\tsize 4096\n\t\t}\n\t}\n}\n",
			`size 4096 is below the [0-9]+ bytes.*Caddyfile:7`},
		{"events twice", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\tevents 0\n\t\t\tevents 5\n\t\t\twindow 1m\n\t\t}\n\t}\n}\n",
			`events given twice.*Caddyfile:5`},
		{"burst twice", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\trate 1r/s burst 0\n\t\t\tburst 5\n\t\t}\n\t}\n}\n",
			`burst given twice.*Caddyfile:5`},
		{"bad log_level", ":8080 {\n\tweir {\n\t\tzone z {\n\t\t\trate 1r/s\n\t\t\tlog_level loud\n\t\t}\n\t}\n}\n",
			`unknown log_level.*Caddyfile:5`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "Caddyfile")
			if err := os.WriteFile(p, []byte(c.caddyfile), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, sub := range []string{"validate", "adapt"} {
				out, err := exec.Command(bin, sub, "--config", p, "--adapter", "caddyfile").CombinedOutput()
				if err == nil {
					t.Errorf("%s succeeded on a bad config:\n%s", sub, out)
					continue
				}
				if !regexp.MustCompile(c.want).Match(out) {
					t.Errorf("%s output does not match %q:\n%s", sub, c.want, out)
				}
			}
		})
	}
	// JSON: policy errors surface at validate (provisioning) with file:line:col.
	js := fmt.Sprintf(`{"apps":{"http":{"servers":{"s":{"listen":[":8080"],"routes":[{"handle":[{"handler":"weir","policy":%q}]}]}}}}}`,
		filepath.Join(dir, "bad.toml"))
	p := filepath.Join(dir, "c.json")
	if err := os.WriteFile(p, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "validate", "--config", p).CombinedOutput()
	if err == nil || !strings.Contains(string(out), dir+"/bad.toml:4:") {
		t.Errorf("JSON validate: err=%v\n%s", err, out)
	}
	// JSON: a zone size below the table's minimum.
	js = `{"apps":{"http":{"servers":{"s":{"listen":[":8080"],"routes":[{"handle":[{"handler":"weir","rate_limits":{"z":{"rate":"1r/s","size":1}}}]}]}}}}}`
	if err := os.WriteFile(p, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "validate", "--config", p).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "size 1 is below") {
		t.Errorf("JSON validate of size 1: err=%v\n%s", err, out)
	}
}

// TestClientIP: the peer weir sees is Caddy's client_ip (the server's trusted_proxies
// honoured). (Delays: tests/hosts/delay.)
func TestClientIP(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	pol := writeFile(t, t.TempDir(), "p.toml", `[zones.ip]
size = "64k"
algorithm = "gcra"
rate = "1r/h"
[[limit]]
class = "*"
zone = "ip"
name = "per-ip"
nodelay = true
`)
	cfg := strings.ReplaceAll(`{
	admin 127.0.0.1:%ADMIN%
	default_bind 127.0.0.1
	auto_https off
	servers {
		trusted_proxies static 127.0.0.0/8
		trusted_proxies_strict
	}
}
:%PORT% {
	weir {
		policy %POL%
	}
	respond "{http.weir.status}"
}
`, "%POL%", pol)
	s := startCaddy(t, bin, "caddyfile", cfg)
	xff := func(ip string) [2]string { return [2]string{"X-Forwarded-For", ip} }
	for _, c := range []struct {
		ip     string
		status int
	}{{"198.51.100.1", 200}, {"198.51.100.2", 200}, {"198.51.100.1", 429}, {"198.51.100.3", 200}} {
		if r := get(t, s.port, "/ip", xff(c.ip)); r.status != c.status {
			t.Errorf("client %s: %d, want %d", c.ip, r.status, c.status)
		}
	}
}

// TestDirectiveOrder: in a site block, weir runs before basic_auth (no password hashing for
// rejected requests), whatever the order in the file.
func TestDirectiveOrder(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	p := filepath.Join(t.TempDir(), "Caddyfile")
	cf := ":8080 {\n\tbasic_auth {\n\t\tbob $2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG\n\t}\n" +
		"\tweir {\n\t\tzone z {\n\t\t\tkey {client_ip}\n\t\t\tevents 5\n\t\t\twindow 1m\n\t\t}\n\t}\n\trespond ok\n}\n"
	if err := os.WriteFile(p, []byte(cf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "adapt", "--config", p, "--adapter", "caddyfile").Output()
	if err != nil {
		t.Fatal(err)
	}
	w, a := strings.Index(string(out), `"handler":"weir"`), strings.Index(string(out), `"handler":"authentication"`)
	if w < 0 || a < 0 || w > a {
		t.Errorf("weir (%d) should come before authentication (%d):\n%s", w, a, out)
	}
}

const clusterPolicy = `[zones.c]
size = "64k"
algorithm = "sliding"
events = 100
window = "1s"
scope = "cluster"
redis = "redis://127.0.0.1:%REDIS%/0"
sync_interval = "50ms"
expected_nodes = 2
[[limit]]
class = "*"
zone = "c"
name = "pc"
key = "global"
`

const clusterCfg = `%GLOBALS%
:%PORT% {
	weir {
		policy %DIR%/c.toml
	}
	respond "ok {http.weir.status}"
}
`

// TestClusterMessagesGoToCaddysLog: a cluster zone whose Redis does not answer keeps serving
// (on the fallback share) and its syncer's "sync failed" reaches Caddy's logger, named
// http.handlers.weir.cluster, instead of bare standard error.
func TestClusterMessagesGoToCaddysLog(t *testing.T) {
	bin := binary(t, "WEIR_CADDY")
	dir := t.TempDir()
	policy := strings.ReplaceAll(clusterPolicy, "%REDIS%", fmt.Sprint(freePort(t)))
	if err := os.WriteFile(filepath.Join(dir, "c.toml"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startCaddy(t, bin, "caddyfile", strings.ReplaceAll(clusterCfg, "%DIR%", dir))
	if r := get(t, s.port, "/"); r.status != 200 {
		t.Fatalf("with Redis away: %d %q", r.status, r.body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		logs := s.Logs()
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, "http.handlers.weir.cluster") && strings.Contains(line, "sync failed") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 'sync failed' from logger http.handlers.weir.cluster in:\n%s", logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
